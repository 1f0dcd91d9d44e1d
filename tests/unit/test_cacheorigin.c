/* The cache origin (src/cache/origin*.c) on a real loop and store, over a scripted inner
 * origin, without the binary: what clients get, what the inner origin is asked, and the
 * typed cache result on each answer.
 *
 * The inner origin records each fetch and answers only when a test tells it to, and then
 * on the loop (a deferred task), as an upstream answers from its descriptors. Clients are
 * recording sinks. Staleness comes from the responses' own fields (max-age=0), so nothing
 * sleeps: the layer reads the wall clock itself, and an object with a lifetime of 0 is
 * stale in any second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"
#include "umbra/cacheorigin.h"
#include "umbra/module.h"
#include "umbra/context.h"
#include "umbra/loop.h"

/* ---------------------------------------------------------------- allocations counted */

/* This test is linked with --wrap=malloc,--wrap=calloc,--wrap=realloc (CMakeLists.txt):
 * every allocation the cache layer (a static library linked in) makes is counted, so that
 * a test can check that a hit makes none. */
static unsigned long allocations;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

void *__wrap_malloc(size_t n)
{
    allocations++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    allocations++;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    allocations++;
    return __real_realloc(p, n);
}

/* ---------------------------------------------------------------- the scripted origin */

#define MAX_FETCHES 8
#define MAX_STEPS 8
#define MAX_FIELDS 6

enum step_kind { STEP_HEAD, STEP_DATA, STEP_END };

struct step {
    enum step_kind kind;
    int status;
    struct um_header fields[MAX_FIELDS];
    size_t num_fields;
    const char *data; /* a string literal of the test's (or a static buffer) */
    size_t len;       /* 0: strlen(data) */
};

/* One fetch the inner origin received, and what the test told it to answer. */
struct fake_fetch {
    struct fake_origin *fo;
    struct um_sink *sink;
    char target[64];
    char if_none_match[64]; /* "" when the request had none */
    bool cancelled, ended;
    struct step steps[MAX_STEPS];
    size_t num_steps, next_step;
    struct um_task task;
};

struct fake_origin {
    struct um_origin base;
    struct um_loop *loop;
    struct fake_fetch fetches[MAX_FETCHES];
    size_t num_fetches;
};

static void fake_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    struct fake_origin *fo = (struct fake_origin *)o;
    assert_true(fo->num_fetches < MAX_FETCHES);
    struct fake_fetch *ff = &fo->fetches[fo->num_fetches++];
    memset(ff, 0, sizeof(*ff));
    ff->fo = fo;
    ff->sink = sink;
    snprintf(ff->target, sizeof(ff->target), "%.*s", (int)f->req->target.len,
             f->req->target.base);
    const um_str *inm = um_http1_find_header(f->req, "If-None-Match");
    if (inm)
        snprintf(ff->if_none_match, sizeof(ff->if_none_match), "%.*s", (int)inm->len,
                 inm->base);
}

static void fake_cancel(struct um_origin *o, struct um_sink *sink)
{
    struct fake_origin *fo = (struct fake_origin *)o;
    for (size_t i = 0; i < fo->num_fetches; i++)
        if (fo->fetches[i].sink == sink && !fo->fetches[i].ended)
            fo->fetches[i].cancelled = true;
}

static void on_fake_task(struct um_task *t);

/* A sink that refused data (on_data returned 0) has room again: the refused step runs
 * again, on the loop. */
static void fake_resume(struct um_origin *o, struct um_sink *sink)
{
    struct fake_origin *fo = (struct fake_origin *)o;
    for (size_t i = 0; i < fo->num_fetches; i++) {
        struct fake_fetch *ff = &fo->fetches[i];
        if (ff->sink == sink && !ff->ended && !ff->cancelled) {
            ff->task.cb = on_fake_task;
            um_loop_defer(fo->loop, &ff->task);
        }
    }
}

static void fake_destroy(struct um_origin *o)
{
    (void)o; /* the fixture's */
}

static const struct um_origin_ops fake_ops = {
    .fetch = fake_fetch,
    .resume = fake_resume,
    .cancel = fake_cancel,
    .destroy = fake_destroy,
};

