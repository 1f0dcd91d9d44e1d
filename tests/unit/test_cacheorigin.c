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

#include "umbra/cacheorigin.h"
#include "umbra/context.h"
#include "umbra/loop.h"

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
    const char *data; /* a string literal of the test's */
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

static void fake_resume(struct um_origin *o, struct um_sink *sink)
{
    (void)o;
    (void)sink;
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
            ff->sink->ops->on_head(ff->sink, &h);
            break;
        }
        case STEP_DATA: {
            size_t len = strlen(s->data);
            assert_int_equal(ff->sink->ops->on_data(ff->sink, s->data, len), len);
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
    fx->inner.base.ops = &fake_ops;
    fx->inner.loop = fx->loop;
    fx->co = um_cache_origin_create(fx->cache, &fx->inner.base, NULL, fx->config);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    um_loop_run_on_stop(fx->loop); /* the worker's fills go */
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

/* A client asks for GET path, Host example.com. */
static struct client *get(const char *path)
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_miss_fills_then_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_key_coalesces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_revalidated_with_304, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_store_passes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_while_revalidate, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
