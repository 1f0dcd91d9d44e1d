/* Tests for the upstream origin's common logic (src/upstream/upstream.c, included so that
 * pick_server and the servers' state are reachable) with a fake transport that plays a
 * script per server: round robin, retries on the other server, no retry once a body has
 * started, passive health (max_fails, then fail_timeout, the time a parameter), and the
 * status the sink gets for each error. A real loop and worker context carry the fetches;
 * the fake transport answers from a deferred task, as a real one answers from an event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/upstream/upstream.c"

/* ---------------------------------------------------------------- the fake transport */

enum act {
    ACT_ANSWER,         /* 200 with a two-byte body */
    ACT_FAIL,           /* err before the head */
    ACT_BODY_THEN_FAIL, /* reads the request body, then err */
    ACT_HEAD_THEN_FAIL, /* 200 head, then err */
    ACT_HANG,           /* nothing: the first-byte timer decides */
};

struct step {
    enum act act;
    enum um_up_err err;
};

#define MAX_STEPS 16
#define MAX_ATTEMPTS 64

/* Per server: what its next attempts do (after the script, ACT_ANSWER). */
static struct step script[2][MAX_STEPS];
static int script_len[2], script_pos[2];

struct fake_attempt {
    struct xfer *x; /* NULL once released */
    struct step step;
    struct um_task task;
};

static struct fake_attempt attempts[MAX_ATTEMPTS];
static int num_attempts;
static int order[MAX_ATTEMPTS]; /* the server of each attempt */
static int released;

static void plan(int server, enum act act, enum um_up_err err)
{
    assert_true(script_len[server] < MAX_STEPS);
    script[server][script_len[server]++] = (struct step){act, err};
}

static void answer_head(struct xfer *x)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: fake\r\n\r\n";
    struct um_http1_resp_parser p;
    struct um_http1_response resp;
    enum um_http1_resp_err e;
    um_http1_resp_parser_init(&p);
    assert_int_equal(
        um_http1_parse_response(&p, head, sizeof(head) - 1, MAX_RESPONSE_HEAD, &resp, &e), UM_OK);
    um__up_head(x, &resp);
}

static void on_fake_task(struct um_task *t)
{
    struct fake_attempt *a =
        (struct fake_attempt *)((char *)t - offsetof(struct fake_attempt, task));
    struct xfer *x = a->x;
    if (x == NULL) return; /* released before its turn */
    char buf[64];
    switch (a->step.act) {
    case ACT_ANSWER:
        answer_head(x);
        assert_int_equal(um__up_body(x, "ok", 2), 2);
        um__up_finish(x, UM_UP_OK);
        return;
    case ACT_FAIL:
        um__up_finish(x, a->step.err);
        return;
    case ACT_BODY_THEN_FAIL: {
        ssize_t n = um__up_read_body(x, buf, sizeof(buf));
        if (n == UM_ERR) {
            um__up_finish(x, UM_UP_ABORTED);
            return;
        }
        assert_true(n > 0);
        um__up_finish(x, a->step.err);
        return;
    }
    case ACT_HEAD_THEN_FAIL:
        answer_head(x);
        um__up_finish(x, a->step.err);
        return;
    case ACT_HANG:
        return;
    }
}

static void fake_start(struct xfer *x)
{
    assert_true(num_attempts < MAX_ATTEMPTS);
    assert_null(x->conn);
    int s = x->server;
    struct fake_attempt *a = &attempts[num_attempts];
    order[num_attempts++] = s;
    a->x = x;
    a->step = script_pos[s] < script_len[s] ? script[s][script_pos[s]++]
                                            : (struct step){ACT_ANSWER, UM_UP_OK};
    a->task = (struct um_task){.cb = on_fake_task};
    x->conn = a;
    um_loop_defer(x->loop, &a->task);
}

static void fake_release(struct xfer *x)
{
    struct fake_attempt *a = x->conn;
    assert_ptr_equal(a->x, x);
    a->x = NULL;
    x->conn = NULL;
    released++;
}

static void fake_nothing(struct xfer *x)
{
    (void)x;
}