/* Runs the steps told so far, in order, on the loop. */
static void on_fake_task(struct um_task *t)
{
    struct fake_fetch *ff = (struct fake_fetch *)((char *)t - offsetof(struct fake_fetch, task));
    while (ff->next_step < ff->num_steps && !ff->cancelled && !ff->ended) {
        struct step *s = &ff->steps[ff->next_step++];
        switch (s->kind) {
        case STEP_HEAD: {
            struct um_response_head h = {.status = s->status,
                                         .headers = s->fields,
                                         .num_headers = s->num_fields,
                                         .content_length = -1};
            /* As an upstream does: a Content-Length field is the body's length. */
            for (size_t i = 0; i < s->num_fields; i++)
                if (um_str_eq_ci(s->fields[i].name, "content-length"))
                    h.content_length = strtoll(s->fields[i].value.base, NULL, 10);
            ff->sink->ops->on_head(ff->sink, &h);
            break;
        }
        case STEP_DATA: {
            size_t len = s->len ? s->len : strlen(s->data);
            size_t taken = ff->sink->ops->on_data(ff->sink, s->data, len);
            if (taken == 0) {
                ff->next_step--; /* sent again on resume */
                return;
            }
            assert_int_equal(taken, len);
            break;
        }
        case STEP_END:
            ff->ended = true;
            ff->sink->ops->on_end(ff->sink, UM_OK);
            break;
        }
    }
}

static struct step *add_step(struct fake_fetch *ff, enum step_kind kind)
{
    assert_true(ff->num_steps < MAX_STEPS);
    struct step *s = &ff->steps[ff->num_steps++];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    ff->task.cb = on_fake_task;
    um_loop_defer(ff->fo->loop, &ff->task);
    return s;
}

/* Tells fetch ff to send a head: status and fields given as name, value, ..., NULL. */
static void send_head(struct fake_fetch *ff, int status, ...)
{
    struct step *s = add_step(ff, STEP_HEAD);
    s->status = status;
    va_list ap;
    va_start(ap, status);
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);
        assert_true(s->num_fields < MAX_FIELDS);
        s->fields[s->num_fields++] = (struct um_header){{name, strlen(name)}, {value, strlen(value)}};
    }
    va_end(ap);
}

static void send_data(struct fake_fetch *ff, const char *data)
{
    add_step(ff, STEP_DATA)->data = data;
}

static void send_data_n(struct fake_fetch *ff, const char *data, size_t len)
{
    struct step *s = add_step(ff, STEP_DATA);
    s->data = data;
    s->len = len;
}

static void send_end(struct fake_fetch *ff)
{
    add_step(ff, STEP_END);
}

/* ---------------------------------------------------------------- recording clients */

struct client {
    struct um_sink sink;
    struct um_request req;
    struct um_fetch fetch;
    bool got_head, ended;
    int status, err;
    struct um_cache_status cs;
    bool has_cs;
    char fields[1024]; /* "name: value\n" each */
    size_t fields_len;
    char body[1024];
    size_t body_len;
    size_t num_wire; /* fields the head carried serialised (um_response_head.wire) */
};

static void rec_on_head(struct um_sink *s, const struct um_response_head *h)
{
    struct client *c = (struct client *)s;
    assert_false(c->got_head);
    c->got_head = true;
    c->status = h->status;
    if (h->cache) {
        c->cs = *h->cache;
        c->has_cs = true;
    }
    /* A serialised block must be exactly the fields it stands for, as HTTP/1.1 writes
     * them: a connection sends it instead of them. */
    assert_true(h->num_wire <= h->num_headers);
    if (h->num_wire > 0) {
        char want[1024];
        size_t wl = 0;
        for (size_t i = 0; i < h->num_wire; i++) {
            int n = snprintf(want + wl, sizeof(want) - wl, "%.*s: %.*s\r\n",
                             (int)h->headers[i].name.len, h->headers[i].name.base,
                             (int)h->headers[i].value.len, h->headers[i].value.base);
            assert_true(n > 0 && (size_t)n < sizeof(want) - wl);
            wl += (size_t)n;
        }
        if (h->wire.len != wl || memcmp(h->wire.base, want, wl) != 0)
            fail_msg("wire block \"%.*s\", want \"%.*s\"", (int)h->wire.len, h->wire.base,
                     (int)wl, want);
    } else {
        assert_int_equal(h->wire.len, 0);
    }
    c->num_wire = h->num_wire;
    for (size_t i = 0; i < h->num_headers; i++) {
        int n = snprintf(c->fields + c->fields_len, sizeof(c->fields) - c->fields_len,
                         "%.*s: %.*s\n", (int)h->headers[i].name.len, h->headers[i].name.base,
                         (int)h->headers[i].value.len, h->headers[i].value.base);
        assert_true(n > 0 && (size_t)n < sizeof(c->fields) - c->fields_len);
        c->fields_len += (size_t)n;
    }
}

