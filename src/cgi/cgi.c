/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin: RFC 3875 scripts under a route's directory.
 *
 * Design. A fetch finds the script by walking the request path below the route (each step
 * opened with openat2(RESOLVE_BENEATH) from the directory, like the static origin, so
 * neither ".." nor a symlink leaves it), builds the meta-variables, and has a spawner
 * thread run the script with posix_spawn (glibc's is a vfork-style clone: no copy of the
 * server's memory; no shell). The child gets an empty signal mask and default dispositions (the server blocks
 * or ignores some), its own process group (so a timeout kills what it started too), the
 * script's folder as working directory and no descriptor but its three pipes.
 *
 * Two objects live on the worker's loop:
 * - a cgi_fetch: the exchange's side. It reads the script's stdout (head, then body into
 *   the sink, stopping while the sink refuses: backpressure), writes the request body into
 *   its stdin as the connection delivers it, and copies stderr to the error log. It ends
 *   when the sink got its on_end or was cancelled, and is freed from a deferred task (an
 *   event of this turn may still name one of its descriptors).
 * - a cgi_child: the process. Its pidfd (pidfd_open, Linux >= 5.3) sits in the epoll set;
 *   when it turns readable, waitid(P_PIDFD) reaps exactly that child, so no SIGCHLD handler
 *   and no waitpid(-1) that could take another module's child. Its timer enforces the
 *   timeout: the fetch, if still attached, answers 504 (or aborts a body in flight), then
 *   SIGTERM goes to the group, and SIGKILL after a grace period. A fetch that ends detaches
 *   from its child; the child object stays until it is reaped.
 * Both are listed in the worker's slot (cgi_slot), with the spawns still queued to
 * the spawners, so that a worker that stops waits for those, kills and reaps what is left
 * and frees it.
 *
 * Descriptors: between its clone and its exec, a child holds a copy of every descriptor of
 * the server (close-on-exec ones go only at the exec). A descriptor closed meanwhile stays
 * in its epoll set, since epoll watches the open file, which the copy keeps alive: every
 * um_io here (and the server's connections) leaves the epoll set before its close.
 *
 * The origin itself may be destroyed once no fetch of it runs (a reload): only a live
 * fetch reads it, and a fetch gives back its max_children slot when its sink is done, so
 * nothing touches the origin afterwards. */
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
#include "umbra/module.h"

/* The scripts running on the worker (struct worker_cgi). */
static struct um_context_slot cgi_slot = {.name = "cgi scripts"};

const struct um_module um_cgi_module = {
    .name = "cgi",
    .slots = (struct um_context_slot *const[]){&cgi_slot, NULL},
};

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
    int children; /* atomic: fetches running, against max_children */
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
    struct um_task on_stop;
};

/* ---------------------------------------------------------------- small helpers */


static const char *status_text(int status)
{
    switch (status) {
    case 400: return "400 Bad Request\n";
    case 403: return "403 Forbidden\n";
    case 404: return "404 Not Found\n";
    case 502: return "502 Bad Gateway\n";
    case 503: return "503 Service Unavailable\n";
    case 504: return "504 Gateway Timeout\n";
    default: return "500 Internal Server Error\n";
    }
}

static void env_add(struct env *e, const char *name, const char *value, size_t vlen)
{
    if (e->n + 2 > e->cap) {
        e->cap = e->cap ? e->cap * 2 : 48;
        e->v = um_realloc(e->v, e->cap * sizeof(*e->v));
    }
    size_t nlen = strlen(name);
    char *s = um_malloc(nlen + 1 + vlen + 1);
    memcpy(s, name, nlen);
    s[nlen] = '=';
    if (vlen)
        memcpy(s + nlen + 1, value, vlen);
    s[nlen + 1 + vlen] = '\0';
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
}

static void env_adds(struct env *e, const char *name, const char *value)
{
    env_add(e, name, value, strlen(value));
}

/* Removes name from e (every occurrence). */
static void env_del(struct env *e, const char *name)
{
    size_t nlen = strlen(name), w = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], name, nlen) == 0 && e->v[i][nlen] == '=') {
            free(e->v[i]);
            continue;
        }
        e->v[w++] = e->v[i];
    }
    e->n = w;
    if (e->v)
        e->v[w] = NULL;
}

static void env_set(struct env *e, const char *name, const char *value, size_t vlen)
{
    env_del(e, name);
    env_add(e, name, value, vlen);
}

static void env_free(struct env *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
    memset(e, 0, sizeof(*e));
}

static void close_io(struct worker_cgi *wc, struct um_io *io)
{
    if (io->fd < 0)
        return;
    um_loop_io_set(wc->ctx->loop, io, io->fd, 0);
    close(io->fd);
    io->fd = -1;
}

/* ---------------------------------------------------------------- the worker's slot */

static void child_free(struct cgi_child *c);
static void fetch_free(struct cgi_fetch *f);
static void drain_jobs(struct worker_cgi *wc);

static void on_worker_stop(struct um_task *t)
{
    struct worker_cgi *wc = (struct worker_cgi *)((char *)t - offsetof(struct worker_cgi, on_stop));
    drain_jobs(wc);
    while (wc->fetches)
        fetch_free(wc->fetches);
    while (wc->children) {
        struct cgi_child *c = wc->children;
        if (!c->reaped) {
            /* The worker is going away: no loop will see this child end. */
            kill(-c->pid, SIGKILL);
            kill(c->pid, SIGKILL);
            siginfo_t si;
            while (waitid(P_PIDFD, (id_t)c->pidio.fd, &si, WEXITED) != 0 && errno == EINTR)
                ;
            c->reaped = true;
        }
        child_free(c);
    }
    um_context_set(wc->ctx, &cgi_slot, NULL);
    free(wc);
}

