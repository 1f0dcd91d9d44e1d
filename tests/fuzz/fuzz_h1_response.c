/* Fuzzes the upstream's HTTP/1.1 client reading a response: src/upstream/h1_wire.c's um__h1_receive()
 * (the head parsed in its buffer by um_http1_parse_response, interim heads skipped,
 * framing by Transfer-Encoding/Content-Length/close, chunked decoding, the sink pausing
 * and resuming) with upstream.c's head delivery and error handling behind it.
 *
 * Input: [flags byte][response bytes]. Bit 0 of flags: the request was a HEAD; bits 1-7:
 * a pattern for the sink (bit k set: the sink refuses the k-th on_data call, once, and is
 * resumed after). The response bytes are written into one end of a socket pair whose
 * writing side is then shut, so the reader sees them and then the server's close; the
 * connection reads the other end as it reads a server's socket.
 *
 * Both files are included, so the statics are reachable; the worker loop (descriptor
 * registration, timers, deferred tasks, the clock) and the log are stubs, the worker
 * context a fetch carries is a static one around a fake loop, and the libcurl transport
 * is left out.
 *
 * Properties:
 * - the sink gets at most one head and exactly one end, and no data before the head or
 *   after the end;
 * - a body declared complete (end UM_OK) after a head with content_length >= 0 that is not
 *   for HEAD has exactly content_length bytes; a HEAD answer or a 204/304 has none;
 * - a head made by the proxy (no server head reached the sink) is 502 or 504;
 * - nothing is read out of bounds or leaked (ASan). */
#define um_loop_timer_stop fuzz_loop_timer_stop
#define um_loop_timer_start fuzz_loop_timer_start
#define um_loop_now fuzz_loop_now
#define um_loop_io_set fuzz_loop_io_set
#define um_loop_defer fuzz_loop_defer
#define um_loop_on_stop fuzz_loop_on_stop
#define um_log fuzz_log
#include "../../src/upstream/upstream.c"
#include "../../src/upstream/fields.c"
#include "../../src/upstream/h1.c"
#include "../../src/upstream/h1_wire.c"
#include "../../src/upstream/sock.c"
#undef um_loop_timer_stop
#undef um_loop_timer_start
#undef um_loop_now
#undef um_loop_io_set
#undef um_loop_defer
#undef um_loop_on_stop
#undef um_log

#include <fcntl.h>

#include "fuzz_common.h"
#include "fuzz_loop_stubs.h"

/* The other transport is not exercised here (stubs, its slot with them, keep
 * src/upstream/curl.c out). */
const struct um_up_transport um__up_curl = {.name = "none"};
struct um_context_slot um__curl_slot = {.name = "none"};

void fuzz_loop_timer_start(struct um_loop *l, struct um_timer *t, uint64_t ms)
{
    (void)l;
    (void)ms;
    t->_index = 1;
}

int fuzz_loop_io_set(struct um_loop *l, struct um_io *io, int fd, uint32_t events)
{
    (void)l;
    io->fd = fd;
    io->_events = events;
    return UM_OK;
}

void fuzz_loop_defer(struct um_loop *l, struct um_task *t)
{
    (void)l;
    (void)t; /* the harness reaps closed connections itself */
}

void fuzz_loop_on_stop(struct um_loop *l, struct um_task *t)
{
    (void)l;
    (void)t;
}

/* The worker the fetch runs on: its loop is never used but through the stubs above. */
static char fake_loop;
static struct um_context fuzz_ctx = {.loop = (struct um_loop *)(void *)&fake_loop};

/* ---------------------------------------------------------------- the sink */

static struct xfer *cur;
static bool proxy_made; /* the head is the proxy's own answer (502/504), not the server's */
static int heads, ends, end_err, data_calls;
static uint8_t refuse_pattern;
static bool refused_last;
static int64_t head_length;
static int head_status;
static uint64_t body_bytes;

static void sink_head(struct um_sink *s, const struct um_response_head *h)
{
    (void)s;
    FUZZ_CHECK(heads == 0 && ends == 0);
    heads++;
    proxy_made = !cur->head_sent;
    if (proxy_made)
        FUZZ_CHECK(h->status == 502 || h->status == 504);
    head_length = h->content_length;
    head_status = h->status;
}