static size_t rec_on_data(struct um_sink *s, const char *data, size_t len)
{
    struct client *c = (struct client *)s;
    assert_true(c->got_head && !c->ended);
    assert_true(len <= sizeof(c->body) - c->body_len);
    memcpy(c->body + c->body_len, data, len);
    c->body_len += len;
    return len;
}

static size_t rec_on_data_ref(struct um_sink *s, const char *data, size_t len,
                              void (*release)(void *ctx), void *ctx)
{
    size_t n = rec_on_data(s, data, len);
    release(ctx); /* done with them at once: copied */
    return n;
}

static void rec_on_file(struct um_sink *s, int fd, uint64_t off, uint64_t len)
{
    (void)s;
    (void)off;
    (void)len;
    close(fd);
    fail_msg("the cache sent a file");
}

static void rec_on_end(struct um_sink *s, int err)
{
    struct client *c = (struct client *)s;
    assert_false(c->ended);
    c->ended = true;
    c->err = err;
}

static ssize_t rec_read_body(struct um_sink *s, char *buf, size_t len)
{
    (void)s;
    (void)buf;
    (void)len;
    return 0;
}

static const struct um_sink_ops rec_ops = {
    .on_head = rec_on_head,
    .on_data = rec_on_data,
    .on_file = rec_on_file,
    .on_end = rec_on_end,
    .on_data_ref = rec_on_data_ref,
    .read_body = rec_read_body,
};

/* ---------------------------------------------------------------- the fixture */

struct fixture {
    struct um_loop *loop;
    struct um_context ctx;
    struct um_cache *cache;
    struct um_config *config;
    struct fake_origin inner;
    struct um_origin *co;
    struct client clients[6];
    size_t num_clients;
};

static struct fixture *fx;

static int setup(void **state)
{
    (void)state;
    fx = calloc(1, sizeof(*fx));
    fx->loop = um_loop_create();
    um_context_init(&fx->ctx, fx->loop, 0);
    struct um_cache_opts o = {.memory_cap = 4u << 20, .shards = 4};
    fx->cache = um_cache_create(&o);
    /* A snapshot of the fixture's own: fills take and drop references to it, the fixture
     * keeps the first. */
    fx->config = calloc(1, sizeof(*fx->config));
    fx->config->_refcnt = 1;
    static struct um_cache_conf cache_conf; /* every cache setting 0: no default TTL */
    um_config_set_part(fx->config, &um_cache_settings, &cache_conf);
    fx->inner.base.ops = &fake_ops;
    fx->inner.loop = fx->loop;
    fx->co = um_cache_origin_create(fx->cache, &fx->inner.base, NULL, fx->config);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    um_context_stop(&fx->ctx); /* the worker's fills go */
    um_context_dispose(&fx->ctx);
    fx->co->ops->destroy(fx->co);
    assert_int_equal(um_config_refs(fx->config), 1);
    free(fx->config);
    um_cache_destroy(fx->cache); /* every object reference was given back */
    um_loop_destroy(fx->loop);
    free(fx);
    fx = NULL;
    return 0;
}

/* Turns of the loop: enough for every deferred and posted task to run. */
static void run_loop(void)
{
    for (int i = 0; i < 8; i++)
        assert_int_equal(um_loop_run_once(fx->loop, 0), UM_OK);
}

static struct client *get_with(const char *path, const char *name, const char *value);

/* A client asks for GET path, Host example.com. */
static struct client *get(const char *path)
{
    return get_with(path, NULL, NULL);
}