static struct worker_cgi *worker_cgi(struct um_context *ctx)
{
    struct worker_cgi *wc = um_context_get(ctx, &cgi_slot);
    if (wc)
        return wc;
    wc = um_calloc(1, sizeof(*wc));
    wc->ctx = ctx;
    wc->on_stop.cb = on_worker_stop;
    um_loop_on_stop(ctx->loop, &wc->on_stop);
    um_context_set(ctx, &cgi_slot, wc);
    return wc;
}

/* ---------------------------------------------------------------- the child */

static void child_free(struct cgi_child *c)
{
    struct worker_cgi *wc = c->wc;
    um_loop_timer_stop(wc->ctx->loop, &c->timer);
    close_io(wc, &c->pidio);
    if (c->prev)
        c->prev->next = c->next;
    else
        wc->children = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

static void child_free_task(struct um_task *t)
{
    child_free((struct cgi_child *)((char *)t - offsetof(struct cgi_child, free_task)));
}

static void child_signal(struct cgi_child *c, int sig)
{
    if (c->reaped || c->pid <= 0)
        return; /* gone, or not started yet: the spawn's end applies kill_stage */
    /* The group first (what the script started), then the script, in case it left it. */
    kill(-c->pid, sig);
    kill(c->pid, sig);
}

static void child_maybe_free(struct cgi_child *c)
{
    if (c->reaped && c->fetch == NULL && !c->spawning)
        um_loop_defer(c->wc->ctx->loop, &c->free_task);
}

/* The fetch lets go of its child: kill_now when the script's work is unwanted. */
static void child_detach(struct cgi_child *c, bool kill_now)
{
    c->fetch = NULL;
    if (kill_now && !c->reaped && c->kill_stage < 2) {
        child_signal(c, SIGKILL);
        c->kill_stage = 2;
    }
    child_maybe_free(c);
}

static void fetch_timeout(struct cgi_fetch *f);

static void on_child_timer(struct um_timer *t)
{
    struct cgi_child *c = (struct cgi_child *)((char *)t - offsetof(struct cgi_child, timer));
    if (c->kill_stage == 0) {
        struct cgi_fetch *f = c->fetch;
        if (f) {
            /* Detached here, so that ending the fetch does not SIGKILL at once: the script
             * gets its SIGTERM and the grace period first. */
            c->fetch = NULL;
            f->child = NULL;
            fetch_timeout(f);
        }
        child_signal(c, SIGTERM);
        c->kill_stage = 1;
        um_loop_timer_start(c->wc->ctx->loop, &c->timer, KILL_GRACE_MS);
    } else if (c->kill_stage == 1) {
        child_signal(c, SIGKILL);
        c->kill_stage = 2;
    }
}

static void on_child_exit(struct um_io *io, uint32_t events)
{
    struct cgi_child *c = (struct cgi_child *)((char *)io - offsetof(struct cgi_child, pidio));
    if (io->fd < 0 || c->reaped)
        return;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    int r = waitid(P_PIDFD, (id_t)io->fd, &si, WEXITED | WNOHANG);
    if (r == 0 && si.si_pid == 0)
        return; /* not yet */
    c->reaped = true;
    c->wstatus_code = si.si_code;
    c->wstatus = si.si_status;
    close_io(c->wc, &c->pidio);
    if (c->fetch && (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED) && c->kill_stage == 0)
        um_log_warn("cgi: %s: script killed by signal %d", c->fetch->tag, si.si_status);
    child_maybe_free(c);
}

/* ---------------------------------------------------------------- the fetch's end */

static void fetch_free(struct cgi_fetch *f)
{
    struct worker_cgi *wc = f->wc;
    close_io(wc, &f->outio);
    close_io(wc, &f->inio);
    close_io(wc, &f->errio);
    if (f->child)
        child_detach(f->child, true);
    if (f->err_len)
        um_log_err("cgi: %s: %.*s", f->tag, (int)f->err_len, f->errline);
    if (f->prev)
        f->prev->next = f->next;
    else
        wc->fetches = f->next;
    if (f->next)
        f->next->prev = f->prev;
    env_free(&f->env);
    free(f->out);
    free(f->in);
    free(f);
}

static void fetch_free_task(struct um_task *t)
{
    fetch_free((struct cgi_fetch *)((char *)t - offsetof(struct cgi_fetch, free_task)));
}

/* The sink is done (ended or cancelled): give back the slot, stop the pipes, free later. */
static void fetch_done(struct cgi_fetch *f, bool kill_child)
{
    f->sink = NULL;
    if (f->o) {
        __atomic_sub_fetch(&f->o->children, 1, __ATOMIC_RELAXED);
        f->o = NULL;
    }
    if (f->child) {
        child_detach(f->child, kill_child);
        f->child = NULL;
    }
    close_io(f->wc, &f->outio);
    close_io(f->wc, &f->inio);
    if (!f->freeing) {
        f->freeing = true;
        um_loop_defer(f->wc->ctx->loop, &f->free_task);
    }
}

/* Ends the answer: an error page when no head went out yet, else a body cut short. */
static void fetch_fail(struct cgi_fetch *f, int status)
{
    struct um_sink *s = f->sink;
    if (s == NULL)
        return;
    bool head_done = f->head_done;
    fetch_done(f, true);
    if (!head_done)
        um_sink_answer_text(s, status, status_text(status));
    else
        s->ops->on_end(s, UM_ERR);
}

static void fetch_end(struct cgi_fetch *f)
{
    struct um_sink *s = f->sink;
    bool whole = f->remaining <= 0;
    fetch_done(f, false);
    s->ops->on_end(s, whole ? UM_OK : UM_ERR);
}

static void fetch_timeout(struct cgi_fetch *f)
{
    um_log_warn("cgi: %s: script ran past the timeout; killing it", f->tag);
    fetch_fail(f, 504);
}

/* ---------------------------------------------------------------- finding the script */

struct script {
    char rel[MAX_PATH];  /* the script, relative to the directory */
    size_t rel_len;
    const char *path_info; /* into rel's copy below: "" or "/..." */
    char info[MAX_PATH];
};

/* Walks rel (a normalised relative path) from the directory: the first regular file is
 * the script, the rest is PATH_INFO. Returns 0 or the status to answer. */
static int find_script(struct cgi_origin *o, const char *rel, size_t rel_len, bool trailing,
                       struct script *sc)
{
    if (rel_len == 0)
        return 403;
    memcpy(sc->rel, rel, rel_len + 1);
    size_t i = 0;
    for (;;) {
        while (i < rel_len && sc->rel[i] != '/')
            i++;
        char save = sc->rel[i];
        sc->rel[i] = '\0';
        int fd = um_static_open_beneath(o->root_fd, sc->rel, O_PATH);
        if (fd < 0)
            return um_static_errno_status(errno);
        struct stat st;
        int r = fstat(fd, &st);
        close(fd);
        if (r != 0)
            return 500;
        if (S_ISREG(st.st_mode)) {
            if (!(st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)))
                return 403;
            sc->rel_len = i;
            size_t n = 0;
            if (i < rel_len) {
                sc->info[0] = '/';
                n = rel_len - i - 1 + 1;
                memcpy(sc->info + 1, rel + i + 1, rel_len - i - 1);
            }
            if (trailing && n + 1 < sizeof(sc->info) && i < rel_len)
                sc->info[n++] = '/';
            sc->info[n] = '\0';
            sc->path_info = sc->info;
            return 0;
        }
        if (!S_ISDIR(st.st_mode))
            return 403;
        sc->rel[i] = save;
        if (i >= rel_len)
            return 403; /* a directory: no listing, no index */
        i++;
    }
}

