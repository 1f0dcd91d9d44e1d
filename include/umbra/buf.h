/* SPDX-License-Identifier: BSD-2-Clause */
/* A byte buffer that text and response heads are built in, in one of two modes:
 *
 * - growable (um_buf_init, or a zeroed struct): the buffer owns base, which grows on the
 *   heap as bytes are appended; an allocation failure panics with file:line, as um_malloc
 *   does. um_buf_dispose frees it.
 * - fixed (um_buf_init_fixed): base is the caller's storage of cap bytes and never moves.
 *   Appends store what fits and len counts every byte appended, as snprintf does, so
 *   len >= cap after the fact says the storage was too small. Nothing is allocated.
 *
 * In both modes base holds a NUL after the stored bytes whenever cap > 0 (the NUL is not
 * counted in len). A buffer belongs to one thread at a time. */
#ifndef UMBRA_BUF_H
#define UMBRA_BUF_H

#include <stdarg.h>
#include <string.h>

#include "umbra/common.h"

struct um_buf {
    char *base; /* NULL while a growable buffer is empty */
    size_t len; /* bytes appended (fixed mode: may exceed what was stored) */
    size_t cap; /* bytes at base, the NUL's included */
    bool _fixed;
};

/* An empty growable buffer; nothing is allocated until the first append. */
void um_buf_init(struct um_buf *b);

/* A fixed buffer over storage[0..size), which the caller owns and which must outlive b.
 * storage may be NULL when size is 0 (then only the length is counted). */
void um_buf_init_fixed(struct um_buf *b, char *storage, size_t size);

/* Frees a growable buffer's memory (a fixed buffer's storage is left alone); b is empty
 * afterwards and may be used again. */
void um_buf_dispose(struct um_buf *b);

/* Gives an empty growable buffer the heap memory mem of cap > 0 bytes (from malloc, e.g. a
 * pool's block), which it owns from now on as if it had allocated it: it may realloc it,
 * and um_buf_dispose frees it (or um_buf_detach hands it back). */
void um_buf_adopt(struct um_buf *b, char *mem, size_t cap);

/* Forgets the bytes, keeps the memory. */
void um_buf_reset(struct um_buf *b);

/* Growable buffers only: makes room for n more bytes (and the NUL) without moving later
 * appends. The caller may write up to n bytes at base + len and then um_buf_commit them. */
void um_buf_reserve(struct um_buf *b, size_t n);

/* Adds n bytes the caller wrote at base + len (within what um_buf_reserve made room for)
 * to the buffer. */
void um_buf_commit(struct um_buf *b, size_t n);

/* Hands a growable buffer's bytes to the caller, who frees them with free(); NULL when
 * nothing was ever appended. b is empty afterwards. */
char *um_buf_detach(struct um_buf *b);

/* The bytes that can be appended before a growable buffer grows, or a fixed one stops
 * storing. */
static inline size_t um_buf_room(const struct um_buf *b)
{
    return b->len < b->cap ? b->cap - b->len - 1 : 0;
}

/* um_buf_append's way when the bytes do not fit. */
void um__buf_append_slow(struct um_buf *b, const void *p, size_t n);

/* Appends the n bytes at p (p may be NULL when n is 0). The common case, when they fit,
 * is inline: response heads are built this way, a few dozen appends per response. */
static inline void um_buf_append(struct um_buf *b, const void *p, size_t n)
{
    if (n > 0 && n < b->cap && b->len < b->cap - n) {
        memcpy(b->base + b->len, p, n);
        b->len += n;
        b->base[b->len] = '\0';
        return;
    }
    um__buf_append_slow(b, p, n);
}

/* Appends the NUL-terminated string s. */
static inline void um_buf_append_str(struct um_buf *b, const char *s)
{
    um_buf_append(b, s, strlen(s));
}

/* Appends one byte. */
static inline void um_buf_append_char(struct um_buf *b, char c)
{
    um_buf_append(b, &c, 1);
}

/* Appends what vsnprintf writes for fmt. A formatting error (vsnprintf < 0) appends
 * nothing. */
__attribute__((format(printf, 2, 3))) void um_buf_printf(struct um_buf *b, const char *fmt, ...);
__attribute__((format(printf, 2, 0))) void um_buf_vprintf(struct um_buf *b, const char *fmt,
                                                          va_list ap);

#endif
