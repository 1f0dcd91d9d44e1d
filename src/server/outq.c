/* SPDX-License-Identifier: BSD-2-Clause */
/* A connection's output queue (outq.h): its memory, its file, and flushing it through a
 * transport.
 *
 * Two ways to flush. A transport with writev and sendfile (a plain socket) sends the
 * buffer and the borrowed segments behind it gathered into one writev (a head and a cached
 * body in one system call), a buffer alone with one write, flagged MSG_MORE when a file
 * follows, and the file with sendfile, so that the bytes are never copied. A transport without them (TLS) encrypts from memory: each buffer is
 * written in turn, and file bytes are read into fbuf first. Both stop after a turn's
 * budget of bytes. */
#include "outq.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "umbra/log.h"

#define WRITE_BUDGET (1024 * 1024) /* bytes per connection per loop turn */
#define COPY_CHUNK (16 * 1024)     /* file bytes read at once for a copying transport */
_Static_assert(COPY_CHUNK <= UM__OUTQ_BIG, "file copies are read into a big buffer");

void um__outq_pools_init(struct um__outq_pools *p, size_t keep)
{
    um_bufpool_init(&p->bufs, UM__OUTQ_BUF, keep);
    um_bufpool_init(&p->big, UM__OUTQ_BIG, keep / 4);
    um_bufpool_init(&p->refs, UM__OUTQ_MAX_REFS * sizeof(struct um__outq_ref), keep);
}

void um__outq_pools_dispose(struct um__outq_pools *p)
{
    um_bufpool_dispose(&p->bufs);
    um_bufpool_dispose(&p->big);
    um_bufpool_dispose(&p->refs);
}

void um__outq_init(struct um__outq *q, struct um__outq_pools *pools)
{
    memset(q, 0, sizeof(*q));
    q->pools = pools;
    q->file_fd = -1;
}

void um__outq_grow(struct um__outq *q, size_t n)
{
    struct um_buf *b = &q->buf;
    if (q->pos > 0 && q->pos == b->len) {
        q->pos = q->mark = 0;
        um_buf_reset(b);
        if (n <= um_buf_room(b))
            return;
    }
    if (b->base == NULL) {
        if (n < UM__OUTQ_BUF)
            um_buf_adopt(b, um_bufpool_get(&q->pools->bufs), UM__OUTQ_BUF);
        else if (n < UM__OUTQ_BIG)
            um_buf_adopt(b, um_bufpool_get(&q->pools->big), UM__OUTQ_BIG);
        else
            um_buf_reserve(b, n);
        return;
    }
    if (b->cap == UM__OUTQ_BUF && b->len + n < UM__OUTQ_BIG) {
        /* Outgrown: into a big buffer from the pool, the small one back to it. */
        struct um_buf small = *b;
        um_buf_init(b);
        um_buf_adopt(b, um_bufpool_get(&q->pools->big), UM__OUTQ_BIG);
        um_buf_append(b, small.base, small.len);
        um_bufpool_put(&q->pools->bufs, small.base);
        return;
    }
    /* Larger still: the heap's, from now until the queue is idle. */
    if (b->cap == UM__OUTQ_BUF)
        um_bufpool_forget(&q->pools->bufs);
    else if (b->cap == UM__OUTQ_BIG)
        um_bufpool_forget(&q->pools->big);
    um_buf_reserve(b, n);
}

/* Releases borrowed segments from the front: n of them, or all when n is UINT_MAX. */
static void refs_release(struct um__outq *q, unsigned n)
{
    while (n-- > 0 && q->ref_head < q->num_refs) {
        struct um__outq_ref *r = &q->refs[q->ref_head++];
        q->ref_bytes -= r->len;
        r->release(r->ctx);
    }
    if (q->ref_head == q->num_refs)
        q->ref_head = q->num_refs = 0;
}

/* Takes n sent bytes off the front segment, which has more than n. */
static void ref_advance(struct um__outq *q, size_t n)
{
    struct um__outq_ref *r = &q->refs[q->ref_head];
    r->p += n;
    r->len -= n;
    q->ref_bytes -= n;
}

static void drop_file(struct um__outq *q)
{
    if (q->file_fd >= 0)
        close(q->file_fd);
    q->file_fd = -1;
    q->file_left = 0;
}

void um__outq_drop(struct um__outq *q)
{
    drop_file(q);
    refs_release(q, UINT_MAX);
}

void um__outq_dispose(struct um__outq *q)
{
    um__outq_shrink(q);
}

void um__outq_shrink(struct um__outq *q)
{
    /* A buffer that grew past the pools' sizes goes back to the system. */
    if (q->buf.cap == UM__OUTQ_BUF)
        um_bufpool_put(&q->pools->bufs, um_buf_detach(&q->buf));
    else if (q->buf.cap == UM__OUTQ_BIG)
        um_bufpool_put(&q->pools->big, um_buf_detach(&q->buf));
    else
        um_buf_dispose(&q->buf);
    q->pos = q->mark = 0;
    UM_ASSERT(q->ref_head == q->num_refs);
    um_bufpool_put(&q->pools->refs, q->refs);
    q->refs = NULL;
    q->ref_head = q->num_refs = 0;
    um_bufpool_put(&q->pools->big, q->fbuf);
    q->fbuf = NULL;
    q->fpos = q->flen = 0;
}

