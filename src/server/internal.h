/* SPDX-License-Identifier: BSD-2-Clause */
/* Types shared by the files of the server module only. */
#ifndef UMBRA_SERVER_INTERNAL_H
#define UMBRA_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "umbra/config.h"
#include "umbra/http1.h"
#include "umbra/context.h"
#include "umbra/loop.h"
#include "umbra/httpfield.h"
#include "umbra/origin.h"
#include "umbra/runtime.h"
#include "umbra/tls.h"
#include "umbra/cache.h"
#include "umbra/cacheorigin.h"
#include "umbra/l2.h"
#include "umbra/buf.h"
#include "umbra/bufpool.h"
#include "outq.h"

struct um__conn;
struct um__worker;

/* Timeout queues of connections: one per fixed duration (loop.h's um_tq). */
enum um__tq_kind {
    UM__TQ_HEADER,
    UM__TQ_IDLE,
    UM__TQ_SEND,
    UM__TQ_LINGER,
    UM__TQ_TUNNEL, /* a tunnel's silence (timeouts.tunnel) */
    UM__TQ_COUNT
};

/* Fields of a connection the worker's lists use. */
struct um__conn_links {
    struct um_io io; /* the socket in the worker's loop */
    struct um_tq_entry tq;
    int tq_kind; /* -1: not armed */
    struct um__conn *ready_next;
    bool in_ready;
    struct um__conn *all_prev, *all_next; /* every connection of the worker */
};

/* A connection starts with its links (conn.c puts them first). */
static inline struct um__conn_links *um__links(struct um__conn *c)
{
    return (struct um__conn_links *)(void *)c;
}

/* Sockets handed from the listener to a worker. */
struct um__mailbox {
    struct um_io io; /* an eventfd: the listener writes after queueing */
    pthread_mutex_t lock;
    int *fds;
    size_t len, cap;
    bool drain; /* graceful stop requested */
    bool quit;  /* immediate stop requested */
    /* A reload: the runtime (one reference, for the worker) new connections take from now
     * on; has_next until the worker took it. */
    struct um_runtime *next_runtime;
    bool has_next;
};

struct um__worker {
    int id;
    pthread_t thread;
    struct um_loop *loop;
    struct um_context ctx; /* what the layers below see of the worker */
    struct um_server *server;
    struct um_runtime *runtime; /* what new connections take (one reference) */
    struct um_config *config;   /* its snapshot (runtime->config) */
    struct um_tls *tls;         /* runtime's certificate store (TLS module's state), or NULL */
    uint64_t next_conn_id;    /* for log lines: [wN cM] */
    struct um__mailbox mailbox;
    /* The Date field of this second (formatted when first wanted in a second). */
    time_t date_sec;
    char date[UM_HTTP_DATE_LEN + 1];
    struct um_tq tq[UM__TQ_COUNT];
    struct um__conn *ready;  /* connections with work left over from a capped turn */
    struct um__conn *closed; /* freed at the end of the loop turn */
    struct um__conn *all;    /* every open connection */
    size_t num_conns;
    bool draining;
    uint64_t drain_deadline;
    /* What connections take when bytes arrive and give back when they wait idle (conn.c,
     * "Idle connections"): read buffers, request states, output queue memory. */
    struct um_bufpool rbufs;
    struct um_bufpool reqs;
    struct um__outq_pools outq_pools;
    struct um_bufpool tunbufs; /* a tunnel's buffer of one direction (conn_tunnel.c) */
    /* HTTP/2 streams (conn_h2.c), taken for each request and given back when it is done. */
    struct um_bufpool h2_streams;
    char path_buf[4096]; /* the normalised path of the request being dispatched */
};

