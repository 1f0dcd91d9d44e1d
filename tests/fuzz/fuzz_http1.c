/* Fuzzes um_http1_parse_request.
 *
 * Input: byte 0 picks the limits, byte 1 the split point, the rest is the request.
 * The request is parsed in one call, then fed in two calls split at the chosen point,
 * and (after UM_OK) parsed once more with the same parser. Every call sees a heap copy of
 * exactly the bytes it may read, so an over-read is an ASan report.
 *
 * Properties: the split does not change the outcome (see same_outcome for the one
 * allowed difference); on UM_OK every slice lies in the head, head_len <= len and
 * <= max_head, the head ends in CRLFCRLF, the request line fits max_line, framing flags
 * are consistent; on UM_ERR the status is one the header documents. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/http1.h"

struct limits {
    size_t max_line, max_head;
};

static struct limits pick_limits(uint8_t b)
{
    switch (b % 4) {
    case 2: /* tight request line */
        return (struct limits){4 + (b >> 2), 16 + 4u * (b >> 2)};
    case 3: /* tight head */
        return (struct limits){8192, 4 + 4u * (b >> 2)};
    default: /* the defaults of config.c */
        return (struct limits){8192, 16384};
    }
}

/* A slice as a comparable value: its offset in buf, or -1 for {NULL, 0}. The one slice
 * allowed outside the buffer is the "/" the parser substitutes for the empty path of an
 * absolute-form target ("GET http://h HTTP/1.1"): a static string, which it reports as -2. */
static long slice_off(const char *buf, size_t head_len, um_str s, const struct um_request *req,
                      bool is_path)
{
    if (s.base == NULL) {
        FUZZ_CHECK(s.len == 0);
        return -1;
    }
    if (is_path && (req->flags & UM_REQ_F_ABSOLUTE_FORM) && s.len == 1 &&
        (s.base < buf || s.base >= buf + head_len)) {
        FUZZ_CHECK(s.base[0] == '/');
        return -2;
    }
    FUZZ_CHECK(s.base >= buf && s.base <= buf + head_len);
    FUZZ_CHECK(s.len <= head_len - (size_t)(s.base - buf));
    return (long)(s.base - buf);
}

/* Everything a parsed request says, with slices as offsets. */
struct summary {
    long off[5];
    size_t len[5];
    long hoff[UM_HTTP1_MAX_HEADERS][2];
    size_t hlen[UM_HTTP1_MAX_HEADERS][2];
    int method_id, minor_version;
    size_t num_headers, head_len;
    uint64_t content_length;
    unsigned flags;
};

static void check_ok(const char *buf, size_t len, struct limits lim, const struct um_request *req,
                     struct summary *s)
{
    memset(s, 0, sizeof *s);
    FUZZ_CHECK(req->head_len >= 4 && req->head_len <= len && req->head_len <= lim.max_head);
    FUZZ_CHECK(memcmp(buf + req->head_len - 4, "\r\n\r\n", 4) == 0);
    size_t hl = req->head_len;

