/* SPDX-License-Identifier: BSD-2-Clause */
/* A connection's output queue (outq.c): what is waiting to be sent to the client, in send
 * order: the bytes of buf[pos..len) (response heads, copied body bytes, chunk framing),
 * then borrowed segments refs[ref_head..num_refs) (body bytes sent without copying, e.g.
 * from the cache, each released once sent), then file_left bytes of file_fd at file_off.
 *
 * Segments and a file never follow each other in one response, and the connection parses
 * no next request while either is pending, so this order is the send order.
 *
 * The appends are inline: a response head is a few dozen of them. */
#ifndef UMBRA_SERVER_OUTQ_H
#define UMBRA_SERVER_OUTQ_H

#include <string.h>

#include "umbra/buf.h"
#include "umbra/bufpool.h"
#include "umbra/common.h"
#include "umbra/transport.h"

#define UM__OUTQ_MAX_REFS 64
/* Past this many bytes of buffered output, the connection parses no pipelined request. */
#define UM__OUTQ_BACKLOG (64 * 1024)
/* Over a transport without sendfile, a file this small is read into the buffer at once,
 * so that it joins the head in one record and one write. */
#define UM__OUTQ_COPY_FILE (16 * 1024)

struct um__outq_ref {
    const char *p;
    size_t len;
    void (*release)(void *ctx);
    void *ctx;
};

/* A worker's free lists of the queues' memory, shared by its connections: an idle queue
 * holds none of it (um__outq_shrink). A queue takes a small buffer for its first bytes and
 * moves to a big one when they outgrow it (a TLS response with a file copied in, a
 * proxied body), so that neither is a malloc per request; past the big size the buffer
 * grows on the heap and goes back to the system when idle. */
struct um__outq_pools {
    struct um_bufpool bufs; /* UM__OUTQ_BUF-byte buffers */
    struct um_bufpool big;  /* UM__OUTQ_BIG-byte buffers (and copies of file bytes) */
    struct um_bufpool refs; /* UM__OUTQ_MAX_REFS segment tables */
};
#define UM__OUTQ_BUF 4096
#define UM__OUTQ_BIG (32 * 1024)

struct um__outq {
    struct um_buf buf;
    struct um__outq_pools *pools; /* where the memory comes from and goes back to */
    size_t pos;
    /* While borrowed segments wait, buf[pos..mark) goes out before them and
     * buf[mark..len) (bytes queued after them) once they are sent: the wire keeps the
     * order the bytes were queued in. */
    size_t mark;
    struct um__outq_ref *refs; /* UM__OUTQ_MAX_REFS, allocated on first use */
    unsigned ref_head, num_refs;
    size_t ref_bytes; /* unsent bytes in refs */
    int file_fd;      /* -1: none */
    uint64_t file_off, file_left;
    /* A transport without sendfile: file bytes read for it, fbuf[fpos..flen) unsent. */
    char *fbuf;
    size_t fpos, flen;
};

/* Sets up the pools of a worker (keep: blocks each pool keeps at most); um__outq_pools_dispose
 * frees what they keep. */
void um__outq_pools_init(struct um__outq_pools *p, size_t keep);
void um__outq_pools_dispose(struct um__outq_pools *p);

/* An empty queue, holding no memory, that takes its memory from pools (which must outlive
 * it). */
void um__outq_init(struct um__outq *q, struct um__outq_pools *pools);
/* Closes the file and releases the segments (the connection closes); the memory stays
 * until um__outq_dispose. */
void um__outq_drop(struct um__outq *q);
/* Frees the queue's memory; call um__outq_drop first. */
void um__outq_dispose(struct um__outq *q);
/* Gives all the queue's memory back to the pools (a grown buffer to the system): the
 * connection waits idle with nothing queued (um__outq_pending is false). */
void um__outq_shrink(struct um__outq *q);

/* um__outq_reserve's way when the bytes do not fit: takes a buffer from the pools, or
 * rewinds a buffer whose bytes were all sent, or grows it. */
void um__outq_grow(struct um__outq *q, size_t n);

/* Queues len bytes of fd at off; the queue owns fd from now on. copy_small: the transport
 * has no sendfile, so a small file is read into the buffer at once. Only one file at a
 * time. */
void um__outq_file(struct um__outq *q, int fd, uint64_t off, uint64_t len, bool copy_small);

/* Writes what is queued through t, at most a turn's budget (so that one busy client cannot
 * hold the loop). Returns UM_OK when all is written, UM_AGAIN on a full socket (with *want
 * from the transport), UM_DONE when this turn's budget is spent, UM_ERR on a dead peer or
 * a file that failed. */
int um__outq_flush(struct um__outq *q, struct um_transport *t, int *want);

/* Makes room for n more bytes in the buffer, rewinding it first when all it held was sent
 * (so a head's length must be measured after making room for it). */
static inline void um__outq_reserve(struct um__outq *q, size_t n)
{
    if (n > um_buf_room(&q->buf))
        um__outq_grow(q, n);
}

static inline void um__outq_append(struct um__outq *q, const void *p, size_t n)
{
    um__outq_reserve(q, n);
    um_buf_append(&q->buf, p, n);
}

static inline void um__outq_append_str(struct um__outq *q, const char *s)
{
    um__outq_append(q, s, strlen(s));
}

static inline void um__outq_append_u64(struct um__outq *q, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    um__outq_append(q, tmp + i, sizeof(tmp) - i);
}

/* Queues a borrowed segment; release(ctx) is called once it is sent (or dropped). False
 * (nothing kept) when the segment table is full, or when bytes were buffered behind the
 * segments that wait: this one would overtake them. */
static inline bool um__outq_ref(struct um__outq *q, const char *p, size_t len,
                                void (*release)(void *ctx), void *ctx)
{
    if (q->num_refs == UM__OUTQ_MAX_REFS)
        return false;
    if (q->ref_head == q->num_refs)
        q->mark = q->buf.len; /* what is buffered now goes first */
    else if (q->buf.len > q->mark)
        return false;
    if (q->refs == NULL)
        q->refs = um_bufpool_get(&q->pools->refs);
    q->refs[q->num_refs++] = (struct um__outq_ref){p, len, release, ctx};
    q->ref_bytes += len;
    return true;
}

static inline bool um__outq_pending(const struct um__outq *q)
{
    return q->pos < q->buf.len || q->file_left > 0 || q->fpos < q->flen ||
           q->ref_head < q->num_refs;
}

/* Buffered and file bytes not sent yet (borrowed segments aside): what pauses an origin. */
static inline size_t um__outq_backlog(const struct um__outq *q)
{
    return q->buf.len - q->pos + (size_t)q->file_left;
}

/* True when the connection should send before it parses another request. */
static inline bool um__outq_full(const struct um__outq *q)
{
    return q->file_left > 0 || q->ref_head < q->num_refs ||
           q->buf.len - q->pos > UM__OUTQ_BACKLOG;
}

#endif