/* ---------------------------------------------------------------- stdout, stderr, stdin */

static void pause_output(struct cgi_fetch *f, bool paused)
{
    f->paused = paused;
    if (f->outio.fd >= 0)
        um_loop_io_set(f->wc->ctx->loop, &f->outio, f->outio.fd, paused ? 0 : EPOLLIN);
}

/* Offers the buffered body bytes to the sink. Returns false when the sink is behind (the
 * fetch is paused) or gone. */
static bool deliver(struct cgi_fetch *f)
{
    while (f->sink && f->out_off < f->out_len) {
        size_t n = f->out_len - f->out_off;
        if (f->remaining >= 0 && (int64_t)n > f->remaining)
            n = (size_t)f->remaining; /* past what the head announced: dropped */
        if (n == 0) {
            f->out_off = f->out_len;
            break;
        }
        size_t took = f->sink->ops->on_data(f->sink, f->out + f->out_off, n);
        if (took == 0) {
            pause_output(f, true);
            return false;
        }
        f->out_off += took;
        f->unflushed = true;
        if (f->remaining >= 0)
            f->remaining -= (int64_t)took;
    }
    f->out_off = f->out_len = 0;
    if (f->sink && f->remaining == 0) {
        fetch_end(f); /* the whole announced body is out */
        return false;
    }
    return f->sink != NULL;
}

static bool skip_field(um_str name)
{
    return um_str_eq_ci(name, "server") || um_str_eq_ci(name, "content-length") ||
           um_str_eq_ci(name, "connection") || um_str_eq_ci(name, "keep-alive") ||
           um_str_eq_ci(name, "transfer-encoding") || um_str_eq_ci(name, "upgrade") ||
           um_str_eq_ci(name, "proxy-connection");
}

/* The script's fields in[0..n) that go on, into out; returns how many. */
static size_t kept_fields(const struct um_header *in, size_t n, struct um_header *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!skip_field(in[i].name))
            out[k++] = in[i];
    return k;
}

static int start_script(struct cgi_fetch *f, um_str path, um_str query);