/* The same with one more field, name: value (name NULL: none). */
static struct client *get_with(const char *path, const char *name, const char *value)
{
    assert_true(fx->num_clients < UM_NELEMS(fx->clients));
    struct client *c = &fx->clients[fx->num_clients++];
    memset(c, 0, sizeof(*c));
    c->sink.ops = &rec_ops;
    struct um_request *r = &c->req;
    r->method = (um_str)UM_STR("GET");
    r->method_id = UM_METHOD_GET;
    r->target = (um_str){path, strlen(path)};
    r->path = r->target;
    r->authority = (um_str)UM_STR("example.com");
    r->minor_version = 1;
    r->headers[r->num_headers++] = (struct um_header){UM_STR("Host"), UM_STR("example.com")};
    if (name != NULL)
        r->headers[r->num_headers++] =
            (struct um_header){{name, strlen(name)}, {value, strlen(value)}};
    r->flags = UM_REQ_F_KEEPALIVE;
    c->fetch = (struct um_fetch){.ctx = &fx->ctx,
                                 .req = r,
                                 .config = fx->config,
                                 .path = r->path,
                                 .client_ip = "127.0.0.1",
                                 .client_port = 40000,
                                 .scheme = "http"};
    fx->co->ops->fetch(fx->co, &c->fetch, &c->sink);
    return c;
}

static struct fake_fetch *fetch_no(size_t i)
{
    assert_true(i < fx->inner.num_fetches);
    return &fx->inner.fetches[i];
}

static void body_is(const struct client *c, const char *want)
{
    if (c->body_len != strlen(want) || memcmp(c->body, want, c->body_len) != 0)
        fail_msg("body \"%.*s\", want \"%s\"", (int)c->body_len, c->body, want);
}

static void done_with(const struct client *c, int status, const char *body)
{
    assert_true(c->got_head);
    assert_int_equal(c->status, status);
    assert_true(c->ended);
    assert_int_equal(c->err, UM_OK);
    body_is(c, body);
    assert_true(c->has_cs);
}

static bool has_field(const struct client *c, const char *line)
{
    return memmem(c->fields, c->fields_len, line, strlen(line)) != NULL;
}

/* ---------------------------------------------------------------- tests */

static void test_miss_fills_then_hit(void **state)
{
    (void)state;
    struct client *a = get("/a");
    assert_int_equal(fx->inner.num_fetches, 1);
    assert_string_equal(fetch_no(0)->target, "/a");
    assert_false(a->got_head); /* waits for the fill */

    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", "Content-Type", "text/plain",
              "ETag", "\"e1\"", NULL);
    send_data(fetch_no(0), "hello, ");
    send_data(fetch_no(0), "world");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "hello, world");
    assert_false(a->cs.hit);
    assert_int_equal(a->cs.fwd, UM_FWD_URI_MISS);
    assert_true(a->cs.stored);
    assert_int_equal(a->cs.fwd_status, 200);
    assert_true(has_field(a, "ETag: \"e1\"\n"));

    /* The next request is answered from the object, at once. */
    struct client *b = get("/a");
    assert_int_equal(fx->inner.num_fetches, 1);
    done_with(b, 200, "hello, world");
    assert_true(b->cs.hit);
    assert_true(b->cs.has_ttl);
    assert_true(b->cs.ttl > 0 && b->cs.ttl <= 60);
    assert_true(has_field(b, "Content-Type: text/plain\n"));
    assert_true(has_field(b, "ETag: \"e1\"\n"));
    assert_true(has_field(b, "Age: "));
    assert_true(has_field(b, "Cache-Status: umbra; hit"));
    assert_false(fetch_no(0)->cancelled);
}

static void test_cold_key_coalesces(void **state)
{
    (void)state;
    struct client *a = get("/c");
    struct client *b = get("/c");
    assert_int_equal(fx->inner.num_fetches, 1); /* one fetch for both */
    assert_false(a->got_head);
    assert_false(b->got_head);

    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", NULL);
    send_data(fetch_no(0), "first ");
    run_loop();
    /* Both stream what is stored while the fill goes on. */
    assert_true(a->got_head && b->got_head);
    body_is(a, "first ");
    body_is(b, "first ");
    assert_false(a->ended);
    assert_false(b->ended);
    assert_true(b->cs.collapsed);
    assert_int_equal(b->cs.fwd, UM_FWD_URI_MISS);

    send_data(fetch_no(0), "second");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "first second");
    done_with(b, 200, "first second");
    assert_int_equal(fx->inner.num_fetches, 1);
}

