/* A client connection (src/server/conn.c, conn_http1.c, conn_h2.c, exchange.c, router.c,
 * outq.c) over a socketpair, on a real loop: one end is the accepted socket, the test holds the
 * other and plays the client. The worker is made with um__worker_init but never runs its
 * thread: the test turns its loop and serves its ready list itself. The one route answers
 * from a test origin that says which path it was given. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/conn.h"
#include "server/internal.h"
#include "umbra/hooks.h"
#include "umbra/module.h"
#include "umbra/runtime.h"

/* ---------------------------------------------------------------- a test origin */

static int fetches;

/* Answers 200 with "path=REST", REST being the path below the route's prefix; for
 * "size/N", N bytes of 'x' (at most 64 KiB). */
static void origin_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    (void)o;
    fetches++;
    if (f->path.len > 5 && memcmp(f->path.base, "size/", 5) == 0) {
        static char big[65537];
        size_t n = (size_t)strtoul(f->path.base + 5, NULL, 10);
        n = n < sizeof big - 1 ? n : sizeof big - 1;
        memset(big, 'x', n);
        big[n] = '\0';
        um_sink_answer_text(sink, 200, big);
        return;
    }
    char body[256];
    snprintf(body, sizeof body, "path=%.*s", (int)f->path.len, f->path.base);
    um_sink_answer_text(sink, 200, body);
}

static void origin_destroy(struct um_origin *o)
{
    (void)o; /* static */
}

static const struct um_origin_ops origin_ops = {.fetch = origin_fetch, .destroy = origin_destroy};
static struct um_origin test_origin = {&origin_ops};

/* ---------------------------------------------------------------- a worker without thread */

struct fixture {
    struct um_server server;
    struct um__worker w;
    int client; /* the test's end */
};

/* A runtime of a config with one route, whose origin is the test origin. */
static struct um_runtime *load_runtime(void)
{
    char path[] = "/tmp/umbra-test-conn-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "routes = { { path = '/', root = '/' } }\naccess_log = false\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char err[512];
    struct um_config *c = um_config_load(path, err, sizeof err);
    unlink(path);
    if (c == NULL) fail_msg("config: %s", err);
    _Atomic(struct um_cache *) cache = NULL;
    struct um_runtime *rt = um_runtime_create(c, NULL, 1, &cache, NULL, err, sizeof err);
    if (rt == NULL)
        fail_msg("runtime: %s", err);
    um_config_unref(c); /* the runtime holds its own */
    /* The route's static origin gives way to the test origin. */
    struct um_origin *built = rt->routes[0].origin;
    built->ops->destroy(built);
    rt->routes[0].origin = &test_origin;
    return rt;
}

static int accept_flags; /* UM__ACCEPT_F_* of the next setup's connection */

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    fx->server.runtime = load_runtime();
    fx->server.config = fx->server.runtime->config;
    um__worker_init(&fx->w, &fx->server, 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    fx->client = sv[1];
    atomic_store(&fx->server.num_conns, 1); /* as the listener counts it */
    fetches = 0;
    um__conn_accept(&fx->w, sv[0], accept_flags);
    accept_flags = 0;
    *state = fx;
    return 0;
}

/* The same on a listener that speaks HTTP/2 (prior knowledge on a plain socket). */
static int setup_h2(void **state)
{
    accept_flags = UM__ACCEPT_F_H2;
    return setup(state);
}

static void free_closed(struct um__worker *w)
{
    while (w->closed) {
        struct um__conn *c = w->closed;
        w->closed = um__links(c)->all_next;
        um__conn_free(c);
    }
}

/* One loop turn, then the connections left with work, as the worker's own loop does. */
static void turn(struct fixture *fx)
{
    struct um__worker *w = &fx->w;
    um_loop_run_once(w->loop, 20);
    struct um__conn *list = w->ready;
    w->ready = NULL;
    while (list) {
        struct um__conn *c = list;
        list = um__links(c)->ready_next;
        um__links(c)->in_ready = false;
        um__links(c)->ready_next = NULL;
        um__conn_on_ready(c);
    }
    free_closed(w);
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    if (fx->client >= 0)
        close(fx->client);
    while (fx->w.all)
        um__conn_close(fx->w.all);
    free_closed(&fx->w);
    um__worker_dispose(&fx->w);
    um_runtime_unref(fx->server.runtime);
    free(fx);
    return 0;
}