/* The head is complete: answer, redirect or fail. Returns false when the fetch is over. */
static bool send_head(struct cgi_fetch *f)
{
    struct um_header hs[UM_HTTP1_MAX_RESPONSE_FIELDS];
    struct um_response_head head = {.content_length = -1};
    size_t head_len;
    if (f->nph) {
        struct um_http1_response resp;
        struct um_http1_resp_parser p;
        enum um_http1_resp_err err;
        um_http1_resp_parser_init(&p);
        int r = um_http1_parse_response(&p, f->out, f->out_len, MAX_HEAD, &resp, &err);
        if (r == UM_AGAIN)
            return true;
        if (r != UM_OK || resp.status < 200 || (resp.flags & UM_RESP_F_TE)) {
            um_log_err("cgi: %s: nph script wrote no valid HTTP response head", f->tag);
            fetch_fail(f, 502);
            return false;
        }
        head.status = resp.status;
        head.reason = resp.reason;
        head.headers = hs;
        head.num_headers = kept_fields(resp.headers, resp.num_headers, hs);
        if (resp.flags & UM_RESP_F_CONTENT_LENGTH)
            head.content_length = (int64_t)resp.content_length;
        head_len = resp.head_len;
    } else {
        struct um_cgi_head h;
        int r = um_cgi_parse_head(f->out, f->out_len, &h);
        if (r == UM_AGAIN)
            return true;
        if (r != UM_OK) {
            um_log_err("cgi: %s: script wrote no valid CGI response head", f->tag);
            fetch_fail(f, 502);
            return false;
        }
        if (h.location.len && h.location.base[0] == '/' && !h.has_status) {
            /* A local redirect (RFC 3875 section 6.2.2): the answer is that of a GET of
             * the new path, from this route's scripts; any other local path goes to the
             * client as a 302. */
            struct cgi_origin *o = f->o;
            size_t plen = strlen(o->route_path);
            um_str loc = h.location;
            const char *q = memchr(loc.base, '?', loc.len);
            um_str p = {loc.base, q ? (size_t)(q - loc.base) : loc.len};
            um_str query = q ? (um_str){q + 1, loc.len - p.len - 1} : (um_str){"", 0};
            if (p.len >= plen && memcmp(p.base, o->route_path, plen) == 0) {
                if (++f->redirects > MAX_REDIRECTS) {
                    um_log_err("cgi: %s: more than %d local redirects", f->tag, MAX_REDIRECTS);
                    fetch_fail(f, 502);
                    return false;
                }
                char copy[MAX_PATH + MAX_PATH];
                if (loc.len >= sizeof(copy)) {
                    fetch_fail(f, 502);
                    return false;
                }
                memcpy(copy, loc.base, loc.len);
                p.base = copy + (p.base - loc.base) + plen;
                p.len -= plen;
                query.base = copy + (query.base - loc.base);
                env_set(&f->env, "REQUEST_METHOD", "GET", 3);
                env_set(&f->env, "REQUEST_URI", copy, loc.len);
                env_del(&f->env, "CONTENT_LENGTH");
                env_del(&f->env, "CONTENT_TYPE");
                int st = start_script(f, p, query);
                if (st != 0) {
                    fetch_fail(f, st);
                    return false;
                }
                /* The new script runs as a GET: no body, whatever the first one got. */
                f->has_body = false;
                close_io(f->wc, &f->inio);
                return false; /* the first script's output is over */
            }
            h.status = 302;
        }
        head.status = h.status;
        head.reason = h.reason;
        head.headers = hs;
        head.num_headers = kept_fields(h.headers, h.num_headers, hs);
        head.content_length = h.content_length;
        head_len = h.head_len;
    }
    f->head_done = true;
    f->remaining = head.content_length;
    f->sink->ops->on_head(f->sink, &head);
    f->out_off = head_len;
    return deliver(f);
}

static void on_stdout(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = (struct cgi_fetch *)((char *)io - offsetof(struct cgi_fetch, outio));
    for (int k = 0; k < READS_PER_EVENT && io->fd >= 0 && f->sink && !f->paused; k++) {
        if (!f->head_done && f->out_len == f->out_cap) {
            if (f->out_cap >= MAX_HEAD) {
                um_log_err("cgi: %s: response head over %d bytes", f->tag, MAX_HEAD);
                fetch_fail(f, 502);
                return;
            }
            f->out_cap *= 2;
            f->out = um_realloc(f->out, f->out_cap);
        }
        ssize_t n = read(io->fd, f->out + f->out_len, f->out_cap - f->out_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* The script's output ran dry: what a compressing layer holds goes out (a
             * script may stream events). */
            if (f->unflushed) {
                f->unflushed = false;
                um_sink_flush(f->sink);
            }
            return;
        }
        if (n <= 0) {
            /* The script closed its stdout (or it broke): the answer is over. */
            if (!f->head_done) {
                if (f->out_len == 0)
                    um_log_err("cgi: %s: script ended without output", f->tag);
                else
                    um_log_err("cgi: %s: script ended inside its response head", f->tag);
                fetch_fail(f, 502);
            } else {
                fetch_end(f);
            }
            return;
        }
        f->out_len += (size_t)n;
        if (!f->head_done) {
            if (!send_head(f))
                return;
        } else if (!deliver(f)) {
            return;
        }
    }
}

static void log_stderr_line(struct cgi_fetch *f)
{
    if (f->err_len)
        um_log_err("cgi: %s: %.*s", f->tag, (int)f->err_len, f->errline);
    f->err_len = 0;
}

static void on_stderr(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = (struct cgi_fetch *)((char *)io - offsetof(struct cgi_fetch, errio));
    char buf[4096];
    for (int k = 0; k < READS_PER_EVENT && io->fd >= 0; k++) {
        ssize_t n = read(io->fd, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR))
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            log_stderr_line(f);
            close_io(f->wc, io);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            char c = buf[i];
            if (c == '\n') {
                log_stderr_line(f);
                continue;
            }
            if (f->err_len == sizeof(f->errline))
                log_stderr_line(f);
            f->errline[f->err_len++] = (unsigned char)c < ' ' && c != '\t' ? '?' : c;
        }
    }
}

/* Moves request body from the connection into the script's stdin until one of them has
 * to wait. */
