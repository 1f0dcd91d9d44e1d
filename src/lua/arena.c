/* SPDX-License-Identifier: BSD-2-Clause */
/* The bump allocator of the strings hooks make (umbra/hooks.h). */
#include <stdlib.h>
#include <string.h>

#include "umbra/hooks.h"

struct um_arena_block {
    struct um_arena_block *next;
    size_t used, cap;
    char data[];
};

void *um_arena_alloc(struct um_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct um_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 4000 ? n : 4000;
        b = um_malloc(sizeof(*b) + cap);
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *um_arena_strdup(struct um_arena *a, const char *s, size_t n)
{
    char *p = um_arena_alloc(a, n + 1);
    if (n > 0)
        memcpy(p, s, n); /* s may be NULL when n is 0 (an empty um_buf has no base) */
    p[n] = '\0';
    return p;
}

void um_arena_reset(struct um_arena *a)
{
    struct um_arena_block *b = a->head;
    while (b) {
        struct um_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}
