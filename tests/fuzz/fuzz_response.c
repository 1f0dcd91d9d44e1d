/* Fuzzes um_http1_parse_response (src/http/response.c).
 *
 * Input: byte 0 picks max_head, byte 1 the split point, the rest is the response. It is
 * parsed in one call, then fed in two calls split at the chosen point to one parser. Every
 * call sees a heap copy of exactly the bytes it may read, so an over-read is an ASan
 * report.
 *
 * Properties: the split does not change the outcome; on UM_OK head_len <= len and
 * <= max_head, the head ends in an empty line, the status is 100..599, the reason has no
 * control byte but HTAB, every field has a token name and a value of visible bytes, SP,
 * HTAB or obs-text without leading or trailing whitespace, lying inside the head, at most
 * UM_HTTP1_MAX_RESPONSE_FIELDS of them; a Content-Length that is set appeared in the
 * input and chunked implies a Transfer-Encoding; on UM_ERR the reason is one of the
 * two the header documents. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/http1.h"
#include "umbra/httpfield.h"

static struct um_http1_response whole, split;

static bool in_head(const char *buf, size_t head_len, um_str s)
{
    if (s.len == 0) return true;
    return s.base >= buf && s.base + s.len <= buf + head_len;
}

static void check_ok(const char *buf, size_t len, size_t max_head,
                     const struct um_http1_response *r)
{
    FUZZ_CHECK(r->head_len >= 2 && r->head_len <= len && r->head_len <= max_head);
    FUZZ_CHECK(buf[r->head_len - 1] == '\n');
    FUZZ_CHECK(r->status >= 100 && r->status <= 599);
    FUZZ_CHECK(in_head(buf, r->head_len, r->reason));
    for (size_t i = 0; i < r->reason.len; i++) {
        unsigned char c = (unsigned char)r->reason.base[i];
        FUZZ_CHECK((c >= 0x20 && c != 0x7f) || c == '\t');
    }
    FUZZ_CHECK(r->num_headers <= UM_HTTP1_MAX_RESPONSE_FIELDS);
    for (size_t i = 0; i < r->num_headers; i++) {
        um_str n = r->headers[i].name, v = r->headers[i].value;
        FUZZ_CHECK(um_http_is_token(n));
        FUZZ_CHECK(in_head(buf, r->head_len, n) && in_head(buf, r->head_len, v));
        for (size_t k = 0; k < v.len; k++)
            FUZZ_CHECK(um_http_cls[(unsigned char)v.base[k]] & UM_HTTP_C_VALUE);
        if (v.len > 0) {
            FUZZ_CHECK(v.base[0] != ' ' && v.base[0] != '\t');
            FUZZ_CHECK(v.base[v.len - 1] != ' ' && v.base[v.len - 1] != '\t');
        }
    }
    if (r->flags & UM_RESP_F_CHUNKED) FUZZ_CHECK(r->flags & UM_RESP_F_TE);
    if (r->flags & UM_RESP_F_CONTENT_LENGTH) {
        char digits[24];
        int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)r->content_length);
        FUZZ_CHECK(memmem(buf, r->head_len, digits, (size_t)n) != NULL);
    }
}

static void check_same(const struct um_http1_response *a, const char *abuf,
                       const struct um_http1_response *b, const char *bbuf)
{
    FUZZ_CHECK(a->status == b->status && a->minor_version == b->minor_version);
    FUZZ_CHECK(a->head_len == b->head_len && a->flags == b->flags);
    FUZZ_CHECK(a->num_headers == b->num_headers);
    FUZZ_CHECK(a->reason.len == b->reason.len);
    if (a->reason.len > 0) FUZZ_CHECK(a->reason.base - abuf == b->reason.base - bbuf);
    if (a->flags & UM_RESP_F_CONTENT_LENGTH) FUZZ_CHECK(a->content_length == b->content_length);
    for (size_t i = 0; i < a->num_headers; i++) {
        FUZZ_CHECK(a->headers[i].name.base - abuf == b->headers[i].name.base - bbuf);
        FUZZ_CHECK(a->headers[i].name.len == b->headers[i].name.len);
        FUZZ_CHECK(a->headers[i].value.len == b->headers[i].value.len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t max_head = data[0] < 128 ? 64 * 1024 : 16 + 8u * (data[0] - 128);
    size_t len = size - 2;
    size_t cut = len * data[1] / 255;
    data += 2;

    struct um_http1_resp_parser p;
    enum um_http1_resp_err err = 0, err2 = 0;
    char *buf = fuzz_dup(data, len);
    um_http1_resp_parser_init(&p);
    int rc = um_http1_parse_response(&p, buf, len, max_head, &whole, &err);
    if (rc == UM_OK) check_ok(buf, len, max_head, &whole);
    if (rc == UM_ERR) FUZZ_CHECK(err == UM_HTTP1_RESP_MALFORMED || err == UM_HTTP1_RESP_TOO_LARGE);
    if (rc == UM_AGAIN) FUZZ_CHECK(len < max_head);

    /* The same bytes in two calls: the first sees a copy of exactly its prefix. */
    um_http1_resp_parser_init(&p);
    char *part = fuzz_dup(data, cut);
    int rc1 = um_http1_parse_response(&p, part, cut, max_head, &split, &err2);
    free(part);
    int rc2 = rc1;
    if (rc1 == UM_AGAIN) rc2 = um_http1_parse_response(&p, buf, len, max_head, &split, &err2);
    if (rc1 == UM_AGAIN) {
        FUZZ_CHECK(rc2 == rc);
        if (rc == UM_OK) check_same(&whole, buf, &split, buf);
        if (rc == UM_ERR) FUZZ_CHECK(err2 == err);
    } else if (rc1 == UM_OK) {
        /* A head complete in the prefix is the same head. */
        FUZZ_CHECK(rc == UM_OK && split.head_len == whole.head_len);
    } else {
        /* A prefix can only be refused for what the whole is refused for, or for being
         * too large already. */
        FUZZ_CHECK(rc == UM_ERR);
    }
    free(buf);
    return 0;
}