static void pump_body(struct cgi_fetch *f)
{
    while (f->sink && f->inio.fd >= 0) {
        if (f->in_off == f->in_len) {
            ssize_t n = f->sink->ops->read_body(f->sink, f->in, READ_CHUNK);
            if (n == UM_AGAIN)
                return; /* body_ready comes */
            if (n == 0) {
                close_io(f->wc, &f->inio); /* the script sees the end of its input */
                return;
            }
            if (n < 0) {
                /* The client's body failed: the connection answers, and says why. */
                struct um_sink *s = f->sink;
                fetch_done(f, true);
                s->ops->on_end(s, UM_ERR);
                return;
            }
            f->in_len = (size_t)n;
            f->in_off = 0;
        }
        ssize_t w = write(f->inio.fd, f->in + f->in_off, f->in_len - f->in_off);
        if (w > 0) {
            f->in_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            um_loop_io_set(f->wc->ctx->loop, &f->inio, f->inio.fd, EPOLLOUT);
            return;
        }
        /* The script stopped reading (EPIPE): what is left of the body is not its. */
        close_io(f->wc, &f->inio);
        return;
    }
}

static void on_stdin(struct um_io *io, uint32_t events)
{
    struct cgi_fetch *f = (struct cgi_fetch *)((char *)io - offsetof(struct cgi_fetch, inio));
    if (io->fd < 0)
        return;
    um_loop_io_set(f->wc->ctx->loop, io, io->fd, 0);
    pump_body(f);
}

/* ---------------------------------------------------------------- spawning */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The spawners. posix_spawn holds its caller from the clone to the exec, which on a busy
 * machine is a millisecond or more (the new process waits for a CPU, then loads its
 * interpreter); a worker would serve nobody meanwhile. So the workers queue the spawn to a
 * few threads of the process, started on first use and living as long as it, that do
 * nothing else, and go on: the script's pipes are in the worker's loop from the start (its
 * stdin takes the body into the pipe's buffer, its stdout is simply not readable yet), and
 * the result (the pid and a pidfd, or the error) comes back to the worker's loop with
 * um_loop_post. A child that the worker wanted killed before its pid was known is signalled
 * then. */
#define SPAWNERS 4

struct spawn_job {
    struct um_task done; /* posted to the worker's loop once the spawn is over */
    struct spawn_job *qnext;       /* the spawners' queue */
    struct spawn_job *next, *prev; /* the worker's jobs not done yet */
    struct worker_cgi *wc;
    struct cgi_child *child;
    char *script, *dir, **argv, **envp; /* the job's own copies */
    int child_fds[3];    /* stdin, stdout, stderr ends for the child; the spawner closes them */
    /* Results, written by the spawner before it posts done. */
    int err;             /* 0 or an errno value */
    pid_t pid;
    int pidfd;
    int finished;        /* under spawners.lock: done, and posted to the worker */
};

static struct {
    pthread_once_t once;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct spawn_job *head, *tail;
} spawners = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL};

static char **strv_copy(char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **c = um_calloc(n + 1, sizeof(*c));
    for (size_t i = 0; i < n; i++)
        c[i] = um_strndup(v[i], strlen(v[i]));
    return c;
}

static void strv_free(char **v)
{
    if (v == NULL)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void run_job(struct spawn_job *j)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int e = posix_spawn_file_actions_init(&fa);
    if (e != 0)
        goto out;
    /* dup2 clears close-on-exec on 0, 1 and 2; every other descriptor is closed. */
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[0], 0);
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, j->child_fds[2], 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawn_file_actions_addchdir_np(&fa, j->dir);
    if ((e = posix_spawnattr_init(&at)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        goto out;
    }
    /* Handlers do not survive exec, but an ignored signal stays ignored: the server ignores
     * SIGPIPE, which a script must not inherit. */
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGCHLD);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_USEVFORK);
    pid_t pid;
    e = posix_spawn(&pid, j->script, &fa, &at, j->argv, j->envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e != 0)
        goto out;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        /* Cannot watch it: do not let it run unwatched. */
        e = errno;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        goto out;
    }
    j->pid = pid;
    j->pidfd = pidfd;
out:
    j->err = e;
    for (int i = 0; i < 3; i++)
        close(j->child_fds[i]);
}

static void *spawner_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&spawners.lock);
        while (spawners.head == NULL)
            pthread_cond_wait(&spawners.cond, &spawners.lock);
        struct spawn_job *j = spawners.head;
        spawners.head = j->qnext;
        if (spawners.head == NULL)
            spawners.tail = NULL;
        pthread_mutex_unlock(&spawners.lock);
        run_job(j);
        /* Finished and posted in one hold of the lock: a stopping worker that sees the job
         * finished (under the lock) knows it is posted, takes it back and frees it; and
         * after the post, the job is the worker's (it may be freed at once). */
        pthread_mutex_lock(&spawners.lock);
        j->finished = 1;
        um_loop_post(j->wc->ctx->loop, &j->done);
        pthread_mutex_unlock(&spawners.lock);
    }
    return NULL;
}