static void test_stale_revalidated_with_304(void **state)
{
    (void)state;
    struct client *a = get("/r");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=0", "ETag", "\"v1\"", NULL);
    send_data(fetch_no(0), "stored body");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "stored body");
    assert_true(a->cs.stored);

    /* Stale at once (a lifetime of 0): the next request asks with the stored validator. */
    struct client *b = get("/r");
    assert_int_equal(fx->inner.num_fetches, 2);
    assert_string_equal(fetch_no(1)->if_none_match, "\"v1\"");
    assert_false(b->got_head);
    send_head(fetch_no(1), 304, "Cache-Control", "max-age=60", "ETag", "\"v1\"", NULL);
    send_end(fetch_no(1));
    run_loop();
    done_with(b, 200, "stored body"); /* the stored body, not the 304 */
    assert_int_equal(b->cs.fwd, UM_FWD_STALE);
    assert_int_equal(b->cs.fwd_status, 304);
    assert_true(has_field(b, "Cache-Control: max-age=60\n")); /* the fields are the 304's */

    /* Refreshed: a hit now, with the new lifetime. */
    struct client *c = get("/r");
    assert_int_equal(fx->inner.num_fetches, 2);
    done_with(c, 200, "stored body");
    assert_true(c->cs.hit);
    assert_true(c->cs.ttl > 0);
}

static void test_no_store_passes(void **state)
{
    (void)state;
    struct client *a = get("/n");
    send_head(fetch_no(0), 200, "Cache-Control", "no-store", NULL);
    send_data(fetch_no(0), "secret 1");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "secret 1");
    assert_false(a->cs.hit);
    assert_false(a->cs.stored);
    assert_int_equal(a->cs.fwd_status, 200);
    assert_non_null(a->cs.detail);

    /* Nothing kept: the next request goes to the origin too, without waiting behind
     * another (the key is remembered as uncacheable). */
    struct client *b = get("/n");
    assert_int_equal(fx->inner.num_fetches, 2);
    send_head(fetch_no(1), 200, "Cache-Control", "no-store", NULL);
    send_data(fetch_no(1), "secret 2");
    send_end(fetch_no(1));
    run_loop();
    done_with(b, 200, "secret 2");
    assert_false(b->cs.hit);
    assert_false(b->cs.stored);
    assert_non_null(b->cs.detail);
    assert_string_equal(b->cs.detail, "hit-for-pass");
}

static void test_stale_while_revalidate(void **state)
{
    (void)state;
    struct client *a = get("/s");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=0, stale-while-revalidate=600",
              NULL);
    send_data(fetch_no(0), "version 1");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "version 1");

    /* Stale but within stale-while-revalidate: answered at once from the object... */
    struct client *b = get("/s");
    done_with(b, 200, "version 1");
    assert_true(b->cs.hit);
    assert_true(b->cs.ttl <= 0);
    /* ...and refreshed in the background, with nobody waiting for it. */
    assert_int_equal(fx->inner.num_fetches, 2);
    assert_string_equal(fetch_no(1)->target, "/s");
    send_head(fetch_no(1), 200, "Cache-Control", "max-age=60", NULL);
    send_data(fetch_no(1), "version 2");
    send_end(fetch_no(1));
    run_loop();
    assert_false(fetch_no(1)->cancelled);

    struct client *c = get("/s");
    assert_int_equal(fx->inner.num_fetches, 2);
    done_with(c, 200, "version 2");
    assert_true(c->cs.hit);
    assert_true(c->cs.ttl > 0);
}

/* The stored object of GET path (a new reference), or NULL. */
static struct um_cache_obj *stored(const char *path)
{
    char key[128];
    int n = snprintf(key, sizeof(key), "example.com %s", path);
    return um_cache_lookup(fx->cache, (um_str){key, (size_t)n}, NULL, NULL);
}