static const struct um_up_transport fake = {
    .name = "fake",
    .start = fake_start,
    .release = fake_release,
    .resume = fake_nothing,
    .body_ready = fake_nothing,
};

/* ---------------------------------------------------------------- the sink */

struct test_sink {
    struct um_sink base;
    int status;
    char body[256];
    size_t body_len;
    bool ended;
    int end_err;
    bool body_fails; /* read_body reports an error */
    int body_reads;
};

static void sink_head(struct um_sink *s, const struct um_response_head *h)
{
    struct test_sink *t = (struct test_sink *)s;
    assert_int_equal(t->status, 0);
    t->status = h->status;
    /* The response's Server and Content-Length never reach the sink; Via comes last. */
    for (size_t i = 0; i < h->num_headers; i++) {
        assert_false(um_str_eq_ci(h->headers[i].name, "server"));
        assert_false(um_str_eq_ci(h->headers[i].name, "content-length"));
    }
}

static size_t sink_data(struct um_sink *s, const char *d, size_t n)
{
    struct test_sink *t = (struct test_sink *)s;
    assert_true(t->body_len + n <= sizeof(t->body));
    memcpy(t->body + t->body_len, d, n);
    t->body_len += n;
    return n;
}

static void sink_end(struct um_sink *s, int err)
{
    struct test_sink *t = (struct test_sink *)s;
    assert_false(t->ended);
    t->ended = true;
    t->end_err = err;
}

static ssize_t sink_read_body(struct um_sink *s, char *buf, size_t len)
{
    struct test_sink *t = (struct test_sink *)s;
    t->body_reads++;
    if (t->body_fails) return UM_ERR;
    static const char payload[] = "payload";
    size_t n = sizeof(payload) - 1 < len ? sizeof(payload) - 1 : len;
    memcpy(buf, payload, n);
    return (ssize_t)n;
}

static const struct um_sink_ops sink_ops = {
    .on_head = sink_head,
    .on_data = sink_data,
    .on_end = sink_end,
    .read_body = sink_read_body,
};

/* ---------------------------------------------------------------- fixture */

static struct um_loop *loop;
static struct um_context ctx;
static struct um_upstream_server servers[2] = {{.url = "http://192.0.2.1:80"},
                                               {.url = "http://192.0.2.2:80"}};
static struct um_upstream_conf conf;
static struct upstream *up;
static char name[32];

/* A new upstream of two servers on the fake transport. Each test names its own, as the
 * metrics keep a server's health by upstream name and URL (across reloads). */
static void make_upstream(const char *test_name)
{
    snprintf(name, sizeof(name), "%s", test_name);
    conf = (struct um_upstream_conf){
        .name = name,
        .servers = servers,
        .num_servers = 2,
        .balance = UM_BALANCE_ROUND_ROBIN,
        .connect_timeout = 1,
        .timeout = 5,
        .retries = 1,
        .max_fails = 3,
        .fail_timeout = 10,
    };
    up = (struct upstream *)um_upstream_origin_create(&conf);
    for (size_t i = 0; i < conf.num_servers; i++)
        up->transports[i] = &fake;
}

static int setup(void **state)
{
    loop = um_loop_create();
    um_context_init(&ctx, loop, 0);
    memset(script_len, 0, sizeof(script_len));
    memset(script_pos, 0, sizeof(script_pos));
    memset(attempts, 0, sizeof(attempts));
    num_attempts = 0;
    released = 0;
    up = NULL;
    return 0;
}

static int teardown(void **state)
{
    if (up) up->base.ops->destroy(&up->base);
    um_context_stop(&ctx);
    um_context_dispose(&ctx);
    um_loop_destroy(loop);
    return 0;
}

static struct um_request request;
static char request_text[256];

/* Fetches method /path from the upstream (with a body when body is set) and runs the loop
 * until the sink's end. */