void um__outq_file(struct um__outq *q, int fd, uint64_t off, uint64_t len, bool copy_small)
{
    UM_ASSERT(q->file_fd < 0);
    if (copy_small && len <= UM__OUTQ_COPY_FILE) {
        um__outq_reserve(q, (size_t)len);
        ssize_t r = pread(fd, q->buf.base + q->buf.len, (size_t)len, (off_t)off);
        if (r == (ssize_t)len) {
            um_buf_commit(&q->buf, (size_t)len);
            close(fd);
            return;
        }
    }
    q->file_fd = fd;
    q->file_off = off;
    q->file_left = len;
}

/* Everything is sent: the buffer starts over. */
static int flushed(struct um__outq *q)
{
    q->pos = q->mark = 0;
    um_buf_reset(&q->buf);
    return UM_OK;
}

/* Flushing through a transport that copies (no writev, no sendfile). */
static int flush_copying(struct um__outq *q, struct um_transport *t, int *want)
{
    size_t budget = WRITE_BUDGET;
    for (;;) {
        const char *p;
        size_t len;
        bool from_file = false, from_ref = false;
        bool refs = q->ref_head < q->num_refs;
        size_t end = refs ? q->mark : q->buf.len; /* the buffer's bytes before the refs */
        if (q->pos < end) {
            p = q->buf.base + q->pos;
            len = end - q->pos;
        } else if (refs) {
            p = q->refs[q->ref_head].p;
            len = q->refs[q->ref_head].len;
            from_ref = true;
        } else if (q->fpos < q->flen || q->file_left > 0) {
            if (q->fpos == q->flen) {
                if (q->fbuf == NULL)
                    q->fbuf = um_bufpool_get(&q->pools->big); /* COPY_CHUNK of it */
                size_t n = q->file_left < COPY_CHUNK ? (size_t)q->file_left : COPY_CHUNK;
                ssize_t r = pread(q->file_fd, q->fbuf, n, (off_t)q->file_off);
                if (r <= 0) {
                    um_log_warn("file read failed while being sent; closing connection");
                    return UM_ERR;
                }
                q->fpos = 0;
                q->flen = (size_t)r;
                q->file_off += (uint64_t)r;
                q->file_left -= (uint64_t)r;
                if (q->file_left == 0)
                    drop_file(q);
            }
            p = q->fbuf + q->fpos;
            len = q->flen - q->fpos;
            from_file = true;
        } else {
            return flushed(q);
        }
        ssize_t n = t->ops->write(t, p, len, 0, want);
        if (n < 0)
            return (int)n; /* UM_AGAIN or UM_ERR */
        if (from_file) {
            q->fpos += (size_t)n;
        } else if (from_ref) {
            if ((size_t)n >= q->refs[q->ref_head].len)
                refs_release(q, 1);
            else
                ref_advance(q, (size_t)n);
        } else {
            q->pos += (size_t)n;
        }
        if ((size_t)n >= budget)
            return um__outq_pending(q) ? UM_DONE : flushed(q);
        budget -= (size_t)n;
    }
}

int um__outq_flush(struct um__outq *q, struct um_transport *t, int *want)
{
    if (t->ops->sendfile == NULL)
        return flush_copying(q, t, want);
    size_t budget = WRITE_BUDGET;
    for (;;) {
        ssize_t n;
        if (q->pos < q->buf.len && q->ref_head == q->num_refs) {
            n = t->ops->write(t, q->buf.base + q->pos, q->buf.len - q->pos,
                              q->file_left ? UM_TRANSPORT_F_MORE : 0, want);
            if (n > 0)
                q->pos += (size_t)n;
        } else if (q->ref_head < q->num_refs) {
            /* The buffered bytes (a response head) and the borrowed segments behind them,
             * gathered into one writev: a cache hit leaves in one system call. */
            struct iovec iov[UM__OUTQ_MAX_REFS + 1];
            int k = 0;
            size_t total = 0, from_buf = 0;
            if (q->pos < q->mark) { /* only what was buffered before the segments */
                from_buf = q->mark - q->pos;
                iov[k++] = (struct iovec){q->buf.base + q->pos, from_buf};
                total = from_buf;
            }
            /* No more than this turn's budget, so that one large response cannot hold the
             * loop while other connections wait. */
            for (unsigned i = q->ref_head; i < q->num_refs && total < budget; i++, k++) {
                size_t len = q->refs[i].len;
                if (len > budget - total)
                    len = budget - total;
                iov[k] = (struct iovec){(void *)q->refs[i].p, len};
                total += len;
            }
            n = t->ops->writev(t, iov, k, want);
            if (n > 0) {
                size_t left = (size_t)n;
                if (from_buf > 0) {
                    size_t b = left < from_buf ? left : from_buf;
                    q->pos += b;
                    left -= b;
                }
                while (left > 0) {
                    size_t len = q->refs[q->ref_head].len;
                    if (left >= len) {
                        left -= len;
                        refs_release(q, 1);
                    } else {
                        ref_advance(q, left);
                        left = 0;
                    }
                }
            }
        } else if (q->file_left > 0) {
            size_t chunk = q->file_left < budget ? (size_t)q->file_left : budget;
            uint64_t off = q->file_off;
            n = t->ops->sendfile(t, q->file_fd, &off, chunk, want);
            if (n == 0) {
                um_log_warn("file shrank while being sent; closing connection");
                return UM_ERR;
            }
            if (n > 0) {
                q->file_off += (uint64_t)n;
                q->file_left -= (uint64_t)n;
                if (q->file_left == 0)
                    drop_file(q);
            }
        } else {
            return flushed(q);
        }
        if (n < 0)
            return (int)n; /* UM_AGAIN or UM_ERR */
        if ((size_t)n >= budget)
            return um__outq_pending(q) ? UM_DONE : flushed(q);
        budget -= (size_t)n;
    }
}
