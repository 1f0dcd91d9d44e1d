/* Tests for the HTTP/1.x response head parser (um_http1_parse_response). Every input is
 * parsed whole against a guard page after it and one before it, and again fed one prefix
 * at a time to one parser, so each case also checks resumption and that no byte outside
 * the input is read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "guard.h"
#include "strassert.h"
#include "umbra/http1.h"

#define MAX_HEAD (64 * 1024)
#define CAP (160 * 1024)

static struct guard g_after, g_before, g_inc;
static struct um_http1_response r_before, r_inc, resp;
static enum um_http1_resp_err err;

static void assert_same_resp(const struct um_http1_response *a, const struct um_http1_response *b)
{
    assert_int_equal(a->minor_version, b->minor_version);
    assert_int_equal(a->status, b->status);
    assert_same_str(a->reason, b->reason);
    assert_int_equal(a->num_headers, b->num_headers);
    for (size_t i = 0; i < a->num_headers; i++) {
        assert_same_str(a->headers[i].name, b->headers[i].name);
        assert_same_str(a->headers[i].value, b->headers[i].value);
    }
    assert_int_equal(a->head_len, b->head_len);
    assert_int_equal(a->flags, b->flags);
    if (a->flags & UM_RESP_F_CONTENT_LENGTH) assert_int_equal(a->content_length, b->content_length);
}

/* Feeds s[0..k) for k = 1, 2, ... to one parser: it waits until the whole parse would
 * finish, then agrees with it. Large inputs are fed in steps. */
static void check_incremental(const char *s, size_t len, size_t max_head, int want_rc,
                              enum um_http1_resp_err want_err, const struct um_http1_response *want)
{
    struct um_http1_resp_parser p;
    size_t step = len > 4096 ? 61 : 1;
    um_http1_resp_parser_init(&p);
    for (size_t k = 1;; k += step) {
        if (k > len) k = len;
        enum um_http1_resp_err e = 0;
        const char *b = guard_put(&g_inc, s, k);
        int rc = um_http1_parse_response(&p, b, k, max_head, &r_inc, &e);
        if (rc == UM_ERR) {
            if (want_rc != UM_ERR) fail_msg("prefix %zu of %zu: error %d", k, len, e);
            assert_int_equal(e, want_err);
            return;
        }
        if (rc == UM_OK) {
            if (want_rc != UM_OK) fail_msg("prefix %zu of %zu: parsed", k, len);
            assert_same_resp(&r_inc, want);
            return;
        }
        if (k == len) {
            assert_int_equal(want_rc, UM_AGAIN);
            return;
        }
    }
}

/* Parses s[0..len) whole with both guards and incrementally; resp's slices point into
 * g_after until the next call. */
static int parse_lim(const char *s, size_t len, size_t max_head)
{
    struct um_http1_resp_parser p;
    enum um_http1_resp_err e_before = 0;
    err = 0;

    um_http1_resp_parser_init(&p);
    const char *b = guard_put(&g_before, s, len);
    int rc_before = um_http1_parse_response(&p, b, len, max_head, &r_before, &e_before);

    um_http1_resp_parser_init(&p);
    b = guard_put(&g_after, s, len);
    int rc = um_http1_parse_response(&p, b, len, max_head, &resp, &err);

    assert_int_equal(rc, rc_before);
    if (rc == UM_ERR) assert_int_equal(err, e_before);
    if (rc == UM_OK) assert_same_resp(&resp, &r_before);
    if (len > 0) check_incremental(s, len, max_head, rc, err, &resp);
    return rc;
}

static int parse(const char *s)
{
    return parse_lim(s, strlen(s), MAX_HEAD);
}

static void parse_ok(const char *s)
{
    int rc = parse(s);
    if (rc != UM_OK) fail_msg("rc %d err %d for \"%s\"", rc, err, s);
}

static void parse_bad(const char *s, enum um_http1_resp_err want)
{
    int rc = parse(s);
    if (rc != UM_ERR) fail_msg("rc %d for \"%s\"", rc, s);
    assert_int_equal(err, want);
}

