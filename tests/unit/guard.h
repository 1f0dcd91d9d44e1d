/* Test helper: places input bytes against a PROT_NONE page so that a parser reading past
 * the end (or, with GUARD_BEFORE, before the start) crashes instead of passing by luck
 * (picohttpparser's approach). The bytes stay writable, for decoders that work in place. */
#ifndef UMBRA_TEST_GUARD_H
#define UMBRA_TEST_GUARD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum guard_side {
    GUARD_AFTER,  /* the byte after the input is unmapped */
    GUARD_BEFORE, /* the byte before the input is unmapped */
};

struct guard {
    char *map;
    size_t map_len;
    char *lo, *hi; /* the accessible region */
    enum guard_side side;
};

/* Maps room for at least cap bytes next to a guard page. Aborts on failure. */
static inline void guard_init(struct guard *g, size_t cap, enum guard_side side)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (cap + page - 1) / page * page;
    if (body == 0) body = page;
    g->map_len = body + page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) {
        perror("mmap");
        abort();
    }
    char *fence = side == GUARD_AFTER ? g->map + body : g->map;
    if (mprotect(fence, page, PROT_NONE) != 0) {
        perror("mprotect");
        abort();
    }
    g->lo = side == GUARD_AFTER ? g->map : g->map + page;
    g->hi = g->lo + body;
    g->side = side;
}

/* Copies len bytes (len <= cap) against the guard page and returns where they now are.
 * Replaces what an earlier call placed. */
static inline char *guard_put(struct guard *g, const void *data, size_t len)
{
    if (len > (size_t)(g->hi - g->lo)) abort();
    char *p = g->side == GUARD_AFTER ? g->hi - len : g->lo;
    if (len > 0) memmove(p, data, len);
    return p;
}

static inline void guard_dispose(struct guard *g)
{
    if (g->map != NULL) munmap(g->map, g->map_len);
    g->map = NULL;
}

#endif