static void test_hit_takes_no_waiter_lock_and_allocates_nothing(void **state)
{
    (void)state;
    struct client *a = get("/fast");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", "ETag", "\"f1\"", NULL);
    send_data(fetch_no(0), "fast body");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "fast body");
    done_with(get("/fast"), 200, "fast body"); /* the worker's spare reader is made */

    struct um_cache_obj *obj = stored("/fast");
    assert_non_null(obj);
    unsigned long locks = um_cache_obj_waiter_locks(obj);
    unsigned long before = allocations;
    struct client *b = get("/fast");
    unsigned long hit_allocations = allocations - before;
    unsigned long hit_locks = um_cache_obj_waiter_locks(obj) - locks;
    um_cache_obj_unref(obj);
    done_with(b, 200, "fast body");
    assert_true(b->cs.hit);
    assert_true(has_field(b, "ETag: \"f1\"\n"));
    assert_int_equal(hit_allocations, 0);
    assert_int_equal(hit_locks, 0);

    /* A reader of an object still filling does wait, and the counter sees it. */
    struct client *c = get("/slow");
    struct um_cache_obj *slow = stored("/slow");
    assert_non_null(slow);
    unsigned long waited = um_cache_obj_waiter_locks(slow);
    um_cache_obj_unref(slow);
    assert_true(waited > 0);
    send_head(fetch_no(1), 200, "Cache-Control", "max-age=60", NULL);
    send_data(fetch_no(1), "slow body");
    send_end(fetch_no(1));
    run_loop();
    done_with(c, 200, "slow body");
}

/* A hit takes a conditional and a Range from the meta parsed at fill time. */
static void test_hit_conditional_and_range_from_meta(void **state)
{
    (void)state;
    struct client *a = get("/cond");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", "ETag", "\"c1\"", NULL);
    send_data(fetch_no(0), "0123456789");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "0123456789");

    assert_true(fx->num_clients + 2 <= UM_NELEMS(fx->clients));
    /* get() sends at once: build the two requests by hand with their extra field. */
    const char *extra_name[2] = {"If-None-Match", "Range"};
    const char *extra_value[2] = {"\"c1\"", "bytes=2-4"};
    struct client *cs[2];
    for (int i = 0; i < 2; i++) {
        struct client *c = &fx->clients[fx->num_clients++];
        memset(c, 0, sizeof(*c));
        c->sink.ops = &rec_ops;
        struct um_request *r = &c->req;
        r->method = (um_str)UM_STR("GET");
        r->method_id = UM_METHOD_GET;
        r->target = (um_str)UM_STR("/cond");
        r->path = r->target;
        r->authority = (um_str)UM_STR("example.com");
        r->minor_version = 1;
        r->headers[r->num_headers++] = (struct um_header){UM_STR("Host"), UM_STR("example.com")};
        r->headers[r->num_headers++] =
            (struct um_header){{extra_name[i], strlen(extra_name[i])},
                               {extra_value[i], strlen(extra_value[i])}};
        r->flags = UM_REQ_F_KEEPALIVE;
        c->fetch = (struct um_fetch){.ctx = &fx->ctx, .req = r, .config = fx->config,
                                     .path = r->path, .client_ip = "127.0.0.1",
                                     .client_port = 40000, .scheme = "http"};
        fx->co->ops->fetch(fx->co, &c->fetch, &c->sink);
        cs[i] = c;
    }
    done_with(cs[0], 304, "");
    assert_true(cs[0]->cs.hit);
    done_with(cs[1], 206, "234");
    assert_true(has_field(cs[1], "Content-Range: bytes 2-4/10\n"));
    assert_int_equal(fx->inner.num_fetches, 1);
}

/* A Range on a miss is answered from the object as it fills (a 206 of the asked bytes,
 * the fill still fetching the whole). When the object then runs out of room, the client
 * gets the rest of its range straight from the fetch, cut to the range, and the fetch is
 * stopped once the range is sent. */
static void test_miss_range_handed_off_when_object_too_large(void **state)
{
    (void)state;
    static char big[600u << 10]; /* more than max_object (the fixture's memory_cap / 8) */
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    struct client *c = get_with("/big", "Range", "bytes=4-13");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", "Content-Length", "100", NULL);
    send_data(fetch_no(0), "0123456789");
    send_data_n(fetch_no(0), big, sizeof(big));
    run_loop();
    done_with(c, 206, "456789abcd");
    assert_true(has_field(c, "Content-Range: bytes 4-13/100\n"));
    assert_true(fetch_no(0)->cancelled); /* the rest of the fetch was not wanted */
    assert_int_equal(fx->inner.num_fetches, 1);
}

/* A hit hands over the stored fields as the block they were stored in (the connection
 * copies it at once), and only those: Age and Cache-Status come after it, as fields; the
 * 304 and 206 made from the object carry it too. A pass (not stored) carries none. */