static void expect_header(size_t i, const char *name, const char *value)
{
    assert_true(i < resp.num_headers);
    assert_str(resp.headers[i].name, name);
    assert_str(resp.headers[i].value, value);
}

/* ---- valid heads ---- */

static void test_status_line_and_fields(void **state)
{
    static const char s[] = "HTTP/1.1 404 Not Found\r\n"
                            "Content-Type: text/plain\r\n"
                            "X-Spaces:  a  b \t\r\n"
                            "X-Empty:\r\n"
                            "X-Obs: caf\xc3\xa9\xff\r\n"
                            "\r\n"
                            "body";
    parse_ok(s);
    assert_int_equal(resp.minor_version, 1);
    assert_int_equal(resp.status, 404);
    assert_str(resp.reason, "Not Found");
    assert_int_equal(resp.num_headers, 4);
    expect_header(0, "Content-Type", "text/plain");
    expect_header(1, "X-Spaces", "a  b");
    expect_header(2, "X-Empty", "");
    expect_header(3, "X-Obs", "caf\xc3\xa9\xff");
    assert_int_equal(resp.head_len, sizeof(s) - 1 - 4);
    assert_int_equal(resp.flags, 0);
}

static void test_reason(void **state)
{
    parse_ok("HTTP/1.1 503\r\nRetry-After: 1\r\n\r\n");
    assert_int_equal(resp.status, 503);
    assert_int_equal(resp.reason.len, 0);
    parse_ok("HTTP/1.1 200 \r\n\r\n");
    assert_int_equal(resp.reason.len, 0);
    parse_ok("HTTP/1.1 200 A\tvery  long reason\r\n\r\n");
    assert_str(resp.reason, "A\tvery  long reason");
    parse_ok("HTTP/1.1 599 x\r\n\r\n");
    parse_ok("HTTP/1.1 100 Continue\r\n\r\n");
    assert_int_equal(resp.status, 100);
}

static void test_bare_lf(void **state)
{
    static const char s[] = "HTTP/1.1 200 OK\nX-A: b\nContent-Length: 1\n\nx";
    parse_ok(s);
    assert_str(resp.reason, "OK");
    expect_header(0, "X-A", "b");
    assert_int_equal(resp.head_len, sizeof(s) - 2);
    assert_int_equal(resp.content_length, 1);
    /* Mixed: CRLF lines, then LF, and the other way round. */
    parse_ok("HTTP/1.1 200 OK\r\nX-A: b\n\r\n");
    expect_header(0, "X-A", "b");
    parse_ok("HTTP/1.1 200 OK\nX-A: b\r\n\n");
    expect_header(0, "X-A", "b");
}

static void test_interim_then_final(void **state)
{
    static const char s[] = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    parse_ok(s);
    assert_int_equal(resp.status, 103);
    size_t first = resp.head_len;
    assert_int_equal(first, strlen("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"));
    parse_ok(s + first);
    assert_int_equal(resp.status, 200);
    assert_int_equal(resp.head_len, sizeof(s) - 1 - first);
}

static void test_content_length(void **state)
{
    parse_ok("HTTP/1.1 200 OK\r\ncontent-length:  007 \r\n\r\n");
    assert_int_equal(resp.flags, UM_RESP_F_CONTENT_LENGTH);
    assert_int_equal(resp.content_length, 7);
    parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(resp.content_length, 0);
    assert_true(resp.flags & UM_RESP_F_CONTENT_LENGTH);
    parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc");
    assert_int_equal(resp.content_length, 3);
    parse_ok("HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\n");
    assert_true(resp.content_length == UINT64_C(999999999999999999));
    /* The field stays among the fields: what to pass on is the caller's business. */
    expect_header(0, "Content-Length", "999999999999999999");
}