    const um_str sl[5] = {req->method, req->target, req->path, req->query, req->authority};
    for (int i = 0; i < 5; i++) {
        s->off[i] = slice_off(buf, hl, sl[i], req, i == 2);
        s->len[i] = sl[i].len;
    }
    FUZZ_CHECK(req->method.len > 0 && req->target.len > 0);
    /* The request line, without an ignored leading CRLF, fits max_line. */
    const char *rl = req->method.base;
    const char *cr = memchr(rl, '\r', hl - (size_t)(rl - buf));
    FUZZ_CHECK(cr != NULL && (size_t)(cr - rl) <= lim.max_line);
    FUZZ_CHECK(req->minor_version == 0 || req->minor_version == 1);
    FUZZ_CHECK(req->num_headers <= UM_HTTP1_MAX_HEADERS);
    FUZZ_CHECK(!((req->flags & UM_REQ_F_CHUNKED) && (req->flags & UM_REQ_F_CONTENT_LENGTH)));
    FUZZ_CHECK(!(req->flags & UM_REQ_F_CHUNKED) || req->minor_version == 1);
    FUZZ_CHECK((req->flags & UM_REQ_F_CONTENT_LENGTH) || req->content_length == 0);
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *h = &req->headers[i];
        FUZZ_CHECK(h->name.len > 0);
        s->hoff[i][0] = slice_off(buf, hl, h->name, req, false);
        s->hoff[i][1] = slice_off(buf, hl, h->value, req, false);
        s->hlen[i][0] = h->name.len;
        s->hlen[i][1] = h->value.len;
        /* Values come trimmed and never span a line. */
        if (h->value.len > 0) {
            char f = h->value.base[0], l = h->value.base[h->value.len - 1];
            FUZZ_CHECK(f != ' ' && f != '\t' && l != ' ' && l != '\t');
            FUZZ_CHECK(memchr(h->value.base, '\r', h->value.len) == NULL);
            FUZZ_CHECK(memchr(h->value.base, '\n', h->value.len) == NULL);
        }
    }
    s->method_id = (int)req->method_id;
    s->minor_version = req->minor_version;
    s->num_headers = req->num_headers;
    s->head_len = req->head_len;
    s->content_length = req->content_length;
    s->flags = req->flags;
}

static bool valid_status(int st)
{
    return st == 400 || st == 414 || st == 431 || st == 501 || st == 505;
}

/* One call on a fresh exact-size copy of data[0..len). */
static int parse(struct um_http1_parser *p, const uint8_t *data, size_t len, struct limits lim,
                 struct um_request *req, int *status, struct summary *s)
{
    char *buf = fuzz_dup(data, len);
    *status = 0;
    int r = um_http1_parse_request(p, buf, len, lim.max_line, lim.max_head, req, status);
    FUZZ_CHECK(r == UM_OK || r == UM_AGAIN || r == UM_ERR);
    if (r == UM_OK) check_ok(buf, len, lim, req, s);
    if (r == UM_ERR) FUZZ_CHECK(valid_status(*status));
    free(buf);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    struct limits lim = pick_limits(data[0]);
    const uint8_t *in = data + 2;
    size_t len = size - 2;
    size_t split = len * data[1] / 255;

    static struct um_request req; /* 1.6 KiB of headers: keep it off the stack */
    static struct summary whole, part, again;
    struct um_http1_parser p;
    int st_whole, st_part, st;

    um_http1_parser_init(&p);
    int r_whole = parse(&p, in, len, lim, &req, &st_whole, &whole);
    if (r_whole == UM_OK) {
        /* The parser leaves the final LF unscanned so that a repeated call finds the
         * same head. */
        int r = parse(&p, in, len, lim, &req, &st, &again);
        FUZZ_CHECK(r == UM_OK && memcmp(&whole, &again, sizeof whole) == 0);
    }

    um_http1_parser_init(&p);
    int r_part = parse(&p, in, split, lim, &req, &st_part, &part);
    if (r_part == UM_AGAIN) {
        /* Resumed: must end exactly as the single call did. */
        r_part = parse(&p, in, len, lim, &req, &st_part, &part);
        FUZZ_CHECK(r_part == r_whole);
        if (r_part == UM_OK) FUZZ_CHECK(memcmp(&whole, &part, sizeof whole) == 0);
        if (r_part == UM_ERR) FUZZ_CHECK(st_part == st_whole);
    } else if (r_part == UM_OK) {
        /* The head was complete in the first piece. */
        FUZZ_CHECK(r_whole == UM_OK && memcmp(&whole, &part, sizeof whole) == 0);
    } else {
        /* Refused on fewer bytes: the whole input is refused too. A limit error (414,
         * 431) found early may be reported as another error once more bytes are seen
         * (a bare CR or LF past max_line gives 400; a long request line past max_head
         * gives 414), since each call reports the first problem it finds. */
        FUZZ_CHECK(r_whole == UM_ERR);
        FUZZ_CHECK(st_part == st_whole || st_part == 414 || st_part == 431);
    }
    return 0;
}