struct um_server {
    struct um_runtime *runtime; /* what runs now (one reference) */
    struct um_config *config;   /* its snapshot (runtime->config) */
    int *listen_fds;
    size_t num_listen;
    struct um__worker *workers;
    int num_workers;
    pthread_t listener;
    int listener_efd;                 /* eventfd that tells the listener to stop */
    _Atomic(struct um_cache *) cache; /* the shared cache, when some route caches */
    struct um_l2 *l2;       /* the second-level cache on Redis (cache.l2), or NULL */
    struct um_disk_tier *disk; /* the disk tier (cache.disk), or NULL; read at start only */
    atomic_size_t num_conns; /* open client connections, all workers */
    atomic_bool stop_accepting;
    /* s->runtime and s->config are replaced by reloads on the main thread; other threads
     * (admin) read s->config under this lock and take a reference. */
    pthread_mutex_t config_lock;
    struct um__retired *retired; /* runtimes replaced by reloads, until unused */
    struct um__admin *admin; /* the admin thread (purges, samples) */
    int admin_fd; /* the admin listener's socket (admin.listen), or -1; the listener
                     thread accepts from it, a reload swaps it while that thread stops */
    time_t started;
    int pid_fd;     /* the locked pid file (pid = "FILE"), or -1 */
    char *pid_path; /* its path (the start's config; a reload keeps it) */
};

/* A runtime a reload replaced (with its modules' states: umbra/module.h): freed on the
 * main thread once nothing uses it (um_runtime_unused). */
struct um__retired {
    struct um__retired *next;
    struct um_runtime *runtime;
};

/* admin_purge.c: a purge applied on this node goes to the other nodes from here, its one
 * call site: the ring's peers (cluster, when the runtime has one) and the Redis bus (when
 * cache.l2 is set). Any thread; never blocks. */
struct um_cluster;
void um__purge_tell(struct um_server *s, struct um_cluster *cluster, const struct um_purge *p);
/* The cache's announce link (umbra/cache.h) on a worker's thread (ctx, a worker's): arg is
 * the server; um__purge_tell with the cluster of the runtime the worker runs. */
void um__purge_announce(void *arg, struct um_context *ctx, const struct um_purge *p);
/* The links the server gives its runtimes' cache: its disk tier, L2 and announcer. */
struct um_cache_links um__server_links(struct um_server *s);
/* Applies a purge another node published to this node's cache (the L2 bus's thread). */
void um__purge_apply(void *arg, const struct um_purge *p);

/* worker.c */
/* modules.c: every module's configure (umbra/module.h) with c, in the list's order; false
 * with the first one's message. Main thread. */
bool um__modules_configure(const struct um_config *c, char *err, size_t errlen);

void um__worker_init(struct um__worker *w, struct um_server *s, int id);
void *um__worker_main(void *arg);
void um__worker_dispose(struct um__worker *w);
/* A mailbox entry: fd * UM__ACCEPT_SHIFT + UM__ACCEPT_F_* of its listener. */
#define UM__ACCEPT_F_TLS 0x1
#define UM__ACCEPT_F_H2 0x2 /* HTTP/2 allowed (ALPN h2 on TLS, prior knowledge on plain) */
#define UM__ACCEPT_F_ADMIN 0x4 /* the admin listener's: internal routes only, not counted */
#define UM__ACCEPT_F_PROXY 0x8 /* a PROXY protocol header comes first (listen.proxy_protocol) */
#define UM__ACCEPT_SHIFT 16    /* entries are fd * SHIFT + flags: room for 4 flag bits */
static inline int um__accept_flags(const struct um_listen *l)
{
    return (l->tls ? UM__ACCEPT_F_TLS : 0) | (l->no_http2 ? 0 : UM__ACCEPT_F_H2) |
           (l->proxy_protocol ? UM__ACCEPT_F_PROXY : 0);
}
/* Queues accepted sockets for a worker (listener thread). An entry is as above. */
void um__mailbox_push(struct um__mailbox *mb, const int *fds, size_t n);
void um__mailbox_signal(struct um__mailbox *mb, bool drain, bool quit);
/* Hands a worker the runtime (taking a reference for it) and TLS store of a reload. */
void um__mailbox_set_runtime(struct um__mailbox *mb, struct um_runtime *rt);
void um__tq_arm(struct um__worker *w, struct um__conn *c, enum um__tq_kind kind);
void um__tq_disarm(struct um__worker *w, struct um__conn *c);
void um__worker_ready(struct um__worker *w, struct um__conn *c);
/* Watches a new connection's socket (edge-triggered, every event) in the worker's loop.
 * Returns UM_OK or UM_ERR (errno set). */
