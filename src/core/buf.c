/* SPDX-License-Identifier: BSD-2-Clause */
/* The byte buffer (see buf.h). */
#include "umbra/buf.h"

#include <stdio.h>
#include <stdlib.h>

#define FIRST_CAP 4096

void um_buf_init(struct um_buf *b)
{
    memset(b, 0, sizeof *b);
}

void um_buf_init_fixed(struct um_buf *b, char *storage, size_t size)
{
    b->base = storage;
    b->len = 0;
    b->cap = storage != NULL ? size : 0;
    b->_fixed = true;
    if (b->cap > 0) b->base[0] = '\0';
}

void um_buf_dispose(struct um_buf *b)
{
    if (!b->_fixed) free(b->base);
    memset(b, 0, sizeof *b);
}

void um_buf_adopt(struct um_buf *b, char *mem, size_t cap)
{
    UM_ASSERT(!b->_fixed && b->base == NULL && mem != NULL && cap > 0);
    b->base = mem;
    b->len = 0;
    b->cap = cap;
    b->base[0] = '\0';
}

void um_buf_reset(struct um_buf *b)
{
    b->len = 0;
    if (b->cap > 0) b->base[0] = '\0';
}

void um_buf_reserve(struct um_buf *b, size_t n)
{
    UM_ASSERT(!b->_fixed);
    UM_ASSERT(n < SIZE_MAX / 2 - b->len);
    if (b->len + n < b->cap) return;
    size_t cap = b->cap ? b->cap : FIRST_CAP;
    while (cap <= b->len + n)
        cap *= 2;
    b->base = um_realloc(b->base, cap);
    b->cap = cap;
    b->base[b->len] = '\0';
}

void um_buf_commit(struct um_buf *b, size_t n)
{
    UM_ASSERT(!b->_fixed && n < b->cap - b->len);
    b->len += n;
    b->base[b->len] = '\0';
}

char *um_buf_detach(struct um_buf *b)
{
    UM_ASSERT(!b->_fixed);
    char *p = b->base;
    memset(b, 0, sizeof *b);
    return p;
}

void um__buf_append_slow(struct um_buf *b, const void *p, size_t n)
{
    if (n == 0) return;
    if (!b->_fixed) {
        um_buf_reserve(b, n);
        memcpy(b->base + b->len, p, n);
        b->len += n;
        b->base[b->len] = '\0';
        return;
    }
    size_t room = um_buf_room(b);
    size_t k = n < room ? n : room;
    if (k > 0) memcpy(b->base + b->len, p, k);
    if (b->cap > 0 && b->len < b->cap) b->base[b->len + k] = '\0';
    b->len += n;
}

void um_buf_vprintf(struct um_buf *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    /* First into the space there is (often enough), then once more after growing. */
    size_t space = b->len < b->cap ? b->cap - b->len : 0; /* the NUL's included */
    int n = vsnprintf(space > 0 ? b->base + b->len : NULL, space, fmt, ap);
    if (n < 0) {
        if (space > 0) b->base[b->len] = '\0';
    } else if ((size_t)n < space || b->_fixed) {
        b->len += (size_t)n;
    } else {
        um_buf_reserve(b, (size_t)n);
        vsnprintf(b->base + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void um_buf_printf(struct um_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    um_buf_vprintf(b, fmt, ap);
    va_end(ap);
}
