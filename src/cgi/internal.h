/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin's shared state and the functions its files call across (module-internal). */
#ifndef UMBRA_CGI_INTERNAL_H
#define UMBRA_CGI_INTERNAL_H

#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "umbra/buf.h"
#include "umbra/cgi.h"
#include "umbra/context.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "umbra/static.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define MAX_PATH 4096
#define READ_CHUNK 16384
#define MAX_HEAD 65536
#define MAX_REDIRECTS 8
#define MAX_ARGS 64
#define KILL_GRACE_MS 2000
#define READS_PER_EVENT 8 /* reads of one stdout per event, so one script cannot hog a turn */

struct cgi_origin {
    struct um_origin base;
    int root_fd;
    char *root;       /* absolute */
    char *route_path; /* the route's prefix as configured */
    size_t script_base_len; /* route_path without its trailing '/' */
    int max_children;
    uint64_t timeout_ms;
    atomic_int children; /* fetches running, against max_children */
};

struct worker_cgi;
struct cgi_fetch;
struct spawn_job;

struct cgi_child {
    struct cgi_child *prev, *next;
    struct worker_cgi *wc;
    struct cgi_fetch *fetch; /* NULL: detached */
    pid_t pid;
    struct um_io pidio;
    struct um_timer timer;
    int kill_stage; /* 0: none, 1: SIGTERM sent, 2: SIGKILL sent (or due, while spawning) */
    bool spawning;  /* with a spawner: no pid yet */
    bool reaped;
    int wstatus_code; /* siginfo's si_code / si_status, for the log */
    int wstatus;
    struct um_task free_task;
};

struct env {
    char **v; /* NULL-terminated */
    size_t n, cap;
};

struct cgi_fetch {
    struct cgi_fetch *prev, *next;
    struct worker_cgi *wc;
    struct cgi_origin *o;  /* NULL once the sink is done */
    struct um_sink *sink;  /* NULL once on_end was called or the fetch was cancelled */
    struct cgi_child *child;
    struct um_io outio, inio, errio; /* fd -1: closed */
    /* stdout: the head while it comes, then body bytes not yet taken by the sink */
    char *out;
    size_t out_len, out_off, out_cap;
    bool head_done, nph, paused;
    bool unflushed; /* body bytes went to the sink since its last on_flush */
    int64_t remaining; /* body bytes the head announced and not yet sent; -1: unknown */
    /* stdin */
    char *in;
    size_t in_len, in_off;
    bool has_body;
    /* stderr, one line at a time */
    char errline[512];
    size_t err_len;
    char tag[192]; /* "GET /cgi-bin/x.cgi" for the log */
    struct env env;
    int redirects;
    bool freeing;
    struct um_task free_task;
};

struct worker_cgi {
    struct um_context *ctx;
    struct cgi_fetch *fetches;
    struct cgi_child *children;
    struct spawn_job *jobs; /* spawns not done yet */
};

void um__cgi_close_io(struct worker_cgi *wc, struct um_io *io);
void um__cgi_child_free_task(struct um_task *t);
void um__cgi_child_signal(struct cgi_child *c, int sig);
void um__cgi_child_maybe_free(struct cgi_child *c);
void um__cgi_child_detach(struct cgi_child *c, bool kill_now);
void um__cgi_on_child_timer(struct um_timer *t);
void um__cgi_on_child_exit(struct um_io *io, uint32_t events);
void um__cgi_fetch_done(struct cgi_fetch *f, bool kill_child);
void um__cgi_fetch_fail(struct cgi_fetch *f, int status);
void um__cgi_fetch_end(struct cgi_fetch *f);
void um__cgi_env_del(struct env *e, const char *name);
void um__cgi_env_set(struct env *e, const char *name, const char *value, size_t vlen);
void um__cgi_env_free(struct env *e);
void um__cgi_build_env(struct cgi_fetch *f, const struct um_fetch *uf);
void um__cgi_drain_jobs(struct worker_cgi *wc);
int um__cgi_spawn(struct cgi_fetch *f, const char *script, const char *dir, char *const argv[]);
int um__cgi_start_script(struct cgi_fetch *f, um_str path, um_str query);
void um__cgi_pause_output(struct cgi_fetch *f, bool paused);
bool um__cgi_deliver(struct cgi_fetch *f);
void um__cgi_on_stdout(struct um_io *io, uint32_t events);
void um__cgi_on_stderr(struct um_io *io, uint32_t events);
void um__cgi_pump_body(struct cgi_fetch *f);
void um__cgi_on_stdin(struct um_io *io, uint32_t events);

#endif
