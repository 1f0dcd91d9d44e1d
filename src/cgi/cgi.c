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
#include "internal.h"
#include "umbra/module.h"

/* The scripts running on the worker (struct worker_cgi). */
static void on_worker_stop(struct um_context *ctx, void *state);
struct um_context_slot um__cgi_slot = {.name = "cgi scripts", .stop = on_worker_stop};

const struct um_module um_cgi_module = {
    .name = "cgi",
    .settings = &um_cgi_settings,
    .slots = (struct um_context_slot *const[]){&um__cgi_slot, NULL},
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


void um__cgi_close_io(struct worker_cgi *wc, struct um_io *io)
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

static void on_worker_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct worker_cgi *wc = state;
    um__cgi_drain_jobs(wc);
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
    um_context_set(wc->ctx, &um__cgi_slot, NULL);
    free(wc);
}

static struct worker_cgi *worker_cgi(struct um_context *ctx)
{
    struct worker_cgi *wc = um_context_get(ctx, &um__cgi_slot);
    if (wc)
        return wc;
    wc = um_calloc(1, sizeof(*wc));
    wc->ctx = ctx;
    um_context_set(ctx, &um__cgi_slot, wc);
    return wc;
}

/* ---------------------------------------------------------------- the child */

static void child_free(struct cgi_child *c)
{
    struct worker_cgi *wc = c->wc;
    um_loop_timer_stop(wc->ctx->loop, &c->timer);
    um__cgi_close_io(wc, &c->pidio);
    if (c->prev)
        c->prev->next = c->next;
    else
        wc->children = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

void um__cgi_child_free_task(struct um_task *t)
{
    child_free(um_container_of(t, struct cgi_child, free_task));
}

void um__cgi_child_signal(struct cgi_child *c, int sig)
{
    if (c->reaped || c->pid <= 0)
        return; /* gone, or not started yet: the spawn's end applies kill_stage */
    /* The group first (what the script started), then the script, in case it left it. */
    kill(-c->pid, sig);
    kill(c->pid, sig);
}

void um__cgi_child_maybe_free(struct cgi_child *c)
{
    if (c->reaped && c->fetch == NULL && !c->spawning)
        um_loop_defer(c->wc->ctx->loop, &c->free_task);
}

/* The fetch lets go of its child: kill_now when the script's work is unwanted. */
void um__cgi_child_detach(struct cgi_child *c, bool kill_now)
{
    c->fetch = NULL;
    if (kill_now && !c->reaped && c->kill_stage < 2) {
        um__cgi_child_signal(c, SIGKILL);
        c->kill_stage = 2;
    }
    um__cgi_child_maybe_free(c);
}

static void fetch_timeout(struct cgi_fetch *f);

void um__cgi_on_child_timer(struct um_timer *t)
{
    struct cgi_child *c = um_container_of(t, struct cgi_child, timer);
    if (c->kill_stage == 0) {
        struct cgi_fetch *f = c->fetch;
        if (f) {
            /* Detached here, so that ending the fetch does not SIGKILL at once: the script
             * gets its SIGTERM and the grace period first. */
            c->fetch = NULL;
            f->child = NULL;
            fetch_timeout(f);
        }
        um__cgi_child_signal(c, SIGTERM);
        c->kill_stage = 1;
        um_loop_timer_start(c->wc->ctx->loop, &c->timer, KILL_GRACE_MS);
    } else if (c->kill_stage == 1) {
        um__cgi_child_signal(c, SIGKILL);
        c->kill_stage = 2;
    }
}

void um__cgi_on_child_exit(struct um_io *io, uint32_t events)
{
    struct cgi_child *c = um_container_of(io, struct cgi_child, pidio);
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
    um__cgi_close_io(c->wc, &c->pidio);
    if (c->fetch && (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED) && c->kill_stage == 0)
        um_log_warn("cgi: %s: script killed by signal %d", c->fetch->tag, si.si_status);
    um__cgi_child_maybe_free(c);
}

/* ---------------------------------------------------------------- the fetch's end */

static void fetch_free(struct cgi_fetch *f)
{
    struct worker_cgi *wc = f->wc;
    um__cgi_close_io(wc, &f->outio);
    um__cgi_close_io(wc, &f->inio);
    um__cgi_close_io(wc, &f->errio);
    if (f->child)
        um__cgi_child_detach(f->child, true);
    if (f->err_len)
        um_log_err("cgi: %s: %.*s", f->tag, (int)f->err_len, f->errline);
    if (f->prev)
        f->prev->next = f->next;
    else
        wc->fetches = f->next;
    if (f->next)
        f->next->prev = f->prev;
    um__cgi_env_free(&f->env);
    free(f->out);
    free(f->in);
    free(f);
}

static void fetch_free_task(struct um_task *t)
{
    fetch_free(um_container_of(t, struct cgi_fetch, free_task));
}

/* The sink is done (ended or cancelled): give back the slot, stop the pipes, free later. */
void um__cgi_fetch_done(struct cgi_fetch *f, bool kill_child)
{
    f->sink = NULL;
    if (f->o) {
        atomic_fetch_sub_explicit(&f->o->children, 1, memory_order_relaxed);
        f->o = NULL;
    }
    if (f->child) {
        um__cgi_child_detach(f->child, kill_child);
        f->child = NULL;
    }
    um__cgi_close_io(f->wc, &f->outio);
    um__cgi_close_io(f->wc, &f->inio);
    if (!f->freeing) {
        f->freeing = true;
        um_loop_defer(f->wc->ctx->loop, &f->free_task);
    }
}

/* Ends the answer: an error page when no head went out yet, else a body cut short. */
void um__cgi_fetch_fail(struct cgi_fetch *f, int status)
{
    struct um_sink *s = f->sink;
    if (s == NULL)
        return;
    bool head_done = f->head_done;
    um__cgi_fetch_done(f, true);
    if (!head_done)
        um_sink_answer_text(s, status, status_text(status));
    else
        s->ops->on_end(s, UM_ERR);
}

void um__cgi_fetch_end(struct cgi_fetch *f)
{
    struct um_sink *s = f->sink;
    bool whole = f->remaining <= 0;
    um__cgi_fetch_done(f, false);
    s->ops->on_end(s, whole ? UM_OK : UM_ERR);
}

static void fetch_timeout(struct cgi_fetch *f)
{
    um_log_warn("cgi: %s: script ran past the timeout; killing it", f->tag);
    um__cgi_fetch_fail(f, 504);
}

/* ---------------------------------------------------------------- the origin */

static void cgi_fetch(struct um_origin *base, struct um_fetch *uf, struct um_sink *sink)
{
    struct cgi_origin *o = (struct cgi_origin *)base;
    const struct um_request *req = uf->req;
    int running = atomic_fetch_add_explicit(&o->children, 1, memory_order_relaxed) + 1;
    if (running > o->max_children) {
        atomic_fetch_sub_explicit(&o->children, 1, memory_order_relaxed);
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
    um__cgi_build_env(f, uf);
    um_str query = (req->flags & UM_REQ_F_HAS_QUERY) ? req->query : (um_str){"", 0};
    int status = um__cgi_start_script(f, uf->path, query);
    if (status != 0) {
        um__cgi_fetch_fail(f, status);
        return;
    }
    if (f->has_body) {
        f->in = um_malloc(READ_CHUNK);
        um__cgi_pump_body(f);
    } else {
        um__cgi_close_io(wc, &f->inio);
    }
}

static void cgi_resume(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink || !f->paused)
        return;
    um__cgi_pause_output(f, false);
    if (!um__cgi_deliver(f))
        return;
    if (f->outio.fd >= 0)
        um__cgi_on_stdout(&f->outio, EPOLLIN);
}

static void cgi_body_ready(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink)
        return;
    if (f->inio.fd >= 0 && f->inio._events == 0)
        um__cgi_pump_body(f);
}

static void cgi_cancel(struct um_origin *base, struct um_sink *sink)
{
    struct cgi_fetch *f = sink->origin_data;
    if (f == NULL || f->sink != sink)
        return;
    sink->origin_data = NULL;
    um__cgi_fetch_done(f, true);
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
    const struct um_cgi_conf *cc = um_config_part(config, &um_cgi_settings);
    o->max_children = cc->max_children;
    o->timeout_ms = (uint64_t)(cc->timeout * 1000);
    return &o->base;
}
