/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin listener's internal routes (internal.h's um__admin_route) and the origin that
 * answers them. An admin connection is an ordinary connection (conn.c: the strict HTTP/1.1
 * parser, keep-alive, the timeouts; its own smaller limits, conn.h), but its requests never
 * reach the configuration's routes, hooks, cache or compression: the router sends them
 * here.
 *
 *   GET/HEAD /metrics             Prometheus text (admin_render.c)
 *   GET/HEAD /status.json         the figures as JSON (admin_render.c)
 *   GET/HEAD /status, /           the status page (status_page.c)
 *   POST /purge                   a purge (admin_purge.c), run on the admin thread (admin.c)
 *
 * Other paths are 404 with a hint, other methods 405, clients outside admin.allow 403.
 * Every answer says Cache-Control: no-store. The figures are rendered on the worker; a
 * purge, which may take long (it is paced), goes to the admin thread and its answer comes
 * back to the worker's loop while the exchange waits. Worker threads only. */
#include <stdlib.h>
#include <string.h>

#include "exchange.h"
#include "internal.h"
#include "umbra/buf.h"

extern const char um__status_page[];

#define TEXT_PLAIN "text/plain"
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

static const char no_store[] = "no-store";

/* An answer with its Content-Type and Cache-Control: no-store. body: NUL-terminated. */
static void answer(struct um_sink *s, int status, const char *type, const char *body)
{
    struct um_header h[2] = {{UM_STR("Content-Type"), {type, strlen(type)}},
                             {UM_STR("Cache-Control"), {no_store, sizeof(no_store) - 1}}};
    struct um_response_head head = {.status = status, .headers = h, .num_headers = 2};
    um_sink_answer(s, &head, body);
}

static struct um_server *server_of(const struct um_fetch *f)
{
    return um_container_of(f->ctx, struct um__worker, ctx)->server;
}

/* Whether the request's body is JSON: Content-Type application/json or a +json type; with
 * no Content-Type, a body that opens with '{'. */
static bool is_json(const struct um_request *req, const char *body, size_t len)
{
    const um_str *ct = um_http1_find_header(req, "content-type");
    if (ct == NULL)
        return len > 0 && body[0] == '{';
    um_str t = *ct;
    for (size_t i = 0; i < t.len; i++)
        if (t.base[i] == ';')
            t.len = i;
    t = um_str_trim(t);
    return um_str_eq_ci(t, "application/json") ||
           (t.len > 5 && um_str_eq_ci((um_str){t.base + t.len - 5, 5}, "+json"));
}

/* ---------------------------------------------------------------- POST /purge */

/* The admin thread ran the job: answer, unless the client left; then free it. */
static void on_job_done(struct um_task *t)
{
    struct um__admin_job *j = um_container_of(t, struct um__admin_job, done);
    struct um_sink *s = j->sink;
    if (s != NULL) {
        s->origin_data = NULL;
        answer(s, j->status, "application/json", j->out.base ? j->out.base : "");
    }
    um__admin_job_free(j->server->admin, j, true);
}

/* A purge that ends before it was submitted: the job goes, then the answer. */
static void purge_drop(struct um_sink *s, struct um__admin_job *j)
{
    s->origin_data = NULL;
    um__admin_job_free(j->server->admin, j, false);
}

/* Reads the body into the job; once it is whole, hands the job to the admin thread. */
static void purge_read(struct um_sink *s)
{
    struct um__admin_job *j = s->origin_data;
    for (;;) {
        if (j->len > UM__ADMIN_MAX_BODY) { /* a chunked body (a Content-Length is checked
                                              before the body is read) */
            purge_drop(s, j);
            answer(s, 413, TEXT_PLAIN, "413 Content Too Large\n");
            return;
        }
        ssize_t n = s->ops->read_body(s, j->body + j->len, UM__ADMIN_MAX_BODY + 1 - j->len);
        if (n == UM_AGAIN)
            return; /* body_ready calls again */
        if (n < 0) {
            purge_drop(s, j);
            s->ops->on_end(s, UM_ERR); /* the connection answers the body's error */
            return;
        }
        if (n == 0)
            break;
        j->len += (size_t)n;
    }
    j->body[j->len] = '\0';
    j->json = is_json(j->req, j->body, j->len);
    j->req = NULL;
    j->done.cb = on_job_done;
    j->submitted = true;
    if (!um__admin_submit(j->server->admin, j)) {
        j->submitted = false;
        purge_drop(s, j);
        answer(s, 503, TEXT_PLAIN, "503 Service Unavailable: stopping\n");
    }
}