static void start_spawners(void)
{
    /* The spawners take no signal: the server's signals belong to its main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < SPAWNERS; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 256 << 10);
        UM_ASSERT(pthread_create(&t, &a, spawner_main, NULL) == 0);
        pthread_attr_destroy(&a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The worker's side of a finished job: the child gets its pid and pidfd (or, when the spawn
 * failed, counts as gone: the fetch sees its stdout end with nothing, a 502). */
static void job_done(struct spawn_job *j)
{
    struct worker_cgi *wc = j->wc;
    struct cgi_child *c = j->child;
    if (j->prev)
        j->prev->next = j->next;
    else
        wc->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    c->spawning = false;
    if (j->err != 0) {
        um_log_err("cgi: %s: cannot run %s: %s", c->fetch ? c->fetch->tag : "-", j->script,
                   strerror(j->err));
        c->reaped = true; /* there is no process */
    } else {
        c->pid = j->pid;
        UM_ASSERT(um_loop_io_set(wc->ctx->loop, &c->pidio, j->pidfd, EPOLLIN) == UM_OK);
        /* What was decided while the pid was not known yet. */
        if (c->kill_stage == 2)
            child_signal(c, SIGKILL);
        else if (c->kill_stage == 1)
            child_signal(c, SIGTERM);
    }
    free(j->script);
    free(j->dir);
    strv_free(j->argv);
    strv_free(j->envp);
    free(j);
    child_maybe_free(c);
}

static void on_job_done(struct um_task *t)
{
    job_done((struct spawn_job *)((char *)t - offsetof(struct spawn_job, done)));
}

/* At a worker's end: waits for its jobs still with the spawners, and takes them. */
static void drain_jobs(struct worker_cgi *wc)
{
    while (wc->jobs) {
        struct spawn_job *j = wc->jobs;
        for (;;) {
            pthread_mutex_lock(&spawners.lock);
            int finished = j->finished;
            pthread_mutex_unlock(&spawners.lock);
            if (finished)
                break;
            usleep(1000); /* a spawn takes about a millisecond */
        }
        um_loop_unpost(wc->ctx->loop, &j->done);
        job_done(j);
    }
}

/* Starts script (absolute) in dir with argv and f's environment: the pipes go into the
 * loop, the spawn to a spawner. Returns 0 or an errno value (then nothing started). */
static int spawn(struct cgi_fetch *f, const char *script, const char *dir, char *const argv[])
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        int e = errno;
        int fds[] = {in[0], in[1], out[0], out[1], err[0], err[1]};
        for (size_t i = 0; i < UM_NELEMS(fds); i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return e;
    }
    pthread_once(&spawners.once, start_spawners);
    struct worker_cgi *wc = f->wc;
    struct um_loop *loop = wc->ctx->loop;
    struct cgi_child *c = um_calloc(1, sizeof(*c));
    c->wc = wc;
    c->fetch = f;
    c->spawning = true;
    c->pidio.cb = on_child_exit;
    c->pidio.fd = -1;
    c->timer.cb = on_child_timer;
    c->free_task.cb = child_free_task;
    c->next = wc->children;
    if (c->next)
        c->next->prev = c;
    wc->children = c;
    um_loop_timer_start(loop, &c->timer, f->o->timeout_ms);
    f->child = c;

    set_nonblock(in[1]);
    set_nonblock(out[0]);
    set_nonblock(err[0]);
    f->outio.cb = on_stdout;
    f->inio.cb = on_stdin;
    f->errio.cb = on_stderr;
    UM_ASSERT(um_loop_io_set(loop, &f->outio, out[0], EPOLLIN) == UM_OK);
    UM_ASSERT(um_loop_io_set(loop, &f->errio, err[0], EPOLLIN) == UM_OK);
    f->inio.fd = in[1];

    struct spawn_job *j = um_calloc(1, sizeof(*j));
    j->done.cb = on_job_done;
    j->wc = wc;
    j->child = c;
    j->script = um_strndup(script, strlen(script));
    j->dir = um_strndup(dir, strlen(dir));
    j->argv = strv_copy(argv);
    j->envp = strv_copy(f->env.v);
    j->child_fds[0] = in[0];
    j->child_fds[1] = out[1];
    j->child_fds[2] = err[1];
    j->pidfd = -1;
    j->next = wc->jobs;
    if (j->next)
        j->next->prev = j;
    wc->jobs = j;
    pthread_mutex_lock(&spawners.lock);
    j->qnext = NULL;
    if (spawners.tail)
        spawners.tail->qnext = j;
    else
        spawners.head = j;
    spawners.tail = j;
    pthread_cond_signal(&spawners.cond);
    pthread_mutex_unlock(&spawners.lock);
    return 0;
}

/* Finds and starts the script for path (below the route's prefix, still encoded) and
 * query, with f->env holding the request's variables. Returns 0 or the status to answer
 * with. Used for the request and for a local redirect (then as a GET without body). */