static void fetch(struct test_sink *t, const char *method, const char *path, bool body)
{
    int n;
    if (body)
        n = snprintf(request_text, sizeof(request_text),
                     "%s %s HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n", method, path);
    else
        n = snprintf(request_text, sizeof(request_text), "%s %s HTTP/1.1\r\nHost: a\r\n\r\n",
                     method, path);
    struct um_http1_parser p;
    int status = 0;
    um_http1_parser_init(&p);
    assert_int_equal(
        um_http1_parse_request(&p, request_text, (size_t)n, 8192, 16384, &request, &status), UM_OK);
    memset(t, 0, sizeof(*t));
    t->base.ops = &sink_ops;
    struct um_fetch f = {
        .ctx = &ctx,
        .req = &request,
        .client_ip = "127.0.0.1",
        .client_port = 1234,
        .scheme = "http",
    };
    up->base.ops->fetch(&up->base, &f, &t->base);
    for (int turn = 0; turn < 1000 && !t->ended; turn++)
        um_loop_run_once(loop, 100);
    assert_true(t->ended);
}

static int fails(int i)
{
    return atomic_load(&up->servers[i].fails);
}

static uint64_t down_until(int i)
{
    return atomic_load(&up->servers[i].down_until);
}

/* ---------------------------------------------------------------- tests */

static void test_round_robin(void **state)
{
    make_upstream("rr");
    struct test_sink t;
    for (int i = 0; i < 6; i++) {
        fetch(&t, "GET", "/a", false);
        assert_int_equal(t.status, 200);
        assert_int_equal(t.end_err, UM_OK);
        assert_int_equal(t.body_len, 2);
        assert_memory_equal(t.body, "ok", 2);
    }
    assert_int_equal(num_attempts, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(order[i], i % 2);
    assert_int_equal(released, 6); /* every attempt was taken off its transport */
}

static void test_get_retried_on_other_server_after_connect_error(void **state)
{
    make_upstream("retry");
    plan(0, ACT_FAIL, UM_UP_CONNECT);
    struct test_sink t;
    fetch(&t, "GET", "/r", false);
    assert_int_equal(t.status, 200);
    assert_int_equal(num_attempts, 2);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 1);
    assert_int_equal(fails(0), 1);
    assert_int_equal(fails(1), 0);
}

static void test_retries_bounded(void **state)
{
    /* retries = 1: a second failure is answered, not tried on a third attempt. */
    make_upstream("bounded");
    plan(0, ACT_FAIL, UM_UP_RECV);
    plan(1, ACT_FAIL, UM_UP_RECV);
    struct test_sink t;
    fetch(&t, "GET", "/b", false);
    assert_int_equal(t.status, 502);
    assert_int_equal(num_attempts, 2);
}

static void test_request_body_started_not_retried(void **state)
{
    make_upstream("body");
    struct test_sink t;
    /* A PUT (idempotent) whose body reached the server is not sent again. */
    plan(0, ACT_BODY_THEN_FAIL, UM_UP_SEND);
    fetch(&t, "PUT", "/p", true);
    assert_int_equal(t.status, 502);
    assert_int_equal(num_attempts, 1);
    assert_int_equal(t.body_reads, 1);
    /* A PUT whose connection failed before its body went is. */
    plan(1, ACT_FAIL, UM_UP_CONNECT);
    fetch(&t, "PUT", "/p2", true);
    assert_int_equal(t.status, 200);
    assert_int_equal(num_attempts, 3);
    assert_int_equal(order[1], 1);
    assert_int_equal(order[2], 0);
    /* A POST is never sent twice, even when nothing of it went out. */
    plan(1, ACT_FAIL, UM_UP_CONNECT);
    fetch(&t, "POST", "/q", true);
    assert_int_equal(t.status, 502);
    assert_int_equal(num_attempts, 4);
    /* Nor once its body started. */
    plan(0, ACT_BODY_THEN_FAIL, UM_UP_RECV);
    fetch(&t, "POST", "/q2", true);
    assert_int_equal(t.status, 502);
    assert_int_equal(num_attempts, 5);
}

