/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP/2 connections' shared state: the session (conn_h2.c) and its streams (conn_h2_stream.c). */
#ifndef UMBRA_SERVER_CONN_H2_H
#define UMBRA_SERVER_CONN_H2_H

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "conn.h"
#include "umbra/log.h"
#include "umbra/metrics.h"

#define STREAM_BUF_MAX (64 * 1024)  /* response bytes a stream buffers before refusing */
#define STREAM_BUF_LOW (16 * 1024)  /* ...and below which its origin goes on */
#define OUT_SOFT_MAX (256 * 1024)   /* output queue bytes past which frames wait */
#define MAX_CONTINUATIONS 8         /* CONTINUATION frames after one HEADERS (8 x 16 KiB
                                       frames hold any head under max_header_list's 64 KiB
                                       default) */
#define RST_BURST 200               /* client resets allowed at once... */
#define RST_PER_SEC 50              /* ...and replenished per second */
#define GLITCH_BURST 1000           /* frames that do no work allowed at once... */
#define GLITCH_PER_SEC 100          /* ...and replenished per second */
#define MAX_OUTBOUND_ACK 1000       /* SETTINGS/PING acks queued before GOAWAY */
#define MAX_SETTINGS 32             /* entries in one SETTINGS frame */
#define MAX_GAPS 8                  /* ranges of skipped stream ids remembered */
/* The PING that follows a shutdown notice; its ACK says that the client has read the
 * notice, so that every stream it opened before it has arrived (RFC 9113 section 6.8). */
static const uint8_t SHUTDOWN_PING[8] = {'u', 'm', '-', 'd', 'r', 'a', 'i', 'n'};

struct h2_field {
    uint32_t name_off, name_len, value_off, value_len;
};

/* A piece of a response body waiting for nghttp2 to frame it: a borrowed slice (release
 * not NULL: the cache's bytes, released once sent) or, release NULL, the next len bytes of
 * the stream's copy buffer (out). */
struct h2_seg {
    const char *p;
    size_t len;
    void (*release)(void *ctx);
    void *ctx;
};
#define MAX_SEGS 16 /* per stream; the last slot is kept for copied bytes */
#define MAX_TRAILERS 32 /* fields of a request's trailer section kept (the rest: dropped) */

struct h2_stream {
    struct um__h2 *h2;
    int32_t id;
    struct h2_stream *prev, *next; /* the connection's streams */

    /* The request head as it arrives: names and values in hbuf, by offset (hbuf may
     * move), turned into x.req once complete. */
    struct um_buf hbuf;
    size_t num_fields;
    struct h2_field method, path, scheme, authority; /* name_len unused */
    bool has_method, has_path, has_scheme, has_authority;
    size_t head_bytes;     /* counted as SETTINGS_MAX_HEADER_LIST_SIZE counts */
    bool too_large;        /* past max_header_list or UM_HTTP1_MAX_HEADERS: 431 */
    bool head_done;        /* END_HEADERS came */
    bool started;          /* the exchange has begun */
    bool body_first;       /* routed; the body is discarded, then dispatched */
    bool discard_body;     /* nobody reads the body: grant its window at once */

    /* The request body: body[bpos..len) not read yet. */
    struct um_buf body;
    size_t bpos;
    bool body_eof;       /* END_STREAM came */
    uint64_t body_seen;

    /* The response body: the segments segs[seg_head..num_segs) (ref_bytes borrowed, the
     * copied ones at out[opos..len)), then file_left bytes of file_fd at file_off. nghttp2
     * frames them without copying (NGHTTP2_DATA_FLAG_NO_COPY): send_data_frame copies
     * each frame's bytes once, from where they are into the output queue. */
    bool submitted;      /* the head went to nghttp2 */
    struct um_buf out;
    size_t opos;
    struct h2_seg segs[MAX_SEGS];
    unsigned seg_head, num_segs;
    size_t ref_bytes;
    int file_fd;
    uint64_t file_off, file_left;
    bool out_end, out_abort;
    bool deferred;       /* read_data said NGHTTP2_ERR_DEFERRED */

    bool closed;         /* nghttp2 is done with it */

    /* Trailers. The request's as they arrive (names and values in tbuf, by offset), the
     * ones um_http_trailer_allowed accepts; the response's, made by send_trailers in the
     * exchange's arena, submitted after the last DATA frame (um__h2_read_data). */
    struct um_buf tbuf;
    struct h2_field tfields[MAX_TRAILERS];
    size_t num_tfields;
    nghttp2_nv *resp_trailers;
    size_t num_resp_trailers;

    /* Last, so that a stream taken from the worker's pool is cleared without them: the
     * fields of the head (num_fields of them are set) and the exchange (whose request
     * header table is filled as far as num_headers says). */
    struct h2_field fields[UM_HTTP1_MAX_HEADERS];
    struct um__exchange x;
};

struct um__h2 {
    struct um__conn *c;
    nghttp2_session *session;
    struct h2_stream *streams;
    size_t num_streams;
    uint64_t total_streams;
    bool failed;          /* a connection error: GOAWAY queued, no more input */
    bool goaway;          /* a graceful shutdown began (drain, reload): notice and PING */
    bool goaway_final;    /* ...and the GOAWAY with the last stream id was submitted */
    bool head_timer;      /* the header timer runs for an unfinished head */
    /* Rapid reset: tokens left and when they were last replenished (loop ms). */
    double rst_tokens;
    uint64_t rst_at;
    /* Frames that cost work and ask for none (PING, SETTINGS, PRIORITY, empty DATA, invalid
     * frames): the same kind of bucket. */
    double glitch_tokens;
    uint64_t glitch_at;
    /* The frame boundaries in what the client sends, tracked before nghttp2 sees it:
     * the bytes of the frame being skipped, a partial frame header, and the count of
     * CONTINUATION frames in a row. */
    size_t scan_skip;
    uint8_t scan_hdr[9];
    size_t scan_hdr_len;
    unsigned num_cont;
    /* The stream ids the client skipped (section 5.1.1: the first use of an id closes
     * the idle streams below it), as ranges [lo, hi], the last MAX_GAPS of them, and the
     * highest id a HEADERS frame carried. nghttp2 cannot tell a skipped id from one that
     * was used and closed, and ignores HEADERS on either. */
    uint32_t gaps[MAX_GAPS][2];
    unsigned num_gaps;
    uint32_t max_id;
};


static inline struct h2_stream *um__h2_stream_of(struct um__exchange *x)
{
    return um_container_of(x, struct h2_stream, x);
}

size_t um__h2_out_buffered(const struct h2_stream *s);
void um__h2_segs_drop(struct h2_stream *s);
int um__h2_on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user);
nghttp2_session_callbacks *um__h2_callbacks(void);
bool um__h2_on_drained(struct um__conn *c);
ssize_t um__h2_read_data(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user);
int um__h2_send_data_frame(nghttp2_session *session, nghttp2_frame *frame,
                           const uint8_t *framehd, size_t length, nghttp2_data_source *src,
                           void *user);
size_t um__h2_send_data(struct um__exchange *x, const char *data, size_t len, bool may_refuse);
void um__h2_end(struct um__exchange *x);
struct h2_stream *um__h2_stream_new(struct um__h2 *h, int32_t id);
void um__h2_stream_free(struct um__h2 *h, struct h2_stream *s);
bool um__h2_run_streams(struct um__h2 *h);
void um__h2_shutdown_begin(struct um__h2 *h);
void um__h2_shutdown_final(struct um__h2 *h);

#endif