static void send_all(struct fixture *fx, const char *s)
{
    assert_int_equal(write(fx->client, s, strlen(s)), (ssize_t)strlen(s));
}

/* Turns the loop and reads what the server sent, until a turn brings nothing more after
 * some bytes came, the server closed (*eof), or max_turns passed. Returns the bytes read,
 * NUL-terminated in buf. */
static size_t receive(struct fixture *fx, char *buf, size_t cap, int max_turns, bool *eof)
{
    size_t n = 0;
    *eof = false;
    for (int i = 0; i < max_turns && !*eof; i++) {
        turn(fx);
        size_t before = n;
        for (;;) {
            ssize_t r = read(fx->client, buf + n, cap - 1 - n);
            if (r > 0) {
                n += (size_t)r;
                continue;
            }
            if (r == 0)
                *eof = true;
            break;
        }
        if (n > 0 && n == before)
            break;
    }
    buf[n] = '\0';
    return n;
}

/* The number of times needle occurs in hay. */
static int count(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        k++;
    return k;
}

/* ---------------------------------------------------------------- tests */

static void test_get(void **state)
{
    struct fixture *fx = *state;
    char buf[4096];
    bool eof;
    send_all(fx, "GET /hello HTTP/1.1\r\nHost: example.com\r\n\r\n");
    size_t n = receive(fx, buf, sizeof buf, 50, &eof);
    assert_true(n > 0);
    assert_false(eof);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_non_null(strstr(buf, "\r\nContent-Length: 10\r\n"));
    assert_non_null(strstr(buf, "\r\nServer: umbra/"));
    assert_null(strstr(buf, "Connection: close"));
    assert_non_null(strstr(buf, "\r\n\r\npath=hello"));
    assert_int_equal(fetches, 1);
    assert_int_equal(fx->w.num_conns, 1);
}