static void test_client_body_fails(void **state)
{
    /* The client's body failed: no answer from the upstream (the connection makes its own
     * 400/413), no retry, and the server is not blamed. */
    make_upstream("abort");
    plan(0, ACT_BODY_THEN_FAIL, UM_UP_SEND);
    struct test_sink t;
    memset(&t, 0, sizeof(t));
    struct um_http1_parser p;
    int status = 0;
    const char *text = "PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n";
    um_http1_parser_init(&p);
    assert_int_equal(um_http1_parse_request(&p, text, strlen(text), 8192, 16384, &request, &status),
                     UM_OK);
    t.base.ops = &sink_ops;
    t.body_fails = true;
    struct um_fetch f = {.ctx = &ctx, .req = &request, .client_ip = "::1", .scheme = "http"};
    up->base.ops->fetch(&up->base, &f, &t.base);
    for (int turn = 0; turn < 100 && !t.ended; turn++)
        um_loop_run_once(loop, 100);
    assert_true(t.ended);
    assert_int_equal(t.status, 0);
    assert_int_equal(t.end_err, UM_ERR);
    assert_int_equal(num_attempts, 1);
    assert_int_equal(fails(0), 0);
}

static void test_passive_health(void **state)
{
    make_upstream("health");
    conf.max_fails = 2;
    for (int i = 0; i < MAX_STEPS; i++)
        plan(1, ACT_FAIL, UM_UP_CONNECT);
    struct test_sink t;
    /* Round robin gives server 1 every other fetch; each of its failures is retried on
     * server 0, so the client never sees them. */
    for (int i = 0; i < 4; i++) {
        fetch(&t, "GET", "/h", false);
        assert_int_equal(t.status, 200);
    }
    /* 0; 1 then 0; 1 then 0 (a retry's pick moves round robin on too); 0 */
    assert_int_equal(num_attempts, 6);
    assert_int_equal(fails(1), 2);
    uint64_t now = um_loop_now(loop);
    uint64_t until = down_until(1);
    assert_true(until > now && until <= now + 10000);
    assert_true(until >= now + 10000 - 1000);
    /* Out: every fetch goes to server 0 at once. */
    for (int i = 0; i < 4; i++) {
        fetch(&t, "GET", "/h2", false);
        assert_int_equal(t.status, 200);
        assert_int_equal(order[num_attempts - 1], 0);
    }
    assert_int_equal(num_attempts, 10);
    /* The time a parameter: out until `until`, back from then on. */
    struct xfer probe;
    memset(&probe, 0, sizeof(probe));
    bool seen = false;
    for (int i = 0; i < 4; i++)
        assert_int_equal(pick_server(up, &probe, until - 1), 0);
    for (int i = 0; i < 4; i++)
        seen |= pick_server(up, &probe, until) == 1;
    assert_true(seen);
    assert_false(server_usable(up, 1, until - 1));
    assert_true(server_usable(up, 1, until));
    /* A server that answers is no longer counted as failing. */
    server_ok(up, 1);
    assert_int_equal(fails(1), 0);
}

static void test_every_server_out(void **state)
{
    make_upstream("allout");
    conf.max_fails = 1;
    conf.retries = 0;
    plan(0, ACT_FAIL, UM_UP_CONNECT);
    plan(1, ACT_FAIL, UM_UP_CONNECT);
    struct test_sink t;
    fetch(&t, "GET", "/o", false);
    assert_int_equal(t.status, 502);
    fetch(&t, "GET", "/o", false);
    assert_int_equal(t.status, 502);
    assert_int_equal(num_attempts, 2);
    assert_true(down_until(0) > um_loop_now(loop) && down_until(1) > um_loop_now(loop));
    /* Both out (issue #26: this was a 502 without an attempt): the request goes to the
     * server whose time out ends first, here server 1, and it is back once it answers. */
    atomic_store(&up->servers[1].down_until, down_until(0) - 1);
    fetch(&t, "GET", "/o", false);
    assert_int_equal(t.status, 200);
    assert_int_equal(num_attempts, 3);
    assert_int_equal(order[2], 1);
    assert_int_equal(down_until(1), 0);
    assert_true(down_until(0) > um_loop_now(loop));
}

