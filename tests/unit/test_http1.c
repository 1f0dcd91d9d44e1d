/* Tests for the HTTP/1.1 request parser. Every input is parsed whole against a guard page
 * after it and one before it, and again fed one prefix at a time to one parser, so each
 * case also checks resumption and that no byte outside the input is read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "guard.h"
#include "strassert.h"
#include "umbra/http1.h"

#define MAX_LINE 8190
#define MAX_HEAD 16384
#define CAP (64 * 1024)

static struct guard g_after, g_before, g_inc;
static struct um_request r_before, r_inc;

static void assert_same_req(const struct um_request *a, const struct um_request *b)
{
    assert_same_str(a->method, b->method);
    assert_int_equal(a->method_id, b->method_id);
    assert_same_str(a->target, b->target);
    assert_same_str(a->path, b->path);
    assert_same_str(a->query, b->query);
    assert_same_str(a->authority, b->authority);
    assert_int_equal(a->minor_version, b->minor_version);
    assert_int_equal(a->num_headers, b->num_headers);
    for (size_t i = 0; i < a->num_headers; i++) {
        assert_same_str(a->headers[i].name, b->headers[i].name);
        assert_same_str(a->headers[i].value, b->headers[i].value);
    }
    assert_int_equal(a->head_len, b->head_len);
    assert_int_equal(a->flags, b->flags);
    if (a->flags & UM_REQ_F_CONTENT_LENGTH) assert_int_equal(a->content_length, b->content_length);
}

/* Feeds s[0..k) for k = 1, 2, ... to one parser and checks that it waits until the whole
 * parse would finish, then agrees with it. Large inputs are fed in steps. */
static void check_incremental(const char *s, size_t len, size_t max_line, size_t max_head,
                              int want_rc, int want_status, const struct um_request *want)
{
    struct um_http1_parser p;
    size_t step = len > 4096 ? 61 : 1;
    um_http1_parser_init(&p);
    for (size_t k = 1;; k += step) {
        if (k > len) k = len;
        int st = 0;
        const char *b = guard_put(&g_inc, s, k);
        int rc = um_http1_parse_request(&p, b, k, max_line, max_head, &r_inc, &st);
        if (rc == UM_ERR) {
            if (want_rc != UM_ERR) fail_msg("prefix %zu of %zu: error %d", k, len, st);
            assert_int_equal(st, want_status);
            return;
        }
        if (rc == UM_OK) {
            if (want_rc != UM_OK) fail_msg("prefix %zu of %zu: parsed", k, len);
            assert_int_equal(k, want->head_len);
            assert_same_req(&r_inc, want);
            return;
        }
        if (k == len) {
            assert_int_equal(want_rc, UM_AGAIN);
            return;
        }
    }
}

/* Parses s[0..len) whole with both guards and incrementally; the result's slices point
 * into g_after and stay valid until the next call. */
static int parse_lim(const char *s, size_t len, size_t max_line, size_t max_head,
                     struct um_request *req, int *status)
{
    struct um_http1_parser p;
    int st_before = 0;
    *status = 0;

    um_http1_parser_init(&p);
    const char *b = guard_put(&g_before, s, len);
    int rc_before = um_http1_parse_request(&p, b, len, max_line, max_head, &r_before, &st_before);

    um_http1_parser_init(&p);
    b = guard_put(&g_after, s, len);
    int rc = um_http1_parse_request(&p, b, len, max_line, max_head, req, status);

    assert_int_equal(rc, rc_before);
    if (rc == UM_ERR) assert_int_equal(*status, st_before);
    if (rc == UM_OK) assert_same_req(req, &r_before);
    if (len > 0) check_incremental(s, len, max_line, max_head, rc, *status, req);
    return rc;
}

static int parse_n(const char *s, size_t len, struct um_request *req, int *status)
{
    return parse_lim(s, len, MAX_LINE, MAX_HEAD, req, status);
}