int um__worker_watch(struct um__worker *w, struct um__conn *c, int fd);
/* The Date field's value for now ("Sun, 06 Nov 1994 08:49:37 GMT", UM_HTTP_DATE_LEN). */
const char *um__worker_date(struct um__worker *w);

/* server.c */
int um__bind_listen(const struct um_listen *l, char *err, size_t errlen);
void um__listener_start(struct um_server *s);
void um__listener_stop(struct um_server *s);
void um__log_listening(struct um_server *s, const char *what);
/* Logs "admin: serving /metrics and /status on ADDR" (or that it closed). */
void um__log_admin(struct um_server *s);

/* privileges.c: before anything is bound, refuses root without the user setting (false
 * with "FILE: message" in err); after the listeners and keys, switches to the user when
 * running as root (false with "FILE:LINE: message"). */
bool um__privileges_check(const struct um_config *c, char *err, size_t errlen);
bool um__privileges_drop(const struct um_config *c, char *err, size_t errlen);

/* The pid file (pidfile.c). um__pidfile_lock opens path and takes its lock: the
 * descriptor (the caller's, for um__pidfile_release), or -1 with err written when another
 * Umbra holds it or it cannot be opened. A stale file is taken over and left empty until
 * um__pidfile_write writes this process's ID. um__pidfile_release removes the file (or
 * empties it when that is not allowed) and closes fd; fd -1 does nothing. */
int um__pidfile_lock(const char *path, char *err, size_t errlen);
bool um__pidfile_write(int fd, const char *path);
void um__pidfile_release(int fd, const char *path);

/* notify.c: the systemd notification protocol (sd_notify), by hand: one datagram with
 * state ("READY=1", ...) to $NOTIFY_SOCKET when it is set; nothing otherwise. */
void um__notify(const char *state);

/* reload.c: SIGHUP. Loads the config file again and, when it is valid, switches to it;
 * otherwise logs why and keeps the running one. Main thread. */
void um__server_reload(struct um_server *s);
/* Frees retired runtimes nobody uses any more; returns how many are left. */
size_t um__server_free_retired(struct um_server *s, bool all);

/* The admin listener (admin_origin.c, admin_render.c, admin.c). Its connections are
 * accepted by the listener thread and served by the workers like any other (marked
 * UM__ACCEPT_F_ADMIN); the router hands their requests to um__admin_route, never to the
 * configuration's routes. The admin thread (admin.c) runs purges and samples counters. */
struct um__exchange;
/* An admin connection's own limits, smaller than the configuration's (which are for the
 * site's clients): a request line and head of at most UM__ADMIN_MAX_HEAD bytes each (414,
 * 431 past them), a body (POST /purge) of at most UM__ADMIN_MAX_BODY (413). */
#define UM__ADMIN_MAX_HEAD 4096
#define UM__ADMIN_MAX_BODY 4096
/* admin_origin.c: the internal routes of an admin connection's request: GET or HEAD
 * /metrics, /status.json, /status and /; POST /purge. Returns the admin origin with f
 * filled, or NULL after answering (403 outside admin.allow, 404, 405). Worker thread. */