static size_t sink_data(struct um_sink *s, const char *d, size_t n)
{
    (void)s;
    FUZZ_CHECK(heads == 1 && ends == 0);
    FUZZ_CHECK(n > 0);
    volatile char touch = d[0];
    touch = d[n - 1];
    (void)touch;
    int k = data_calls++;
    /* The proxy's own answers are a few bytes that a sink takes at once (as the
     * connection's output buffer does right after a head). */
    if (!proxy_made && k < 7 && (refuse_pattern >> k) & 1 && !refused_last) {
        refused_last = true;
        data_calls--; /* the same bytes come again */
        return 0;
    }
    refused_last = false;
    body_bytes += n;
    return n;
}

static void sink_end(struct um_sink *s, int err)
{
    (void)s;
    FUZZ_CHECK(ends == 0);
    ends++;
    end_err = err;
}

static const struct um_sink_ops fuzz_sink_ops = {.on_head = sink_head, .on_data = sink_data,
                                                 .on_end = sink_end};

/* ---------------------------------------------------------------- one input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 100000)
        return 0;
    uint8_t flags = data[0];
    data++;
    size--;

    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    int sndbuf = 256 * 1024;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(sv[1], data + off, size - off);
        if (n <= 0)
            break; /* the rest does not fit: the reader sees what did */
        off += (size_t)n;
    }
    shutdown(sv[1], SHUT_WR);

    struct um_upstream_server srv = {.url = "http://127.0.0.1:9"};
    struct sockaddr_in *sa = (struct sockaddr_in *)&srv.addr;
    sa->sin_family = AF_INET;
    sa->sin_port = htons(9);
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    srv.addrlen = sizeof *sa;
    struct um_upstream_conf conf = {.name = "fuzz", .servers = &srv, .num_servers = 1,
                                    .retries = 0, .max_fails = 1000, .timeout = 30};
    struct server_state state;
    memset(&state, 0, sizeof state);
    struct upstream up;
    memset(&up, 0, sizeof up);
    up.conf = &conf;
    up.servers = &state;
    int slot = -1;
    up.slots = &slot;
    struct um_sink sink = {&fuzz_sink_ops, NULL};

    struct xfer *x = um_calloc(1, sizeof *x);
    x->up = &up;
    x->ctx = &fuzz_ctx;
    x->loop = fuzz_ctx.loop;
    x->sink = &sink;
    sink.origin_data = x;
    x->is_head = flags & 1;
    cur = x;
    proxy_made = false;
    x->target = um_strndup("/", 1);
    x->counted = true;
    atomic_store(&state.active, 1);
    heads = ends = data_calls = 0;
    end_err = 0;
    refuse_pattern = flags >> 1;
    refused_last = false;
    body_bytes = 0;
    head_length = -2;
    head_status = 0;

    /* A connection in the middle of an attempt whose request has been sent. */
    struct h1worker *hw = h1worker(x->ctx);
    struct h1conn *c = conn_add(hw, pool_for(hw, &srv), sv[0]);
    c->state = H1_ACTIVE;
    c->want = EPOLLIN;
    c->x = x;
    x->conn = c;
    x->tp = &um__up_h1;
    c->keep = true;
    c->req_done = true;

    /* Events until the attempt ends: the sink resumes whenever it refused. */
    for (int turn = 0; turn < 10000 && ends == 0; turn++) {
        if (x->paused_recv) {
            x->paused_recv = false;
            um__up_h1.resume(x);
        } else {
            on_io(&c->io, EPOLLIN);
        }
    }
    FUZZ_CHECK(ends == 1); /* the peer's close ends every attempt */
    if (end_err == UM_OK && heads == 1) {
        if (flags & 1 || head_status == 204 || head_status == 304)
            FUZZ_CHECK(body_bytes == 0 || head_status >= 500);
        else if (head_length >= 0)
            FUZZ_CHECK(body_bytes == (uint64_t)head_length);
    }
    /* x was freed by um__up_finish. A connection kept for reuse is closed here. */
    while (hw->all)
        um__h1_conn_close(hw->all);
    reap(hw);
    close(sv[1]);
    return 0;
}