static void test_transfer_encoding(void **state)
{
    static const struct {
        const char *fields;
        unsigned flags;
    } cases[] = {
        {"Transfer-Encoding: chunked\r\n", UM_RESP_F_TE | UM_RESP_F_CHUNKED},
        {"transfer-encoding:\tChunked \r\n", UM_RESP_F_TE | UM_RESP_F_CHUNKED},
        {"Transfer-Encoding: gzip, chunked\r\n", UM_RESP_F_TE | UM_RESP_F_CHUNKED},
        {"Transfer-Encoding: chunked, gzip\r\n", UM_RESP_F_TE},
        {"Transfer-Encoding: gzip\r\n", UM_RESP_F_TE},
        {"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
         UM_RESP_F_TE | UM_RESP_F_CHUNKED},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", UM_RESP_F_TE},
        {"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
         UM_RESP_F_TE | UM_RESP_F_CHUNKED | UM_RESP_F_CONTENT_LENGTH},
    };
    char s[256];
    for (size_t i = 0; i < UM_NELEMS(cases); i++) {
        snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\n%s\r\n", cases[i].fields);
        parse_ok(s);
        if (resp.flags != cases[i].flags)
            fail_msg("flags %#x, want %#x for %s", resp.flags, cases[i].flags, cases[i].fields);
    }
}

static void test_connection(void **state)
{
    static const struct {
        const char *head;
        bool close;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\n\r\n", false},
        {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", true},
        {"HTTP/1.1 200 OK\r\nConnection: x-secret, CLOSE\r\n\r\n", true},
        {"HTTP/1.1 200 OK\r\nConnection: closed\r\n\r\n", false},
        {"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\n\r\n", true},
        {"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nConnection: te,keep-alive , x\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nConnection: keep-alive, close\r\n\r\n", true},
    };
    for (size_t i = 0; i < UM_NELEMS(cases); i++) {
        parse_ok(cases[i].head);
        if (!!(resp.flags & UM_RESP_F_CLOSE) != cases[i].close)
            fail_msg("close %d for %s", !cases[i].close, cases[i].head);
    }
    parse_ok("HTTP/1.0 200 OK\r\n\r\n");
    assert_int_equal(resp.minor_version, 0);
}

/* ---- refused heads ---- */

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "\r\nHTTP/1.1 200 OK\r\n\r\n",             /* an empty line first */
        "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\n\r\n", /* obs-fold */
        "HTTP/1.1 200 OK\r\nX-A : b\r\n\r\n",      /* whitespace before the colon */
        "HTTP/1.1 200 OK\r\n: b\r\n\r\n",          /* empty name */
        "HTTP/1.1 200 OK\r\nX-A b\r\n\r\n",        /* no colon */
        "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",    /* CR in a value */
        "HTTP/1.1 200 OK\r\nX-A: b\r\r\n\r\n",     /* CR before the CRLF */
        "HTTP/1.1 200 OK\r\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: \x7f\r\n\r\n", /* DEL */
        "HTTP/1.1 200 OK\r\nX-A: \x01\r\n\r\n",
        "HTTP/1.1 404 Not\001Found\r\n\r\n", /* control byte in the reason */
        "HTTP/1.1 600 Odd\r\n\r\n",
        "HTTP/1.1 099 Odd\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 200X\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/1.x 200 OK\r\n\r\n",
        "HTTP/2 200\r\nx-a: 1\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "http/1.1 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n",
    };
    for (size_t i = 0; i < UM_NELEMS(bad); i++)
        parse_bad(bad[i], UM_HTTP1_RESP_MALFORMED);
    /* A NUL is not a C string's end here. */
    static const char nul[] = "HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n";
    assert_int_equal(parse_lim(nul, sizeof(nul) - 1, MAX_HEAD), UM_ERR);
    assert_int_equal(err, UM_HTTP1_RESP_MALFORMED);
}

static void test_fail_early(void **state)
{
    /* What cannot begin a status line fails at once, before any line end. */
    parse_bad("\x16\x03\x01", UM_HTTP1_RESP_MALFORMED);
    parse_bad("<html>", UM_HTTP1_RESP_MALFORMED);
    parse_bad("HTTP/2", UM_HTTP1_RESP_MALFORMED);
    parse_bad("\n", UM_HTTP1_RESP_MALFORMED);
    /* What may still become one waits. */
    assert_int_equal(parse("HTTP/1"), UM_AGAIN);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nX: y\r\n"), UM_AGAIN);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\n\r"), UM_AGAIN);
    assert_int_equal(parse_lim("", 0, MAX_HEAD), UM_AGAIN);
}