struct um_origin *um__admin_route(struct um__exchange *x, struct um_fetch *f);
/* admin_render.c: /metrics and /status.json into b. Any worker, several at once. */
void um__admin_render_metrics(struct um_server *s, struct um_buf *b);
void um__admin_render_json(struct um_server *s, const struct um_config *cfg, struct um_buf *b);
/* admin.c: the admin thread. */
struct um__admin *um__admin_start(struct um_server *s);
/* Stops the thread and frees the jobs left: call it once the workers have stopped. */
void um__admin_stop(struct um__admin *a);
/* /status.json's "series" member (rates from the one-second samples); a NULL: empty. */
void um__admin_write_series(struct um__admin *a, struct um_buf *b);
/* A POST /purge for the admin thread. Made by a worker (zeroed), which fills the request
 * and the worker's side; see admin.c for who owns it when. */
struct um__admin_job {
    /* The request: set before um__admin_submit, read by the admin thread. */
    struct um_runtime *runtime; /* one reference, for its cluster */
    bool json;
    char *body; /* body[len] is a NUL; freed with the job */
    size_t len;
    /* The answer: written by the admin thread before it posts done. */
    int status;
    struct um_buf out;
    /* The worker's side, its thread only: its loop, the task the admin thread posts back
     * (done.cb set by the worker), the sink to answer (NULL once the client left),
     * whether it was submitted. */
    struct um_server *server;
    struct um_loop *loop;
    struct um_task done;
    struct um_sink *sink;
    const struct um_request *req; /* the exchange's, while the body is read */
    bool submitted;
    /* The admin's lists, under its lock. */
    struct um__admin_job *qnext, *next, *prev;
};
/* Queues j for the admin thread; false when it is stopping (j stays the caller's). */
bool um__admin_submit(struct um__admin *a, struct um__admin_job *j);
/* Frees j on its worker's thread: from its done task, or (submitted false) before it was
 * ever submitted. */
void um__admin_job_free(struct um__admin *a, struct um__admin_job *j, bool submitted);
/* admin_purge.c: POST /purge with a JSON (json) or form body; writes the answer's JSON to
 * out and returns its status. cache may be NULL (no route caches: 503). */
struct um_buf;
struct um_cluster;
int um__admin_purge(struct um_server *s, struct um_cache *cache, struct um_cluster *cluster,
                    bool json, const char *body, size_t len, struct um_buf *out);
/* admin_purge.c: applies a peer's purge (the wire form um_cluster_purge_fanout signed,
 * umbra/purge.h) to cache; returns how many objects it affected, or -1
 * when desc is not one. */
long um__purge_apply_peer(struct um_cache *cache, const char *desc, size_t len);

/* conn_tunnel.c: bytes per direction a tunnel buffers at most (a buffer of tunbufs). */
#define UM__TUNNEL_BUF (64 * 1024)
/* Tunnel buffers a worker keeps for the next (its pool's reserve). */
#define UM__TUNNEL_POOL_KEEP 8

/* conn.c */
/* Blocks each of a worker's pools keeps for its connections at most. */
#define UM__CONN_POOL_KEEP 64
/* The size of a connection's read buffer under cfg's limits. */
size_t um__conn_rbuf_size(const struct um_config *cfg);
/* The size of a connection's request state (struct um__conn_req). */
extern const size_t um__conn_req_size;
/* conn_h2.c: the size of an HTTP/2 stream (for the worker's pool of them), and how many
 * the pool keeps. */
extern const size_t um__h2_stream_size;
#define UM__H2_STREAM_POOL_KEEP 256
void um__conn_accept(struct um__worker *w, int fd, int flags); /* UM__ACCEPT_F_* */
void um__conn_on_event(struct um__conn *c, uint32_t events);
void um__conn_on_timeout(struct um__conn *c);
void um__conn_on_ready(struct um__conn *c);
/* Graceful stop: closes the connection now when it waits for a request, otherwise lets
 * the request in flight finish and closes after it. */
void um__conn_drain(struct um__conn *c);
void um__conn_close(struct um__conn *c);
/* A reload switched the worker to a new runtime (HTTP/2: GOAWAY, streams in flight end). */
void um__conn_reloaded(struct um__conn *c);
void um__conn_free(struct um__conn *c);

#endif
