/* Fuzzes the upstream's response head as libcurl hands it over: on_header of
 * src/upstream/curl.c (collects the lines, parses the head at its empty line with
 * um_http1_parse_response) and um__up_head of src/upstream/upstream.c (drops hop-by-hop
 * fields, adds Via, hands the head to the sink).
 *
 * Input: [flags byte][response bytes]. Bit 0 of flags: the request was a HEAD. The bytes
 * are cut after every LF (curl hands over one line at a time, its end included) and given
 * to on_header until it refuses one (returns 0) or the head has gone to the sink; later
 * lines are then trailers, which must be taken and ignored.
 *
 * Both files are included, so the statics are reachable; the loop timer it stops, the
 * loop's clock and the log are stubs, and Umbra's own HTTP/1.1 client is left out.
 *
 * Properties:
 * - on_header returns 0 or the length it was given, never more than one head reaches the
 *   sink, the bytes it keeps stay under MAX_RESPONSE_HEAD, and a refusal says why;
 * - a head that reaches the sink has a final status (200..599), a reason without control
 *   bytes but HTAB, at most UM_HTTP1_MAX_RESPONSE_FIELDS + 1 fields, each with a non-empty
 *   token name and a value without CR, LF, NUL or DEL and without leading or trailing
 *   whitespace; no hop-by-hop field, no Content-Length, Transfer-Encoding or Server; Via
 *   last; content_length -1 or a value that appeared in a Content-Length line. */
#define um_loop_timer_stop fuzz_loop_timer_stop
#define um_loop_now fuzz_loop_now /* no worker loop here: the time is 0 */
#define um_log fuzz_log /* malformed heads are logged: millions of lines otherwise */
#include "../../src/upstream/upstream.c"
#include "../../src/upstream/curl.c"
#undef um_loop_timer_stop
#undef um_loop_now
#undef um_log

#include "fuzz_common.h"
#include "fuzz_loop_stubs.h"

/* The other transport is not exercised here (stubs, its slot with them, keep
 * src/upstream/h1.c out of the binary). */
const struct um_up_transport um__up_h1 = {.name = "none"};
struct um_context_slot um__h1_slot = {.name = "none"};

static int heads;
static const char *input;
static size_t input_len;

static bool occurs_in_input(const char *needle, size_t n)
{
    if (n == 0 || n > input_len)
        return false;
    for (size_t i = 0; i + n <= input_len; i++)
        if (memcmp(input + i, needle, n) == 0)
            return true;
    return false;
}

static void check_head(struct um_sink *s, const struct um_response_head *h)
{
    (void)s;
    heads++;
    FUZZ_CHECK(h->status >= 200 && h->status <= 599);
    for (size_t i = 0; i < h->reason.len; i++) {
        unsigned char c = (unsigned char)h->reason.base[i];
        FUZZ_CHECK(c >= 0x20 || c == '\t');
    }
    FUZZ_CHECK(h->num_headers >= 1 && h->num_headers <= UM_HTTP1_MAX_RESPONSE_FIELDS + 1);
    for (size_t i = 0; i < h->num_headers; i++) {
        um_str n = h->headers[i].name, v = h->headers[i].value;
        FUZZ_CHECK(n.len > 0);
        for (size_t k = 0; k < n.len; k++)
            FUZZ_CHECK(um_http_tchar((unsigned char)n.base[k]));
        for (size_t k = 0; k < v.len; k++) {
            unsigned char c = (unsigned char)v.base[k];
            FUZZ_CHECK(c != '\r' && c != '\n' && c != 0 && c != 0x7f);
        }
        if (v.len > 0) {
            FUZZ_CHECK(v.base[0] != ' ' && v.base[0] != '\t');
            FUZZ_CHECK(v.base[v.len - 1] != ' ' && v.base[v.len - 1] != '\t');
        }
        if (i + 1 < h->num_headers) {
            static const char *const hop[] = {"connection", "keep-alive", "proxy-connection",
                                              "te", "trailer", "transfer-encoding", "upgrade",
                                              "proxy-authorization", "proxy-authenticate"};
            for (size_t k = 0; k < UM_NELEMS(hop); k++)
                FUZZ_CHECK(!um_str_eq_ci(n, hop[k]));
            FUZZ_CHECK(!um_str_eq_ci(n, "content-length"));
            FUZZ_CHECK(!um_str_eq_ci(n, "server"));
        }
    }
    FUZZ_CHECK(um_str_eq_ci(h->headers[h->num_headers - 1].name, "via"));
    FUZZ_CHECK(h->content_length >= -1);
    if (h->content_length >= 0) {
        char digits[24];
        int n = snprintf(digits, sizeof digits, "%lld", (long long)h->content_length);
        FUZZ_CHECK(occurs_in_input(digits, (size_t)n));
    }
}

static size_t sink_data(struct um_sink *s, const char *d, size_t n)
{
    (void)s;
    (void)d;
    return n;
}

static void sink_end(struct um_sink *s, int err)
{
    (void)s;
    (void)err;
}

static const struct um_sink_ops fuzz_sink_ops = {.on_head = check_head, .on_data = sink_data,
                                                 .on_end = sink_end};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    data++;
    size--;
    char *buf = fuzz_dup(data, size);
    input = buf;
    input_len = size;

    struct um_upstream_server srv = {.url = "http://fuzz.invalid"};
    struct um_upstream_conf conf = {.name = "fuzz", .servers = &srv, .num_servers = 1};
    struct server_state state;
    memset(&state, 0, sizeof state);
    struct upstream up;
    memset(&up, 0, sizeof up);
    up.conf = &conf;
    up.servers = &state;
    int slot = -1; /* no metrics series (um_metrics_upstream_done ignores it) */
    up.slots = &slot;
    struct um_sink sink = {&fuzz_sink_ops, NULL};
    struct xfer *x = calloc(1, sizeof *x);
    FUZZ_CHECK(x != NULL);
    x->up = &up;
    x->sink = &sink;
    x->is_head = flags & 1;
    struct attempt a;
    memset(&a, 0, sizeof a);
    a.x = x;
    x->conn = &a;
    heads = 0;

    size_t pos = 0;
    while (pos < size) {
        size_t end = pos;
        while (end < size && buf[end] != '\n')
            end++;
        if (end < size)
            end++; /* the LF belongs to the line */
        size_t len = end - pos;
        /* A copy of exactly the line, so that a read past it is caught. */
        char *line = fuzz_alloc(len);
        memcpy(line, buf + pos, len);
        bool sent_before = x->head_sent;
        size_t r = on_header(line, 1, len, &a);
        free(line);
        FUZZ_CHECK(r == 0 || r == len);
        FUZZ_CHECK(a.head.len <= MAX_RESPONSE_HEAD);
        FUZZ_CHECK(heads <= 1);
        FUZZ_CHECK(heads == (x->head_sent ? 1 : 0));
        if (sent_before)
            FUZZ_CHECK(r == len); /* trailers are taken and dropped */
        if (r == 0) {
            FUZZ_CHECK(a.head_err == UM_UP_BAD_HEAD || a.head_err == UM_UP_HEAD_TOO_LARGE);
            break;
        }
        FUZZ_CHECK(a.head_err == UM_UP_OK);
        pos = end;
    }
    um_buf_dispose(&a.head);
    free(x);
    free(buf);
    return 0;
}