static void test_limits(void **state)
{
    /* UM_HTTP1_MAX_RESPONSE_FIELDS fields pass, one more is too large. */
    static char s[CAP];
    size_t o = (size_t)snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < UM_HTTP1_MAX_RESPONSE_FIELDS; i++)
        o += (size_t)snprintf(s + o, sizeof(s) - o, "X-%d: v\r\n", i);
    memcpy(s + o, "\r\n", 3);
    parse_ok(s);
    assert_int_equal(resp.num_headers, UM_HTTP1_MAX_RESPONSE_FIELDS);
    o += (size_t)snprintf(s + o, sizeof(s) - o, "X-last: v\r\n\r\n");
    parse_bad(s, UM_HTTP1_RESP_TOO_LARGE);

    /* max_head counts the whole head, its empty line included. */
    const char *h = "HTTP/1.1 200 OK\r\nX: y\r\n\r\n";
    size_t n = strlen(h);
    assert_int_equal(parse_lim(h, n, n), UM_OK);
    assert_int_equal(parse_lim(h, n, n - 1), UM_ERR);
    assert_int_equal(err, UM_HTTP1_RESP_TOO_LARGE);
    /* Without the end: waiting below the limit, too large at it. */
    assert_int_equal(parse_lim(h, n - 2, n), UM_AGAIN);
    assert_int_equal(parse_lim(h, n - 2, n - 2), UM_ERR);
    assert_int_equal(err, UM_HTTP1_RESP_TOO_LARGE);

    /* A 70 000-byte field over the default limit, whole or not. */
    o = (size_t)snprintf(s, sizeof(s), "HTTP/1.1 200 OK\r\nX-Big: ");
    memset(s + o, 'a', 70000);
    o += 70000;
    memcpy(s + o, "\r\n\r\n", 5);
    parse_bad(s, UM_HTTP1_RESP_TOO_LARGE);
    assert_int_equal(parse_lim(s, MAX_HEAD - 1, MAX_HEAD), UM_AGAIN);
    assert_int_equal(parse_lim(s, MAX_HEAD, MAX_HEAD), UM_ERR);
    assert_int_equal(err, UM_HTTP1_RESP_TOO_LARGE);
}

static void test_resume_state(void **state)
{
    /* Bytes that arrive one at a time are scanned once: _scanned never goes back past
     * the last line end, and the result is the one of a single call. */
    static const char s[] = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\n\r\nrest";
    struct um_http1_resp_parser p;
    um_http1_resp_parser_init(&p);
    size_t last = 0;
    int rc = UM_AGAIN;
    for (size_t k = 1; k < sizeof(s) && rc == UM_AGAIN; k++) {
        const char *b = guard_put(&g_inc, s, k);
        rc = um_http1_parse_response(&p, b, k, MAX_HEAD, &resp, &err);
        assert_true(p._scanned >= last || rc == UM_OK);
        last = p._scanned;
    }
    assert_int_equal(rc, UM_OK);
    assert_int_equal(resp.head_len, sizeof(s) - 1 - 4);
    expect_header(1, "B", "2");
}

static int setup(void **state)
{
    guard_init(&g_after, CAP, GUARD_AFTER);
    guard_init(&g_before, CAP, GUARD_BEFORE);
    guard_init(&g_inc, CAP, GUARD_AFTER);
    return 0;
}

static int teardown(void **state)
{
    guard_dispose(&g_after);
    guard_dispose(&g_before);
    guard_dispose(&g_inc);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_line_and_fields),
        cmocka_unit_test(test_reason),
        cmocka_unit_test(test_bare_lf),
        cmocka_unit_test(test_interim_then_final),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_transfer_encoding),
        cmocka_unit_test(test_connection),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_fail_early),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_resume_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
