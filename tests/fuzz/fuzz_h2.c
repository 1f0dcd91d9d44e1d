/* Fuzzes the HTTP/2 server connection (src/server/conn_h2.c, with nghttp2 and the
 * exchange above it) end to end: a worker that never runs its thread (as in
 * tests/unit/test_conn.c), one connection over a socketpair on a listener that speaks
 * HTTP/2, the client preface and then the input as the client's bytes, the server's
 * output read and dropped. The route's origin answers at once with a small body.
 *
 * Input: byte 0 is how many bytes go in each write (1 + b * 64), the rest is what the
 * client sends after the preface (at most 64 KiB, so that a socketpair holds it).
 *
 * Properties: no crash, no sanitizer report, no leak (the connection and its streams are
 * freed when the test closes it); the loop turns are bounded, so a hang is a timeout. */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "server/conn.h"
#include "umbra/hooks.h"
#include "umbra/module.h"
#include "umbra/runtime.h"

static void origin_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    (void)o;
    (void)f;
    ssize_t n;
    char buf[256];
    /* Read what body there is now, as a streaming origin would. */
    while ((n = sink->ops->read_body(sink, buf, sizeof buf)) > 0)
        ;
    um_sink_answer_text(sink, 200, "fuzz\n");
}

static void origin_destroy(struct um_origin *o)
{
    (void)o;
}

static const struct um_origin_ops origin_ops = {
    .flags = UM_ORIGIN_F_STREAM_BODY, .fetch = origin_fetch, .destroy = origin_destroy};
static struct um_origin test_origin = {&origin_ops};

static struct um_server server;
static struct um__worker worker;

static void setup_once(void)
{
    signal(SIGPIPE, SIG_IGN); /* as um_server_run: a write to a closed peer is EPIPE */
    char path[] = "/tmp/umbra-fuzz-h2-XXXXXX";
    int fd = mkstemp(path);
    FUZZ_CHECK(fd >= 0);
    const char *text = "routes = { { path = '/', root = '/' } }\naccess_log = false\n"
                       "log_level = 'error'\n"
                       "http2 = { max_concurrent_streams = 8, initial_window = '16KB', "
                       "max_header_list = '4KB' }\n";
    FUZZ_CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    char err[512];
    struct um_config *c = um_config_load(path, err, sizeof err);
    unlink(path);
    FUZZ_CHECK(c != NULL);
    _Atomic(struct um_cache *) cache = NULL;
    struct um_runtime *rt = um_runtime_create(c, NULL, 1, &cache, NULL, err, sizeof err);
    FUZZ_CHECK(rt != NULL);
    um_config_unref(c);
    struct um_origin *built = rt->routes[0].origin;
    built->ops->destroy(built);
    rt->routes[0].origin = &test_origin;
    server.runtime = rt;
    server.config = rt->config;
    um__worker_init(&worker, &server, 0);
}

static void free_closed(void)
{
    while (worker.closed) {
        struct um__conn *c = worker.closed;
        worker.closed = um__links(c)->all_next;
        um__conn_free(c);
    }
}

static void turn(int client)
{
    char sink[65536];
    while (read(client, sink, sizeof sink) > 0)
        ;
    um_loop_run_once(worker.loop, 0);
    struct um__conn *list = worker.ready;
    worker.ready = NULL;
    while (list) {
        struct um__conn *c = list;
        list = um__links(c)->ready_next;
        um__links(c)->in_ready = false;
        um__links(c)->ready_next = NULL;
        um__conn_on_ready(c);
    }
    free_closed();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    um_modules_init(); /* the modules' settings (once) */
    static int ready;
    if (!ready) {
        setup_once();
        ready = 1;
    }
    if (size < 1)
        return 0;
    size_t piece = 1 + (size_t)data[0] * 64;
    data++;
    size--;
    if (size > 65536)
        size = 65536;
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    atomic_store(&server.num_conns, 1);
    FUZZ_CHECK(write(sv[1], UM__H2_PREFACE, UM__H2_PREFACE_LEN) == UM__H2_PREFACE_LEN);
    um__conn_accept(&worker, sv[0], UM__ACCEPT_F_H2);
    for (size_t off = 0; off < size; off += piece) {
        size_t n = size - off < piece ? size - off : piece;
        ssize_t w = write(sv[1], data + off, n);
        (void)w; /* a connection that closed takes no more */
        turn(sv[1]);
    }
    for (int i = 0; i < 8 && worker.all; i++)
        turn(sv[1]);
    while (worker.all)
        um__conn_close(worker.all);
    free_closed();
    close(sv[1]);
    return 0;
}