static int start_script(struct cgi_fetch *f, um_str path, um_str query)
{
    struct cgi_origin *o = f->o;
    char rel[MAX_PATH];
    size_t rel_len;
    unsigned flags;
    if (um_path_normalize(path, rel, sizeof(rel) - 1, &rel_len, &flags) != UM_OK)
        return 400;
    bool trailing = path.len > 0 && path.base[path.len - 1] == '/';
    struct script *sc = um_malloc(sizeof(*sc));
    int status = find_script(o, rel, rel_len, trailing, sc);
    if (status != 0) {
        free(sc);
        return status;
    }
    char *abs = um_malloc(strlen(o->root) + 1 + sc->rel_len + 1);
    size_t rlen = strlen(o->root);
    memcpy(abs, o->root, rlen);
    abs[rlen] = '/';
    memcpy(abs + rlen + 1, sc->rel, sc->rel_len);
    abs[rlen + 1 + sc->rel_len] = '\0';
    const char *base = strrchr(abs, '/') + 1;
    f->nph = strncmp(base, "nph-", 4) == 0;

    /* The variables that depend on the script. */
    char *sn = um_malloc(o->script_base_len + 1 + sc->rel_len + 1);
    memcpy(sn, o->route_path, o->script_base_len);
    sn[o->script_base_len] = '/';
    memcpy(sn + o->script_base_len + 1, sc->rel, sc->rel_len);
    size_t snlen = o->script_base_len + 1 + sc->rel_len;
    env_set(&f->env, "SCRIPT_NAME", sn, snlen);
    env_set(&f->env, "SCRIPT_FILENAME", abs, strlen(abs));
    env_set(&f->env, "PATH_INFO", sc->path_info, strlen(sc->path_info));
    env_del(&f->env, "PATH_TRANSLATED");
    if (sc->path_info[0]) {
        char *pt = um_malloc(rlen + strlen(sc->path_info) + 1);
        memcpy(pt, o->root, rlen);
        memcpy(pt + rlen, sc->path_info, strlen(sc->path_info) + 1);
        env_set(&f->env, "PATH_TRANSLATED", pt, strlen(pt));
        free(pt);
    }
    env_set(&f->env, "QUERY_STRING", query.base, query.len);
    free(sn);

    char **args = um_cgi_query_args(query, MAX_ARGS);
    size_t nargs = 0;
    if (args)
        while (args[nargs])
            nargs++;
    char **argv = um_calloc(nargs + 2, sizeof(*argv));
    argv[0] = abs;
    for (size_t i = 0; i < nargs; i++)
        argv[i + 1] = args[i];

    /* The previous script of a local redirect: its output is done with. */
    if (f->child) {
        child_detach(f->child, false);
        f->child = NULL;
    }
    close_io(f->wc, &f->outio);
    close_io(f->wc, &f->inio);
    close_io(f->wc, &f->errio);
    f->out_len = f->out_off = 0;
    f->in_len = f->in_off = 0;

    /* The directory of the script is its working directory (RFC 3875 section 7.2). */
    char *dir = um_strndup(abs, (size_t)(base - abs - 1));
    int e = spawn(f, abs, dir, argv);
    if (e != 0) {
        um_log_err("cgi: %s: cannot run %s: %s", f->tag, abs, strerror(e));
        status = e == EACCES ? 403 : 502; /* ENOENT: its interpreter is missing */
    }
    free(dir);
    free(argv);
    um_cgi_free_args(args);
    free(abs);
    free(sc);
    return status;
}

/* ---------------------------------------------------------------- the request's variables */

static void add_http_vars(struct env *e, const struct um_request *req)
{
    char name[128];
    for (size_t i = 0; i < req->num_headers; i++) {
        um_str n = req->headers[i].name;
        if (n.len + 6 > sizeof(name) || memchr(n.base, '_', n.len) ||
            um_str_eq_ci(n, "authorization") || um_str_eq_ci(n, "content-type") ||
            um_str_eq_ci(n, "content-length") || um_str_eq_ci(n, "proxy") ||
            (n.len >= 6 && um_str_eq_ci((um_str){n.base, 6}, "proxy-")))
            continue;
        bool seen = false; /* joined into the first one's variable */
        for (size_t j = 0; j < i && !seen; j++)
            seen = req->headers[j].name.len == n.len &&
                   strncasecmp(req->headers[j].name.base, n.base, n.len) == 0;
        if (seen)
            continue;
        memcpy(name, "HTTP_", 5);
        for (size_t k = 0; k < n.len; k++) {
            char c = n.base[k];
            name[5 + k] = c == '-' ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : c;
        }
        name[5 + n.len] = '\0';
        struct um_buf v;
        um_buf_init(&v);
        for (size_t j = i; j < req->num_headers; j++) {
            if (req->headers[j].name.len != n.len ||
                strncasecmp(req->headers[j].name.base, n.base, n.len) != 0)
                continue;
            if (v.len)
                um_buf_append(&v, ", ", 2);
            um_buf_append(&v, req->headers[j].value.base, req->headers[j].value.len);
        }
        env_add(e, name, v.base ? v.base : "", v.len);
        um_buf_dispose(&v);
    }
}

static void build_env(struct cgi_fetch *f, const struct um_fetch *uf)
{
    const struct um_request *req = uf->req;
    struct env *e = &f->env;
    char num[32];
    env_adds(e, "GATEWAY_INTERFACE", "CGI/1.1");
    env_adds(e, "SERVER_SOFTWARE", "umbra/" UMBRA_VERSION);
    env_adds(e, "PATH", "/usr/local/bin:/usr/bin:/bin");
    bool https = uf->scheme && strcmp(uf->scheme, "https") == 0;
    /* SERVER_NAME and SERVER_PORT from the Host the client used (section 4.1.14). */
    um_str host = req->authority, port = {NULL, 0};
    if (host.len && host.base[0] == '[') {
        const char *rb = memchr(host.base, ']', host.len);
        if (rb) {
            size_t hl = (size_t)(rb - host.base) + 1;
            if (hl < host.len && host.base[hl] == ':')
                port = (um_str){host.base + hl + 1, host.len - hl - 1};
            host.len = hl;
        }
    } else if (host.len) {
        const char *colon = memchr(host.base, ':', host.len);
        if (colon) {
            port = (um_str){colon + 1, host.len - (size_t)(colon - host.base) - 1};
            host.len = (size_t)(colon - host.base);
        }
    }
    if (host.len)
        env_add(e, "SERVER_NAME", host.base, host.len);
    else
        env_adds(e, "SERVER_NAME", uf->server_name ? uf->server_name : "localhost");
    if (port.len)
        env_add(e, "SERVER_PORT", port.base, port.len);
    else
        env_adds(e, "SERVER_PORT", https ? "443" : "80");
    snprintf(num, sizeof(num), "HTTP/1.%d", req->minor_version);
    env_adds(e, "SERVER_PROTOCOL", num);
    env_add(e, "REQUEST_METHOD", req->method.base, req->method.len);
    env_add(e, "REQUEST_URI", req->target.base, req->target.len);
    env_adds(e, "REMOTE_ADDR", uf->client_ip ? uf->client_ip : "");
    env_adds(e, "REMOTE_HOST", uf->client_ip ? uf->client_ip : "");
    snprintf(num, sizeof(num), "%d", uf->client_port);
    env_adds(e, "REMOTE_PORT", num);
    if (https)
        env_adds(e, "HTTPS", "on");
    const um_str *v = um_http1_find_header(req, "content-type");
    if (v)
        env_add(e, "CONTENT_TYPE", v->base, v->len);
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) && !(req->flags & UM_REQ_F_CHUNKED)) {
        snprintf(num, sizeof(num), "%llu", (unsigned long long)req->content_length);
        env_adds(e, "CONTENT_LENGTH", num);
    }
    v = um_http1_find_header(req, "authorization");
    if (v && v->len) {
        size_t n = 0;
        while (n < v->len && v->base[n] != ' ' && v->base[n] != '\t')
            n++;
        env_add(e, "AUTH_TYPE", v->base, n);
    }
    add_http_vars(e, req);
}