static struct um_request req;
static int status;

#define PARSE(lit) parse_n((lit), sizeof(lit) - 1, &req, &status)

static void parse_ok(const char *s, size_t len)
{
    int rc = parse_n(s, len, &req, &status);
    if (rc != UM_OK) fail_msg("rc %d status %d for \"%.*s\"", rc, status, (int)len, s);
}

#define PARSE_OK(lit) parse_ok((lit), sizeof(lit) - 1)

static void expect_header(size_t i, const char *name, const char *value)
{
    assert_true(i < req.num_headers);
    assert_str(req.headers[i].name, name);
    assert_str(req.headers[i].value, value);
}

/* ---- valid requests ---- */

static void test_get_with_headers(void **state)
{
    static const char s[] = "GET /index.html HTTP/1.1\r\n"
                            "Host: example.com\r\n"
                            "User-Agent:  curl/8.0 \t\r\n"
                            "Accept:*/*\r\n"
                            "X-Empty:\r\n"
                            "X-Blank: \t \r\n"
                            "X-Inner:  a  b \r\n"
                            "\r\n";
    PARSE_OK(s);
    assert_str(req.method, "GET");
    assert_int_equal(req.method_id, UM_METHOD_GET);
    assert_str(req.target, "/index.html");
    assert_str(req.path, "/index.html");
    assert_int_equal(req.query.len, 0);
    assert_str(req.authority, "example.com");
    assert_int_equal(req.minor_version, 1);
    assert_int_equal(req.num_headers, 6);
    expect_header(0, "Host", "example.com");
    expect_header(1, "User-Agent", "curl/8.0");
    expect_header(2, "Accept", "*/*");
    expect_header(3, "X-Empty", "");
    expect_header(4, "X-Blank", "");
    expect_header(5, "X-Inner", "a  b");
    assert_int_equal(req.head_len, sizeof(s) - 1);
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
}

/* RFC 9110 7.8: a switch is asked for by an Upgrade field together with the "upgrade"
 * option in Connection, in HTTP/1.1; either alone, or in HTTP/1.0, is no upgrade. */