static void test_status_per_error(void **state)
{
    static const struct {
        enum um_up_err err;
        int status;
        bool blamed; /* counted against the server */
    } cases[] = {
        {UM_UP_CONNECT, 502, true},  {UM_UP_CONNECT_TIMEOUT, 504, true},
        {UM_UP_TLS, 502, true},      {UM_UP_TLS_VERIFY, 502, true},
        {UM_UP_SEND, 502, true},     {UM_UP_RECV, 502, true},
        {UM_UP_BAD_HEAD, 502, true}, {UM_UP_HEAD_TOO_LARGE, 502, true},
        {UM_UP_LOCAL, 502, false},   {UM_UP_OTHER, 502, false},
    };
    make_upstream("status");
    conf.retries = 0;
    conf.max_fails = 1000;
    struct test_sink t;
    for (size_t i = 0; i < UM_NELEMS(cases); i++) {
        int s = num_attempts % 2; /* round robin: the server of the next attempt */
        int before = fails(s);
        plan(s, ACT_FAIL, cases[i].err);
        fetch(&t, "GET", "/s", false);
        if (t.status != cases[i].status)
            fail_msg("%s: status %d, want %d", um__up_err_text(cases[i].err), t.status,
                     cases[i].status);
        assert_int_equal(t.end_err, UM_OK); /* an answer of the proxy's own, complete */
        assert_int_equal(fails(s), before + (cases[i].blamed ? 1 : 0));
    }
    /* A timeout before the head is the upstream's own timer's: 504, the attempt taken off
     * its transport, the server blamed. */
    conf.timeout = 0.02;
    int s = num_attempts % 2, before = fails(s), rel = released;
    plan(s, ACT_HANG, UM_UP_OK);
    fetch(&t, "GET", "/slow", false);
    assert_int_equal(t.status, 504);
    assert_int_equal(released, rel + 1);
    assert_int_equal(fails(s), before + 1);
    /* An error after the head cuts the body short: the sink's end says so. */
    s = num_attempts % 2;
    plan(s, ACT_HEAD_THEN_FAIL, UM_UP_CUT_SHORT);
    fetch(&t, "GET", "/cut", false);
    assert_int_equal(t.status, 200);
    assert_int_equal(t.end_err, UM_ERR);
    /* A transport that ends without a head: 502. */
    s = num_attempts % 2;
    plan(s, ACT_FAIL, UM_UP_OK);
    fetch(&t, "GET", "/nohead", false);
    assert_int_equal(t.status, 502);
}

static void test_retry_after_connect_timeout_answers_504_when_out_of_servers(void **state)
{
    make_upstream("ctimeout");
    plan(0, ACT_FAIL, UM_UP_CONNECT_TIMEOUT);
    plan(1, ACT_FAIL, UM_UP_CONNECT_TIMEOUT);
    struct test_sink t;
    fetch(&t, "GET", "/t", false);
    assert_int_equal(t.status, 504);
    assert_int_equal(num_attempts, 2);
}

/* ---------------------------------------------------------------- the fields */

/* The names of fields[0..n), "Name|Name|...", into out. */
static void names_of(const struct um_header *fields, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(out + o, outsz - o, "%s%.*s", i ? "|" : "", (int)fields[i].name.len,
                              fields[i].name.base);
}

static void parse_resp(const char *text, struct um_http1_response *r)
{
    struct um_http1_resp_parser p;
    enum um_http1_resp_err err;
    um_http1_resp_parser_init(&p);
    assert_int_equal(um_http1_parse_response(&p, text, strlen(text), 65536, r, &err), UM_OK);
}

/* A field named in a Connection line is dropped, whichever line names it, in whatever case
 * and with whatever whitespace around it, before or after the line; so are the hop-by-hop
 * fields, Server and Content-Length. */