static void test_hit_head_carries_stored_block(void **state)
{
    (void)state;
    struct client *a = get("/w");
    send_head(fetch_no(0), 200, "Cache-Control", "max-age=60", "Content-Type", "text/plain",
              "ETag", "\"w1\"", "X-Kept", "yes", NULL);
    send_data(fetch_no(0), "0123456789");
    send_end(fetch_no(0));
    run_loop();
    done_with(a, 200, "0123456789");

    struct client *b = get("/w");
    done_with(b, 200, "0123456789");
    assert_true(b->cs.hit);
    assert_int_equal(b->num_wire, 4); /* Cache-Control, Content-Type, ETag, X-Kept */
    assert_true(has_field(b, "X-Kept: yes\nAge: "));
    assert_true(has_field(b, "Cache-Status: umbra; hit"));

    /* Conditional and ranged hits. */
    struct client *c = get_with("/w", "If-None-Match", "\"w1\"");
    done_with(c, 304, "");
    assert_int_equal(c->num_wire, 4);
    struct client *d = get_with("/w", "Range", "bytes=2-4");
    done_with(d, 206, "234");
    assert_int_equal(d->num_wire, 4);
    assert_true(has_field(d, "Content-Range: bytes 2-4/10\n"));

    /* Not stored: the origin's head passes with its own fields, no block. */
    struct client *e = get("/p");
    send_head(fetch_no(1), 200, "Cache-Control", "no-store", NULL);
    send_data(fetch_no(1), "x");
    send_end(fetch_no(1));
    run_loop();
    done_with(e, 200, "x");
    assert_int_equal(e->num_wire, 0);
}

/* The URL's key: the Host lowered (eight bytes at a time, then the rest), the target as
 * sent. */
static void test_url_key_lowers_the_host(void **state)
{
    (void)state;
    static const struct {
        const char *host, *path, *query, *want;
    } cases[] = {
        {"WWW.EXAMPLE.COM", "/A/B", NULL, "www.example.com /A/B"},
        {"[FE80::AB]:8080", "/X", "Q=Z", "[fe80::ab]:8080 /X?Q=Z"},
        /* Around the letters: '@' and '[' (either side of 'A'..'Z'), '`' and '{'. */
        {"@AZ[`az{@AZ[`az{@Z", "/", NULL, "@az[`az{@az[`az{@z /"},
        {"h", "/p", "", "h /p?"},
    };
    for (size_t i = 0; i < UM_NELEMS(cases); i++) {
        struct um_request r;
        memset(&r, 0, sizeof(r));
        r.authority = (um_str){cases[i].host, strlen(cases[i].host)};
        r.path = (um_str){cases[i].path, strlen(cases[i].path)};
        if (cases[i].query) {
            r.query = (um_str){cases[i].query, strlen(cases[i].query)};
            r.flags |= UM_REQ_F_HAS_QUERY;
        }
        char k[64];
        size_t n = um_cache_url_key_len(&r);
        assert_int_equal(n, strlen(cases[i].want));
        um_cache_url_key_write(&r, k);
        assert_memory_equal(k, cases[i].want, n);
    }
}