static void test_upgrade_flag(void **state)
{
    (void)state;
    PARSE_OK("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n"
             "Upgrade: websocket\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE | UM_REQ_F_UPGRADE);
    PARSE_OK("GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
    PARSE_OK("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
    PARSE_OK("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade:\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
    PARSE_OK("GET /ws HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_int_equal(req.flags, 0);
}

static void test_head(void **state)
{
    PARSE_OK("HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(req.method_id, UM_METHOD_HEAD);
    assert_str(req.method, "HEAD");
}

static void test_method_ids(void **state)
{
    static const struct {
        const char *s;
        enum um_method id;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_GET},
        {"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_HEAD},
        {"POST / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_POST},
        {"PUT / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_PUT},
        {"DELETE / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_DELETE},
        {"OPTIONS / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_OPTIONS},
        {"TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_TRACE},
        {"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", UM_METHOD_CONNECT},
        {"PATCH / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_PATCH},
        {"get / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_OTHER},
        {"PURGE / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_OTHER},
        {"GETX / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_OTHER},
        {"M-SEARCH! / HTTP/1.1\r\nHost: a\r\n\r\n", UM_METHOD_OTHER},
    };
    for (size_t i = 0; i < UM_NELEMS(cases); i++) {
        parse_ok(cases[i].s, strlen(cases[i].s));
        assert_int_equal(req.method_id, cases[i].id);
    }
}

static void test_post_content_length(void **state)
{
    static const char s[] =
        "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world";
    PARSE_OK(s);
    assert_int_equal(req.method_id, UM_METHOD_POST);
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE | UM_REQ_F_CONTENT_LENGTH);
    assert_int_equal(req.content_length, 11);
    assert_int_equal(req.head_len, sizeof(s) - 1 - 11);
}

static void test_content_length_values(void **state)
{
    PARSE_OK("POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n");
    assert_int_equal(req.content_length, 0);
    assert_true(req.flags & UM_REQ_F_CONTENT_LENGTH);
    PARSE_OK("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:  007 \r\n\r\n");
    assert_int_equal(req.content_length, 7);
    PARSE_OK("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n");
    assert_true(req.content_length == UINT64_C(9999999999999999999));
}

static void test_chunked(void **state)
{
    static const char *const ok[] = {
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\t\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding:\tChunked \r\n\r\n",
    };
    for (size_t i = 0; i < UM_NELEMS(ok); i++) {
        parse_ok(ok[i], strlen(ok[i]));
        assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE | UM_REQ_F_CHUNKED);
    }
}

static void test_absolute_form(void **state)
{
    PARSE_OK("GET http://Example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_str(req.target, "http://Example.com:8080/a/b?x=1");
    assert_str(req.authority, "Example.com:8080");
    assert_str(req.path, "/a/b");
    assert_str(req.query, "x=1");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE | UM_REQ_F_ABSOLUTE_FORM | UM_REQ_F_HAS_QUERY);

    PARSE_OK("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_str(req.authority, "h");
    assert_str(req.path, "/");
    assert_false(req.flags & UM_REQ_F_HAS_QUERY);

    PARSE_OK("GET http://h?q HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_str(req.path, "/");
    assert_str(req.query, "q");

    PARSE_OK("GET http://[::1]:80/ HTTP/1.0\r\n\r\n");
    assert_str(req.authority, "[::1]:80");
    assert_str(req.path, "/");
}

static void test_asterisk_form(void **state)
{
    PARSE_OK("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_int_equal(req.method_id, UM_METHOD_OPTIONS);
    assert_str(req.target, "*");
    assert_str(req.path, "*");
    assert_str(req.authority, "a");
}

static void test_authority_form(void **state)
{
    PARSE_OK("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    assert_str(req.authority, "example.com:443");
    assert_int_equal(req.path.len, 0);
}

static void test_query_split(void **state)
{
    PARSE_OK("GET /p/q?a=1?b=/2 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_str(req.path, "/p/q");
    assert_str(req.query, "a=1?b=/2");
    assert_true(req.flags & UM_REQ_F_HAS_QUERY);

    PARSE_OK("GET /p? HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_str(req.path, "/p");
    assert_int_equal(req.query.len, 0);
    assert_true(req.flags & UM_REQ_F_HAS_QUERY);

    PARSE_OK("GET /%7Efoo HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_str(req.path, "/%7Efoo");
    assert_false(req.flags & UM_REQ_F_HAS_QUERY);
}

static void test_keepalive(void **state)
{
    PARSE_OK("GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(req.minor_version, 0);
    assert_int_equal(req.flags, 0);
    assert_int_equal(req.authority.len, 0);

    PARSE_OK("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
    PARSE_OK("GET / HTTP/1.0\r\nConnection: Keep-Alive , TE\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
    PARSE_OK("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n");
    assert_int_equal(req.flags, 0);

    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_int_equal(req.flags, 0);
    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade,CLOSE\r\n\r\n");
    assert_int_equal(req.flags, 0);
    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nConnection: close\r\n\r\n");
    assert_int_equal(req.flags, 0);
    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n");
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE);
}

static void test_expect(void **state)
{
    PARSE_OK("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n");
    assert_true(req.flags & UM_REQ_F_EXPECT_CONTINUE);
    PARSE_OK("PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
    assert_false(req.flags & UM_REQ_F_EXPECT_CONTINUE);
    PARSE_OK("PUT / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n");
    assert_false(req.flags & UM_REQ_F_EXPECT_CONTINUE);
}

static void test_host(void **state)
{
    PARSE_OK("GET / HTTP/1.1\r\nHost:\r\n\r\n");
    assert_int_equal(req.authority.len, 0);
    PARSE_OK("GET / HTTP/1.1\r\nhost: Example.COM:8443 \r\n\r\n");
    assert_str(req.authority, "Example.COM:8443");
    PARSE_OK("GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\n\r\n");
    assert_str(req.authority, "[2001:db8::1]:8080");
    PARSE_OK("GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n");
    assert_str(req.authority, "192.0.2.1");
}

static void test_obs_text_value(void **state)
{
    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nX-Name: caf\xc3\xa9\xff\r\n\r\n");
    expect_header(1, "X-Name", "caf\xc3\xa9\xff");
}

static void test_leading_empty_line(void **state)
{
    static const char s[] = "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    PARSE_OK(s);
    assert_str(req.method, "GET");
    assert_int_equal(req.head_len, sizeof(s) - 1);
}

static void test_pipelined(void **state)
{
    static const char s[] = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
                            "GET /2 HTTP/1.1\r\nHost: b\r\n\r\n";
    PARSE_OK(s);
    size_t first = req.head_len;
    assert_int_equal(first, (sizeof(s) - 1) / 2);
    assert_str(req.path, "/1");
    parse_ok(s + first, sizeof(s) - 1 - first);
    assert_str(req.path, "/2");
    assert_str(req.authority, "b");
}

static void test_find_header(void **state)
{
    PARSE_OK("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nAccept: b\r\n\r\n");
    const um_str *v = um_http1_find_header(&req, "X-a");
    assert_non_null(v);
    assert_str(*v, "1");
    v = um_http1_find_header(&req, "accept");
    assert_non_null(v);
    assert_str(*v, "b");
    assert_null(um_http1_find_header(&req, "X"));
    assert_null(um_http1_find_header(&req, "X-AB"));
}

static void test_max_headers(void **state)
{
    static char s[8192];
    size_t n = (size_t)snprintf(s, sizeof(s), "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 1; i < UM_HTTP1_MAX_HEADERS; i++)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "X-%d: %d\r\n", i, i);
    n += (size_t)snprintf(s + n, sizeof(s) - n, "\r\n");
    parse_ok(s, n);
    assert_int_equal(req.num_headers, UM_HTTP1_MAX_HEADERS);

    n -= 2;
    n += (size_t)snprintf(s + n, sizeof(s) - n, "X-last: 1\r\n\r\n");
    assert_int_equal(parse_n(s, n, &req, &status), UM_ERR);
    assert_int_equal(status, 431);
}

/* Builds "GET /aaa... HTTP/1.1" with a request line of line_len bytes, then the rest. */
static size_t long_line(char *s, size_t cap, size_t line_len, const char *rest)
{
    size_t fixed = strlen("GET / HTTP/1.1") - 1;
    size_t n = (size_t)snprintf(s, cap, "GET /");
    memset(s + n, 'a', line_len - fixed - 1);
    n += line_len - fixed - 1;
    n += (size_t)snprintf(s + n, cap - n, " HTTP/1.1%s", rest);
    return n;
}

static void test_request_line_limit(void **state)
{
    static char s[1024];
    size_t n = long_line(s, sizeof(s), 100, "\r\nHost: a\r\n\r\n");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_OK);
    assert_int_equal(req.target.len, 100 - strlen("GET  HTTP/1.1"));

    /* Complete head, line one byte too long. */
    n = long_line(s, sizeof(s), 101, "\r\nHost: a\r\n\r\n");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_ERR);
    assert_int_equal(status, 414);

    /* Incomplete head: once max_line + 2 bytes hold no LF, the line is too long. */
    n = long_line(s, sizeof(s), 101, "");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_AGAIN);
    s[n++] = '\r';
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_ERR);
    assert_int_equal(status, 414);
    s[n++] = '\n';
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_ERR);
    assert_int_equal(status, 414);

    n = long_line(s, sizeof(s), 300, "");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_ERR);
    assert_int_equal(status, 414);

    /* At the limit with the CRLF present but the head incomplete: keep waiting. */
    n = long_line(s, sizeof(s), 100, "\r\nHost: a\r\n");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_AGAIN);

    /* A leading empty line does not count. */
    s[0] = '\r';
    s[1] = '\n';
    n = 2 + long_line(s + 2, sizeof(s) - 2, 100, "\r\nHost: a\r\n\r\n");
    assert_int_equal(parse_lim(s, n, 100, 4096, &req, &status), UM_OK);
}

static void test_head_limit(void **state)
{
    static char s[64 * 1024];
    size_t n = (size_t)snprintf(s, sizeof(s), "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    size_t fill = 1000 - n - 4;
    memset(s + n, 'v', fill);
    n += fill;
    memcpy(s + n, "\r\n\r\n", 4);
    n += 4;
    assert_int_equal(n, 1000);
    assert_int_equal(parse_lim(s, n, 100, 1000, &req, &status), UM_OK);
    assert_int_equal(parse_lim(s, n, 100, 999, &req, &status), UM_ERR);
    assert_int_equal(status, 431);
    /* Incomplete head at the limit. */
    assert_int_equal(parse_lim(s, n - 1, 100, 999, &req, &status), UM_ERR);
    assert_int_equal(status, 431);
    assert_int_equal(parse_lim(s, n - 2, 100, 999, &req, &status), UM_AGAIN);

    /* A long head with the default limits. */
    n = (size_t)snprintf(s, sizeof(s), "GET / HTTP/1.1\r\nHost: a\r\n");
    while (n < MAX_HEAD + 100)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "X-Filler: %0100d\r\n", 0);
    assert_int_equal(parse_n(s, n, &req, &status), UM_ERR);
    assert_int_equal(status, 431);
}

static void test_resume_state(void **state)
{
    static const char s[] = "GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
    struct um_http1_parser p;
    const char *b;
    um_http1_parser_init(&p);
    b = guard_put(&g_after, s, 20);
    assert_int_equal(um_http1_parse_request(&p, b, 20, MAX_LINE, MAX_HEAD, &req, &status),
                     UM_AGAIN);
    assert_int_equal(p._scanned, 20);
    b = guard_put(&g_after, s, sizeof(s) - 1);
    assert_int_equal(
        um_http1_parse_request(&p, b, sizeof(s) - 1, MAX_LINE, MAX_HEAD, &req, &status), UM_OK);
    assert_int_equal(req.head_len, sizeof(s) - 1 - 4);
    /* Calling again without reinitialising finds the same head. */
    assert_int_equal(
        um_http1_parse_request(&p, b, sizeof(s) - 1, MAX_LINE, MAX_HEAD, &req, &status), UM_OK);
    assert_int_equal(req.head_len, sizeof(s) - 1 - 4);
    /* Empty input. */
    um_http1_parser_init(&p);
    assert_int_equal(um_http1_parse_request(&p, b, 0, MAX_LINE, MAX_HEAD, &req, &status), UM_AGAIN);
}

static void test_fail_early(void **state)
{
    /* Errors visible before the head completes are reported without waiting. */
    static const char *const early[] = {
        "GET / HTTP/1.1\n",
        "GET / HTTP/1.1\r\nHost: a\n",
        "\x16\x03\x01\x02",
        " GET",
    };
    for (size_t i = 0; i < UM_NELEMS(early); i++) {
        assert_int_equal(parse_n(early[i], strlen(early[i]), &req, &status), UM_ERR);
        assert_int_equal(status, 400);
    }
    assert_int_equal(PARSE("GET / HTTP/1.1\r\nHost: a\r\n"), UM_AGAIN);
    assert_int_equal(PARSE("\r"), UM_AGAIN);
    assert_int_equal(PARSE("\r\n"), UM_AGAIN);
}

/* ---- rejections ---- */

struct bad {
    const char *name;
    const char *s;
    size_t len;
    int status;
};

#define B(name, lit, st)                                                                           \
    {                                                                                              \
        name, lit, sizeof(lit) - 1, st                                                             \
    }
#define RL "GET / HTTP/1.1\r\n"
#define RLH "GET / HTTP/1.1\r\nHost: a\r\n"
#define POST "POST / HTTP/1.1\r\nHost: a\r\n"
#define CL(v) POST "Content-Length: " v "\r\n\r\n"
#define TE(v) POST "Transfer-Encoding: " v "\r\n\r\n"

static const struct bad bad[] = {
    /* framing */
    B("cl and te", POST "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    B("te and cl", POST "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 400),
    B("differing cl", POST "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
    B("duplicate cl", POST "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", 400),
    B("cl list", CL("5, 5"), 400),
    B("cl list no space", CL("5,5"), 400),
    B("cl plus", CL("+5"), 400),
    B("cl minus", CL("-1"), 400),
    B("cl inner space", CL("1 0"), 400),
    B("cl hex", CL("0x5"), 400),
    B("cl exponent", CL("1e3"), 400),
    B("cl empty", CL(""), 400),
    B("cl 20 digits", CL("00000000000000000005"), 400),
    B("cl overflow", CL("18446744073709551616"), 400),
    B("cl huge", CL("99999999999999999999999"), 400),
    B("te chunked, identity", TE("chunked, identity"), 400),
    B("te identity", TE("identity"), 501),
    B("te xchunked", TE("xchunked"), 501),
    B("te chunkedx", TE("chunkedx"), 501),
    B("te gzip, chunked", TE("gzip, chunked"), 501),
    B("te gzip", TE("gzip"), 501),
    B("te chunked, gzip", TE("chunked, gzip"), 400),
    B("te chunked, chunked", TE("chunked, chunked"), 400),
    B("te chunked twice", POST "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      400),
    B("te lines gzip then chunked",
      POST "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
    B("te lines chunked then gzip",
      POST "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
    B("te empty", TE(""), 400),
    B("te blank", TE(" \t "), 400),
    B("te empty element after", TE("chunked,"), 400),
    B("te empty element before", TE(", chunked"), 400),
    B("te parameter", TE("chunked;q=1"), 400),
    B("te two words", TE("chunked chunked"), 400),
    B("te quoted", TE("\"chunked\""), 400),
    B("te in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    B("te gzip in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
    /* line endings */
    B("bare cr in request line", "GET / HTTP/1.1\rHost: a\r\n\r\n", 400),
    B("bare cr in method", "GE\rT / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("bare cr in value", RLH "X: a\rb\r\n\r\n", 400),
    B("bare cr in name", RLH "X\r: a\r\n\r\n", 400),
    B("bare cr at line start", RLH "\rX: a\r\n\r\n", 400),
    B("cr cr lf", RLH "X: a\r\r\n\r\n", 400),
    B("bare cr before end", RLH "\r\r\n\r\n", 400),
    B("bare lf after request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400),
    B("bare lf after field", RLH "X: a\nY: b\r\n\r\n", 400),
    B("bare lf end", "GET / HTTP/1.1\r\nHost: a\n\n", 400),
    B("crlf lf end", RLH "\n", 400),
    B("lf crlf end", "GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
    B("bare lf in value", RLH "X: a\nb\r\n\r\n", 400),
    B("two leading empty lines", "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("leading lf", "\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    /* field syntax */
    B("obs-fold sp", RLH "X: a\r\n b\r\n\r\n", 400),
    B("obs-fold htab", RLH "X: a\r\n\tb\r\n\r\n", 400),
    B("space before first field", RL " Host: a\r\n\r\n", 400),
    B("space before colon", RL "Host : a\r\n\r\n", 400),
    B("tab before colon", RLH "X\t: a\r\n\r\n", 400),
    B("nul in value",
      RLH "X: a\x00"
          "b\r\n\r\n",
      400),
    B("soh in value", RLH "X: a\x01\r\n\r\n", 400),
    B("esc in value", RLH "X: \x1b[0m\r\n\r\n", 400),
    B("del in value", RLH "X: a\x7f\r\n\r\n", 400),
    B("vt in value", RLH "X: a\vb\r\n\r\n", 400),
    B("nul in name", RLH "X\x00Y: a\r\n\r\n", 400),
    B("paren in name", RLH "X(y): a\r\n\r\n", 400),
    B("slash in name", RLH "X/Y: a\r\n\r\n", 400),
    B("quote in name", RLH "X\"Y: a\r\n\r\n", 400),
    B("space in name", RLH "X Y: a\r\n\r\n", 400),
    B("obs-text in name", RLH "X\xe9: a\r\n\r\n", 400),
    B("empty name", RLH ": a\r\n\r\n", 400),
    B("no colon", RLH "X-Foo\r\n\r\n", 400),
    /* Host */
    B("missing host", "GET / HTTP/1.1\r\n\r\n", 400),
    B("missing host absolute", "GET http://a/ HTTP/1.1\r\n\r\n", 400),
    B("two hosts", RLH "Host: a\r\n\r\n", 400),
    B("two hosts one empty", RLH "Host:\r\n\r\n", 400),
    B("host space", RL "Host: a b\r\n\r\n", 400),
    B("host slash", RL "Host: a/b\r\n\r\n", 400),
    B("host userinfo", RL "Host: u@a\r\n\r\n", 400),
    B("host bad port", RL "Host: a:80x\r\n\r\n", 400),
    B("host long port", RL "Host: a:123456\r\n\r\n", 400),
    B("host empty name", RL "Host: :80\r\n\r\n", 400),
    B("host unclosed bracket", RL "Host: [::1\r\n\r\n", 400),
    B("host empty brackets", RL "Host: []\r\n\r\n", 400),
    B("host two colons", RL "Host: a:1:2\r\n\r\n", 400),
    B("host obs-text", RL "Host: \xe9\r\n\r\n", 400),
    B("host comma", RL "Host: a, b\r\n\r\n", 400),
    /* request line */
    B("empty request line", "\r\nHost: a\r\n\r\n\r\n", 400),
    B("bad method byte", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("double space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("tab separator", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("leading space", " GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("space before version end", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400),
    B("ctl in target",
      "GET /a\x01"
      "b HTTP/1.1\r\nHost: a\r\n\r\n",
      400),
    B("del in target", "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("obs-text in target", "GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("fragment in target", "GET /#f HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("asterisk with get", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("asterisk with more", "OPTIONS *x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("connect origin-form", "CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("connect without port", "CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("connect with path", "CONNECT a:1/x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("authority-form with get", "GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("relative target", "GET foo HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("other scheme", "GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("empty authority", "GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("scheme only", "GET http:// HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("userinfo in target", "GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("http without slashes", "GET http:a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    B("no version", "GET /\r\nHost: a\r\n\r\n", 400),
    B("empty version", "GET / \r\nHost: a\r\n\r\n", 400),
    B("lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400),
    B("wrong name", "GET / HTTX/1.1\r\nHost: a\r\n\r\n", 400),
    B("version suffix", "GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400),
    B("version no dot", "GET / HTTP/11\r\nHost: a\r\n\r\n", 400),
    B("version letter", "GET / HTTP/1.a\r\nHost: a\r\n\r\n", 400),
    B("version two digits", "GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400),
    B("http/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
    B("http/3.0", "GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505),
    B("http/0.9", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
    B("http/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505),
};

static void test_rejections(void **state)
{
    for (size_t i = 0; i < UM_NELEMS(bad); i++) {
        int rc = parse_n(bad[i].s, bad[i].len, &req, &status);
        if (rc != UM_ERR || status != bad[i].status)
            fail_msg("%s: rc %d status %d, want status %d", bad[i].name, rc, status, bad[i].status);
    }
}

/* ---- resumption at every byte boundary ---- */

static void test_every_split(void **state)
{
    /* parse_n already feeds every prefix; this pins down the expected results. */
    static const char s[] = "\r\nPOST http://h.example:81/up?x=%20 HTTP/1.1\r\n"
                            "Host: h.example:81\r\n"
                            "Content-Length: 5\r\n"
                            "Connection: keep-alive\r\n"
                            "Expect: 100-continue\r\n"
                            "X-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
                            "\r\n"
                            "hello";
    PARSE_OK(s);
    assert_int_equal(req.head_len, sizeof(s) - 1 - 5);
    assert_int_equal(req.flags, UM_REQ_F_KEEPALIVE | UM_REQ_F_CONTENT_LENGTH |
                                    UM_REQ_F_EXPECT_CONTINUE | UM_REQ_F_ABSOLUTE_FORM |
                                    UM_REQ_F_HAS_QUERY);
    assert_str(req.authority, "h.example:81");
    assert_str(req.query, "x=%20");
    assert_int_equal(req.content_length, 5);

    /* Feeding in irregular chunks gives the same result too. */
    struct um_http1_parser p;
    struct um_request whole = req;
    size_t sizes[] = {3, 1, 7, 2, 40, 1, 1, 9};
    size_t k = 0;
    um_http1_parser_init(&p);
    for (size_t i = 0;; i = (i + 1) % UM_NELEMS(sizes)) {
        k += sizes[i];
        if (k > sizeof(s) - 1) k = sizeof(s) - 1;
        const char *b = guard_put(&g_inc, s, k);
        int rc = um_http1_parse_request(&p, b, k, MAX_LINE, MAX_HEAD, &r_inc, &status);
        if (rc == UM_OK) break;
        assert_int_equal(rc, UM_AGAIN);
        assert_true(k < sizeof(s) - 1);
    }
    assert_same_req(&r_inc, &whole);
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

/* A copy has every part of the request but the unused field slots, which it leaves alone. */
static void test_request_copy(void **state)
{
    (void)state;
    PARSE_OK("POST /a?b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nX-A: 1\r\n\r\n");
    static struct um_request copy;
    memset(&copy, 0x5a, sizeof(copy));
    um_http1_request_copy(&copy, &req);
    assert_int_equal(copy.num_headers, 3);
    assert_int_equal(copy.method_id, req.method_id);
    assert_true(um_str_eq(copy.path, "/a") && um_str_eq(copy.query, "b"));
    assert_true(um_str_eq(copy.authority, "h"));
    assert_int_equal(copy.content_length, 3);
    assert_int_equal(copy.flags, req.flags);
    assert_int_equal(copy.head_len, req.head_len);
    for (size_t i = 0; i < 3; i++) {
        assert_true(copy.headers[i].name.base == req.headers[i].name.base);
        assert_true(copy.headers[i].value.len == req.headers[i].value.len);
    }
    const unsigned char *tail = (const unsigned char *)&copy.headers[3];
    for (size_t i = 0; i < sizeof(copy.headers[0]); i++)
        assert_int_equal(tail[i], 0x5a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_with_headers),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_method_ids),
        cmocka_unit_test(test_post_content_length),
        cmocka_unit_test(test_content_length_values),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_absolute_form),
        cmocka_unit_test(test_asterisk_form),
        cmocka_unit_test(test_authority_form),
        cmocka_unit_test(test_query_split),
        cmocka_unit_test(test_keepalive),
        cmocka_unit_test(test_expect),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_obs_text_value),
        cmocka_unit_test(test_leading_empty_line),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_find_header),
        cmocka_unit_test(test_max_headers),
        cmocka_unit_test(test_request_line_limit),
        cmocka_unit_test(test_head_limit),
        cmocka_unit_test(test_resume_state),
        cmocka_unit_test(test_upgrade_flag),
        cmocka_unit_test(test_fail_early),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_request_copy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