static void test_response_fields_connection_named(void **state)
{
    static struct um_http1_response r;
    parse_resp("HTTP/1.1 200 OK\r\n"
               "X-Early: 1\r\n"
               "Connection: close ,\tX-EARLY,, ,  x-late  \r\n"
               "Content-Type: text/plain\r\n"
               "x-LATE: 2\r\n"
               "CONNECTION:x-third\r\n"
               "X-Third: 3\r\n"
               "X-Thirds: kept\r\n"
               "Keep-Alive: timeout=5\r\n"
               "Proxy-Connection: keep-alive\r\n"
               "TE: trailers\r\n"
               "Trailer: X-T\r\n"
               "Upgrade: h2c\r\n"
               "Proxy-Authenticate: Basic\r\n"
               "Server: origin\r\n"
               "Content-Length: 0\r\n"
               "X-Kept: 4\r\n"
               "\r\n",
               &r);
    struct um_header fields[UM_HTTP1_MAX_RESPONSE_FIELDS + 1];
    char names[512];
    struct xfer hx = {.tp = &um__up_h1};
    size_t n = response_fields(&hx, &r, false, fields);
    names_of(fields, n, names, sizeof(names));
    assert_string_equal(names, "Content-Type|X-Thirds|X-Kept|Via");
    assert_true(um_str_eq(fields[n - 1].value, "1.1 umbra"));
    /* Via names the protocol the answer came in. */
    hx.tp = &um__up_h2;
    n = response_fields(&hx, &r, false, fields);
    assert_true(um_str_eq(fields[n - 1].value, "2 umbra"));
    hx.tp = &um__up_h1;
    /* A 101 keeps its Upgrade. */
    n = response_fields(&hx, &r, true, fields);
    names_of(fields, n, names, sizeof(names));
    assert_string_equal(names, "Content-Type|X-Thirds|Upgrade|X-Kept|Via");

    /* Without a Connection line only the fixed lists are dropped. */
    parse_resp("HTTP/1.1 200 OK\r\nX-Early: 1\r\nserver: o\r\nTRANSFER-ENCODING: chunked\r\n"
               "x-late: 2\r\n\r\n",
               &r);
    n = response_fields(&hx, &r, false, fields);
    names_of(fields, n, names, sizeof(names));
    assert_string_equal(names, "X-Early|x-late|Via");
}

/* The request's fields: end-to-end ones in order, Host, then the forwarding fields, without
 * the hop-by-hop ones, those Connection names, nor the ones that could poison the cache. */
static void test_request_fields(void **state)
{
    make_upstream("fields");
    static const char text[] = "GET /p?q HTTP/1.1\r\n"
                               "X-A: 1\r\n"
                               "Host: example.com\r\n"
                               "connection: X-Drop ,\tx-also\r\n"
                               "X-Drop: 2\r\n"
                               "X-ALSO: 3\r\n"
                               "X-Forwarded-For: 10.0.0.1\r\n"
                               "x-forwarded-host: evil\r\n"
                               "X-Original-URL: /admin\r\n"
                               "Keep-Alive: 5\r\n"
                               "Expect: 100-continue\r\n"
                               "Via: 1.0 edge\r\n"
                               "Accept: */*\r\n"
                               "\r\n";
    struct um_http1_parser p;
    int status = 0;
    um_http1_parser_init(&p);
    assert_int_equal(
        um_http1_parse_request(&p, text, sizeof(text) - 1, 8192, 16384, &request, &status), UM_OK);
    struct um_fetch f = {.ctx = &ctx, .req = &request, .client_ip = "192.0.2.9", .scheme = "https"};
    struct xfer x = {0};
    um__up_build_fields(up, &f, &x);
    static const char want[] = "X-A: 1\r\n"
                               "Via: 1.0 edge\r\n"
                               "Accept: */*\r\n"
                               "Host: example.com\r\n"
                               "X-Forwarded-For: 10.0.0.1, 192.0.2.9\r\n"
                               "X-Forwarded-Proto: https\r\n"
                               "X-Forwarded-Host: example.com\r\n"
                               "Via: 1.0 edge, 1.1 umbra\r\n";
    assert_int_equal(x.fields_len, sizeof(want) - 1);
    assert_memory_equal(x.fields, want, sizeof(want) - 1);
    assert_true(x.has_host);
    free(x.fields);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_robin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_retried_on_other_server_after_connect_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_retries_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_body_started_not_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_body_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_passive_health, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_server_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_per_error, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_retry_after_connect_timeout_answers_504_when_out_of_servers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_response_fields_connection_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_fields, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