/* The meta block a fill stores says what parsing its head block says. */
static void test_meta_matches_parsed_head(void **state)
{
    (void)state;
    static const char block[] =
        "Cache-Control: max-age=60, s-maxage=30, must-revalidate\r\n"
        "Cache-Control: stale-if-error=5, immutable, no-cache=\"X-A\"\r\n"
        "ETag: W/\"v9\"\r\n"
        "Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\n"
        "Date: Tue, 01 Dec 2026 11:00:00 GMT\r\n"
        "Content-Type: text/html\r\n"
        "X-A: b\r\n";
    um_str head = {block, sizeof(block) - 1};
    struct meta base = {.flags = 0, .status = 200, .lifetime = 42, .content_length = 7};
    size_t len;
    struct meta *m = um__cache_meta_build(&base, head, NULL, &len);
    assert_int_equal(len, sizeof(struct meta) + 7 * sizeof(struct meta_field));
    assert_int_equal(m->status, 200);
    assert_int_equal(m->lifetime, 42);
    assert_int_equal(m->content_length, 7);

    struct um_header f[MAX_OUT_FIELDS], g[MAX_OUT_FIELDS];
    size_t n = um__cache_head_fields(head, f, MAX_OUT_FIELDS);
    assert_int_equal(n, 7);
    assert_int_equal(um__cache_meta_fields(m, head, g, MAX_OUT_FIELDS), n);
    for (size_t i = 0; i < n; i++) {
        assert_true(g[i].name.base == f[i].name.base && g[i].name.len == f[i].name.len);
        assert_true(g[i].value.base == f[i].value.base && g[i].value.len == f[i].value.len);
    }
    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, 200, f, n);
    struct um_cc cc;
    um__cache_meta_cc(m, &cc);
    assert_int_equal(cc.present, rm.cc.present);
    assert_int_equal(cc.no_cache, rm.cc.no_cache);
    assert_int_equal(cc.must_revalidate, rm.cc.must_revalidate);
    assert_int_equal(cc.immutable, rm.cc.immutable);
    assert_int_equal(cc.max_age, 60);
    assert_int_equal(cc.max_age, rm.cc.max_age);
    assert_int_equal(cc.s_maxage, rm.cc.s_maxage);
    assert_int_equal(cc.stale_if_error, rm.cc.stale_if_error);
    assert_int_equal(cc.stale_while_revalidate, rm.cc.stale_while_revalidate);
    assert_int_equal(cc.invalid, rm.cc.invalid);
    assert_int_equal(m->etag_len, rm.etag.len);
    assert_true(rm.etag.len > 0 && head.base + m->etag_off == rm.etag.base);
    assert_true(m->has_last_modified && rm.has_last_modified);
    assert_int_equal(m->last_modified, rm.last_modified);
    assert_true(m->has_date && rm.has_date);
    assert_int_equal(m->date, rm.date);
    assert_true(m->flags & META_F_WIRE); /* "Name: value\r\n" lines only: sent as it is */
    free(m);

    /* A block that is not field lines alone (a bare LF) is never sent as it is. */
    static const char odd[] = "Content-Type: text/plain\r\nX-A: b\n";
    m = um__cache_meta_build(&base, (um_str){odd, sizeof(odd) - 1}, NULL, &len);
    assert_int_equal(m->nfields, 2);
    assert_false(m->flags & META_F_WIRE);
    free(m);

    /* The other ways a block is not field lines alone: an empty line, a line without a
     * colon, bytes after the last LF. Their fields are what the split finds all the same. */
    static const char *const not_wire[] = {
        "A: 1\r\n\r\nB: 2\r\n", "A: 1\r\nno colon\r\nB: 2\r\n", "A: 1\r\nB: 2",
        "\r\nA: 1\r\n", "\nA: 1\r\n"};
    for (size_t i = 0; i < UM_NELEMS(not_wire); i++) {
        um_str h = {not_wire[i], strlen(not_wire[i])};
        m = um__cache_meta_build(&base, h, NULL, &len);
        assert_int_equal(m->nfields, um__cache_head_fields(h, f, MAX_OUT_FIELDS));
        if (m->flags & META_F_WIRE)
            fail_msg("block %zu sent as it is", i);
        free(m);
    }
    static const char one[] = "A:1\r\n";
    m = um__cache_meta_build(&base, (um_str){one, sizeof(one) - 1}, NULL, &len);
    assert_true(m->flags & META_F_WIRE);
    free(m);

    /* A hit-for-pass marker's empty head. */
    struct meta pass = {.flags = META_F_PASS, .content_length = -1};
    m = um__cache_meta_build(&pass, (um_str){"", 0}, NULL, &len);
    assert_int_equal(len, sizeof(struct meta));
    assert_int_equal(m->flags, META_F_PASS);
    assert_int_equal(m->nfields, 0);
    assert_int_equal(m->etag_len, 0);
    assert_false(m->cc.present);
    free(m);
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_miss_fills_then_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_key_coalesces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_revalidated_with_304, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_store_passes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_while_revalidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_takes_no_waiter_lock_and_allocates_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_hit_conditional_and_range_from_meta, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hit_head_carries_stored_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_miss_range_handed_off_when_object_too_large,
                                        setup, teardown),
        cmocka_unit_test(test_url_key_lowers_the_host),
        cmocka_unit_test(test_meta_matches_parsed_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