static void purge_start(struct um_sink *s, const struct um_fetch *f)
{
    struct um__worker *w = um_container_of(f->ctx, struct um__worker, ctx);
    struct um__admin_job *j = um_calloc(1, sizeof(*j));
    j->body = um_malloc(UM__ADMIN_MAX_BODY + 2);
    j->server = w->server;
    j->loop = w->loop;
    j->runtime = w->runtime;
    um_runtime_ref(j->runtime);
    j->sink = s;
    j->req = f->req;
    s->origin_data = j;
    purge_read(s);
}

/* ---------------------------------------------------------------- the origins */

/* The figures, the page, 404 and 405: answered at once. A body, if any, was read and
 * dropped by the connection first (the origin does not stream it). */
static void figures_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *s)
{
    (void)o;
    const struct um_request *req = f->req;
    um_str path = req->path;
    if (req->method_id != UM_METHOD_GET && req->method_id != UM_METHOD_HEAD) {
        answer(s, 405, TEXT_PLAIN, "405 Method Not Allowed\n");
        return;
    }
    struct um_buf b = {0};
    if (um_str_eq(path, "/metrics")) {
        um__admin_render_metrics(server_of(f), &b);
        answer(s, 200, METRICS_TYPE, b.base ? b.base : "");
    } else if (um_str_eq(path, "/status.json")) {
        um__admin_render_json(server_of(f), f->config, &b);
        answer(s, 200, "application/json", b.base ? b.base : "");
    } else if (um_str_eq(path, "/status") || um_str_eq(path, "/")) {
        answer(s, 200, "text/html; charset=utf-8", um__status_page);
    } else {
        answer(s, 404, TEXT_PLAIN, "404 Not Found: try /metrics, /status or /status.json\n");
    }
    um_buf_dispose(&b);
}

static void purge_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *s)
{
    (void)o;
    purge_start(s, f);
}

static void purge_body_ready(struct um_origin *o, struct um_sink *s)
{
    (void)o;
    if (s->origin_data != NULL)
        purge_read(s);
}

/* The client is gone: a job not submitted yet goes now; a submitted one is the admin
 * thread's until it posts it back, so it only forgets the sink (the answer is dropped). */
static void purge_cancel(struct um_origin *o, struct um_sink *s)
{
    (void)o;
    struct um__admin_job *j = s->origin_data;
    if (j == NULL)
        return;
    if (j->submitted) {
        s->origin_data = NULL;
        j->sink = NULL;
    } else {
        purge_drop(s, j);
    }
}

static const struct um_origin_ops figures_ops = {.fetch = figures_fetch};

static const struct um_origin_ops purge_ops = {
    /* It reads the body itself, capped, while the connection goes on reading it. */
    .flags = UM_ORIGIN_F_STREAM_BODY,
    .fetch = purge_fetch,
    .body_ready = purge_body_ready,
    .cancel = purge_cancel,
};

/* One of each for the process: they hold no state of their own (a purge's is its job). */
static struct um_origin figures_origin = {&figures_ops};
static struct um_origin purge_origin = {&purge_ops};

struct um_origin *um__admin_route(struct um__exchange *x, struct um_fetch *f)
{
    const struct um_config *cfg = x->config;
    if (!um_netmask_match_text(cfg->admin.allow, cfg->admin.num_allow, x->peer_ip)) {
        x->keepalive = false; /* a client refused is not kept */
        x->origin = NULL;
        answer(&x->sink, 403, TEXT_PLAIN, "403 Forbidden: not in admin.allow\n");
        return NULL;
    }
    *f = (struct um_fetch){.ctx = &x->w->ctx, .req = &x->req, .config = x->config,
                           .path = x->req.path, .client_ip = x->peer_ip,
                           .client_port = x->peer_port, .scheme = "http"};
    if (x->req.method_id == UM_METHOD_POST && um_str_eq(x->req.path, "/purge"))
        return &purge_origin;
    return &figures_origin;
}