/* ---------------------------------------------------------------- the origin */

static void cgi_fetch(struct um_origin *base, struct um_fetch *uf, struct um_sink *sink)
{
    struct cgi_origin *o = (struct cgi_origin *)base;
    const struct um_request *req = uf->req;
    int running = __atomic_add_fetch(&o->children, 1, __ATOMIC_RELAXED);
    if (running > o->max_children) {
        __atomic_sub_fetch(&o->children, 1, __ATOMIC_RELAXED);
        um_log_warn("cgi: %.*s %.*s: %d scripts running already (cgi.max_children)",
                    (int)req->method.len, req->method.base, (int)req->path.len, req->path.base,
                    o->max_children);
        static const struct um_header h[2] = {
            {UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")},
            {UM_STR("Retry-After"), UM_STR("1")},
        };
        struct um_response_head head = {.status = 503, .headers = h, .num_headers = 2, .no_store = true};
        um_sink_answer(sink, &head, status_text(503));
        return;
    }
    struct worker_cgi *wc = worker_cgi(uf->ctx);
    struct cgi_fetch *f = um_calloc(1, sizeof(*f));
    f->wc = wc;
    f->o = o;
    f->sink = sink;
    sink->origin_data = f;
    f->outio.fd = f->inio.fd = f->errio.fd = -1;
    f->free_task.cb = fetch_free_task;
    f->remaining = -1;
    f->out_cap = READ_CHUNK;
    f->out = um_malloc(f->out_cap);
    f->next = wc->fetches;
    if (f->next)
        f->next->prev = f;
    wc->fetches = f;
    snprintf(f->tag, sizeof(f->tag), "%.*s %.*s", (int)req->method.len, req->method.base,
             (int)(req->path.len > 150 ? 150 : req->path.len), req->path.base);
    f->has_body = (req->flags & UM_REQ_F_CHUNKED) ||
                  ((req->flags & UM_REQ_F_CONTENT_LENGTH) && req->content_length > 0);
    build_env(f, uf);
    um_str query = (req->flags & UM_REQ_F_HAS_QUERY) ? req->query : (um_str){"", 0};
    int status = start_script(f, uf->path, query);
    if (status != 0) {
        fetch_fail(f, status);
        return;
    }
    if (f->has_body) {
        f->in = um_malloc(READ_CHUNK);
        pump_body(f);
    } else {
        close_io(wc, &f->inio);
    }
}

static void cgi_resume(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink || !f->paused)
        return;
    pause_output(f, false);
    if (!deliver(f))
        return;
    if (f->outio.fd >= 0)
        on_stdout(&f->outio, EPOLLIN);
}

static void cgi_body_ready(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink)
        return;
    if (f->inio.fd >= 0 && f->inio._events == 0)
        pump_body(f);
}

static void cgi_cancel(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink)
        return;
    sink->origin_data = NULL;
    fetch_done(f, true);
}

static void cgi_destroy(struct um_origin *base)
{
    struct cgi_origin *o = (struct cgi_origin *)base;
    close(o->root_fd);
    free(o->root);
    free(o->route_path);
    free(o);
}

static const struct um_origin_ops cgi_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = cgi_fetch,
    .resume = cgi_resume,
    .body_ready = cgi_body_ready,
    .cancel = cgi_cancel,
    .destroy = cgi_destroy,
};

struct um_origin *um_cgi_origin_create(const struct um_route *route,
                                       const struct um_config *config, char *err,
                                       size_t errlen)
{
    int fd = open(route->cgi, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "route %s: cannot open cgi directory %s: %s", route->path,
                 route->cgi, strerror(errno));
        return NULL;
    }
    struct cgi_origin *o = um_calloc(1, sizeof(*o));
    o->base.ops = &cgi_ops;
    o->root_fd = fd;
    o->root = um_strndup(route->cgi, strlen(route->cgi));
    o->route_path = um_strndup(route->path, strlen(route->path));
    o->script_base_len = strlen(route->path);
    while (o->script_base_len > 0 && route->path[o->script_base_len - 1] == '/')
        o->script_base_len--;
    o->max_children = config->cgi.max_children > 0 ? config->cgi.max_children : 64;
    o->timeout_ms = (uint64_t)((config->cgi.timeout > 0 ? config->cgi.timeout : 30) * 1000);
    return &o->base;
}