static void test_pipelined_keepalive(void **state)
{
    struct fixture *fx = *state;
    char buf[8192];
    bool eof;
    /* Two requests in one write: both answered in order on the same connection. */
    send_all(fx, "GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_false(eof);
    assert_int_equal(count(buf, "HTTP/1.1 200 OK\r\n"), 2);
    char *one = strstr(buf, "path=one"), *two = strstr(buf, "path=two");
    assert_non_null(one);
    assert_non_null(two);
    assert_true(one < two);
    assert_int_equal(fetches, 2);
    /* ...and the connection stays for a third. */
    send_all(fx, "HEAD /three HTTP/1.1\r\nHost: a\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_false(eof);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_non_null(strstr(buf, "\r\nContent-Length: 10\r\n"));
    assert_null(strstr(buf, "path=")); /* HEAD: no body */
    assert_int_equal(fetches, 3);
    assert_int_equal(fx->w.num_conns, 1);
}

static void test_malformed(void **state)
{
    struct fixture *fx = *state;
    char buf[4096];
    bool eof;
    send_all(fx, "GET / HTTP/1.1\r\nBad Header\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_int_equal(strncmp(buf, "HTTP/1.1 400 Bad Request\r\n", 26), 0);
    assert_non_null(strstr(buf, "\r\nConnection: close\r\n"));
    assert_non_null(strstr(buf, "\r\n\r\n400 Bad Request\n"));
    assert_true(eof); /* the server shut its side */
    assert_int_equal(fetches, 0);
    /* The client closes its side too: the lingering connection is gone. */
    close(fx->client);
    fx->client = -1;
    for (int i = 0; i < 10 && fx->w.num_conns > 0; i++)
        turn(fx);
    assert_int_equal(fx->w.num_conns, 0);
    assert_int_equal(atomic_load(&fx->server.num_conns), 0);
}

static void test_body_read_before_dispatch(void **state)
{
    struct fixture *fx = *state;
    char buf[4096];
    bool eof;
    /* The origin takes no body: it is read (in two parts) and dropped, then the request
     * is dispatched and the connection stays. */
    send_all(fx, "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n01234");
    assert_int_equal(receive(fx, buf, sizeof buf, 3, &eof), 0);
    assert_int_equal(fetches, 0);
    send_all(fx, "56789");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_false(eof);
    assert_int_equal(fetches, 1);
    assert_int_equal(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_non_null(strstr(buf, "path=form"));
    assert_null(strstr(buf, "Connection: close"));
}

/* What the connection holds from its worker's pools (read buffers, request states, output
 * buffers and segment tables), taken and not given back. */
static size_t held(struct fixture *fx)
{
    struct um__worker *w = &fx->w;
    return w->rbufs.out + w->reqs.out + w->outq_pools.bufs.out + w->outq_pools.refs.out;
}

static void test_idle_gives_memory_back(void **state)
{
    struct fixture *fx = *state;
    struct um__conn *c = fx->w.all;
    char buf[8192];
    bool eof;
    assert_non_null(c);
    assert_int_equal(held(fx), 0); /* accepted, nothing read yet: only the core */
    send_all(fx, "GET /one HTTP/1.1\r\nHost: a\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_non_null(strstr(buf, "path=one"));
    /* Answered, waiting for the next request: everything went back to the pools. */
    assert_null(c->r);
    assert_null(c->rbuf);
    assert_null(c->out.buf.base);
    assert_int_equal(held(fx), 0);
    assert_true(fx->w.rbufs.num >= 1 && fx->w.reqs.num >= 1 && fx->w.outq_pools.bufs.num >= 1);
    void *rbuf = fx->w.rbufs._free;

    /* Half a head: the connection keeps what it read (and takes the kept buffer back: a
     * pointer move). */
    send_all(fx, "GET /two HTTP/1.1\r\nHo");
    assert_int_equal(receive(fx, buf, sizeof buf, 3, &eof), 0);
    assert_ptr_equal(c->rbuf, rbuf);
    assert_non_null(c->r);
    assert_int_equal(fx->w.rbufs.out, 1);
    send_all(fx, "st: a\r\n\r\nGET /three HTTP/1.1\r\nHost: a\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_false(eof);
    assert_int_equal(count(buf, "HTTP/1.1 200 OK\r\n"), 2);
    assert_true(strstr(buf, "path=two") < strstr(buf, "path=three"));
    assert_int_equal(held(fx), 0);

    /* A body that arrives in two parts keeps the buffers between them. */
    send_all(fx, "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabc");
    assert_int_equal(receive(fx, buf, sizeof buf, 3, &eof), 0);
    assert_true(held(fx) >= 2);
    send_all(fx, "def");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_non_null(strstr(buf, "path=form"));
    assert_null(strstr(buf, "Connection: close"));
    assert_int_equal(held(fx), 0);
    assert_int_equal(fetches, 4);
}

static void test_larger_responses_reuse_pooled_buffers(void **state)
{
    struct fixture *fx = *state;
    struct um__outq_pools *p = &fx->w.outq_pools;
    static char buf[65536];
    bool eof;
    /* A response of 10,000 bytes outgrows the small output buffer: it moves to a big one
     * from the pool, and both go back when the connection waits idle. */
    send_all(fx, "GET /size/10000 HTTP/1.1\r\nHost: a\r\n\r\n");
    size_t n = receive(fx, buf, sizeof buf, 50, &eof);
    assert_non_null(strstr(buf, "\r\nContent-Length: 10000\r\n"));
    assert_true(n > 10000);
    assert_int_equal(held(fx), 0);
    assert_int_equal(p->big.num, 1);
    void *big = p->big._free;
    /* The next one takes the same buffer again: no allocation per request. */
    for (int i = 0; i < 3; i++) {
        send_all(fx, "GET /size/20000 HTTP/1.1\r\nHost: a\r\n\r\n");
        n = receive(fx, buf, sizeof buf, 50, &eof);
        assert_non_null(strstr(buf, "\r\nContent-Length: 20000\r\n"));
        assert_int_equal(held(fx), 0);
        assert_int_equal(p->big.num, 1);
        assert_ptr_equal(p->big._free, big);
    }
    /* Past the big size, the buffer is the system's, and goes back to it. */
    send_all(fx, "GET /size/50000 HTTP/1.1\r\nHost: a\r\n\r\n");
    receive(fx, buf, sizeof buf, 50, &eof);
    assert_non_null(strstr(buf, "\r\nContent-Length: 50000\r\n"));
    assert_false(eof);
    assert_int_equal(held(fx), 0);
    assert_null(fx->w.all->out.buf.base);
}

/* Receives until needle came (HTTP/2: the SETTINGS frames come before the answer).
 * Returns whether it did. */
static bool receive_until(struct fixture *fx, char *buf, size_t cap, const char *needle)
{
    size_t n = 0;
    bool eof = false;
    for (int i = 0; i < 20 && !eof; i++) {
        n += receive(fx, buf + n, cap - n, 50, &eof);
        if (memmem(buf, n, needle, strlen(needle)) != NULL)
            return true;
    }
    fprintf(stderr, "received %zu bytes, eof %d:", n, eof);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %02x", (unsigned char)buf[i]);
    fprintf(stderr, "\n");
    return false;
}

/* An HTTP/2 connection gives its read buffer and output memory back between requests too;
 * its session and streams are its own (conn_h2.c). */
static void test_h2_idle_gives_memory_back(void **state)
{
    struct fixture *fx = *state;
    struct um__conn *c = fx->w.all;
    char buf[8192];
    static const unsigned char hello[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                         "\x00\x00\x00\x04\x00\x00\x00\x00\x00"; /* SETTINGS */
    /* HEADERS, END_STREAM | END_HEADERS, stream 1: :method GET, :scheme http (static
     * table), :path /h2, :authority a (literals with indexed names). */
    static const unsigned char get[] = "\x00\x00\x0a\x01\x05\x00\x00\x00\x01"
                                       "\x82\x86\x04\x03/h2\x01\x01" "a";
    assert_int_equal(write(fx->client, hello, sizeof hello - 1), (ssize_t)(sizeof hello - 1));
    assert_int_equal(write(fx->client, get, sizeof get - 1), (ssize_t)(sizeof get - 1));
    assert_true(receive_until(fx, buf, sizeof buf, "path=h2"));
    assert_ptr_equal(c->proto, &um__conn_proto_h2);
    for (int i = 0; i < 5; i++)
        turn(fx);
    /* The stream is done and nothing is buffered or queued: only the core and the
     * session are held. No HTTP/1.1 request state was kept after the switch either. */
    assert_null(c->r);
    assert_null(c->rbuf);
    assert_null(c->out.buf.base);
    assert_int_equal(held(fx), 0);
    void *rbuf = fx->w.rbufs._free;
    assert_non_null(rbuf);

    /* The next request takes the kept buffer back. */
    static const unsigned char get3[] = "\x00\x00\x0a\x01\x05\x00\x00\x00\x03"
                                        "\x82\x86\x04\x03/h3\x01\x01" "a";
    assert_int_equal(write(fx->client, get3, sizeof get3 - 1), (ssize_t)(sizeof get3 - 1));
    assert_true(receive_until(fx, buf, sizeof buf, "path=h3"));
    for (int i = 0; i < 5; i++)
        turn(fx);
    assert_null(c->rbuf);
    assert_int_equal(held(fx), 0);
    assert_ptr_equal(fx->w.rbufs._free, rbuf);
    assert_int_equal(fetches, 2);
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_keepalive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_read_before_dispatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_gives_memory_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_larger_responses_reuse_pooled_buffers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_h2_idle_gives_memory_back, setup_h2, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
