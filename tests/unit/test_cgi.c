/* Unit tests for src/cgi/head.c: what a CGI script writes before its body (RFC 3875
 * section 6) and the arguments of a search-string query (section 4.4). Inputs end right
 * before a PROT_NONE page, so a parser that reads past them crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "guard.h"
#include "umbra/cgi.h"

static struct guard g;

static int parse(const char *s, struct um_cgi_head *h)
{
    size_t len = strlen(s);
    char *p = guard_put(&g, s, len);
    return um_cgi_parse_head(p, len, h);
}

static void assert_str(um_str s, const char *want)
{
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.base, want, s.len);
}

static void test_document(void **state)
{
    struct um_cgi_head h;
    const char *in = "Content-Type: text/html\r\nX-One:  a b  \r\n\r\nbody";
    assert_int_equal(parse(in, &h), UM_OK);
    assert_int_equal(h.status, 200);
    assert_false(h.has_status);
    assert_true(h.has_type);
    assert_int_equal(h.content_length, -1);
    assert_int_equal(h.num_headers, 2);
    assert_str(h.headers[1].name, "X-One");
    assert_str(h.headers[1].value, "a b");
    assert_int_equal(h.head_len, strlen(in) - 4);
}

static void test_bare_lf_and_status(void **state)
{
    struct um_cgi_head h;
    assert_int_equal(parse("Status: 404 Not Here\nContent-type: text/plain\n\n", &h), UM_OK);
    assert_int_equal(h.status, 404);
    assert_str(h.reason, "Not Here");
    assert_int_equal(h.num_headers, 1); /* Status is not sent as a field */
    assert_int_equal(parse("Status: 204\n\n", &h), UM_OK);
    assert_int_equal(h.status, 204);
    assert_int_equal(h.reason.len, 0);
}

static void test_redirects(void **state)
{
    struct um_cgi_head h;
    assert_int_equal(parse("Location: http://example.com/x\n\n", &h), UM_OK);
    assert_int_equal(h.status, 302);
    assert_str(h.location, "http://example.com/x");
    assert_int_equal(parse("Location: /local?q\n\n", &h), UM_OK);
    assert_str(h.location, "/local?q");
    assert_false(h.has_status);
    assert_int_equal(parse("Status: 301 Moved\nLocation: /x\n\n", &h), UM_OK);
    assert_int_equal(h.status, 301);
}

static void test_content_length_and_hop_by_hop(void **state)
{
    struct um_cgi_head h;
    assert_int_equal(parse("Content-Type: a/b\nContent-Length: 12\nConnection: close\n"
                           "Transfer-Encoding: chunked\n\n",
                           &h),
                     UM_OK);
    assert_int_equal(h.content_length, 12);
    assert_int_equal(h.num_headers, 1);
    assert_int_equal(parse("Content-Type: a/b\nContent-Length: 1x\n\n", &h), UM_ERR);
    assert_int_equal(parse("Content-Type: a/b\nContent-Length: 1\nContent-Length: 2\n\n", &h),
                     UM_ERR);
}

static void test_incomplete(void **state)
{
    struct um_cgi_head h;
    assert_int_equal(parse("", &h), UM_AGAIN);
    assert_int_equal(parse("Content-Type: text/plain\n", &h), UM_AGAIN);
    assert_int_equal(parse("Content-Type: text/plain\r\n\r", &h), UM_AGAIN);
    assert_int_equal(parse("Content-Ty", &h), UM_AGAIN);
}

static void test_garbage(void **state)
{
    struct um_cgi_head h;
    assert_int_equal(parse("this is not a header\n\n", &h), UM_ERR);
    assert_int_equal(parse("\x89PNG\r\n", &h), UM_ERR);
    assert_int_equal(parse("\x89", &h), UM_ERR); /* fails before the line ends */
    assert_int_equal(parse(": empty name\n\n", &h), UM_ERR);
    assert_int_equal(parse("Name : space before colon\n\n", &h), UM_ERR);
    assert_int_equal(parse("X-Ctl: a\x01 b\nContent-Type: a/b\n\n", &h), UM_ERR);
    assert_int_equal(parse("Status: 20\n\n", &h), UM_ERR);
    assert_int_equal(parse("Status: 100 Continue\n\n", &h), UM_ERR);
    assert_int_equal(parse("Status: 600 Big\n\n", &h), UM_ERR);
    assert_int_equal(parse("Status: 200x\n\n", &h), UM_ERR);
    assert_int_equal(parse("Status: 200\nStatus: 201\n\n", &h), UM_ERR);
    /* A head that says nothing the server could send. */
    assert_int_equal(parse("X-Only: this\n\n", &h), UM_ERR);
    assert_int_equal(parse("\n", &h), UM_ERR);
}

static void test_too_many_fields(void **state)
{
    char buf[8192];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "Content-Type: a/b\n");
    for (int i = 0; i < 70; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-%d: v\n", i);
    snprintf(buf + n, sizeof(buf) - n, "\n");
    struct um_cgi_head h;
    assert_int_equal(parse(buf, &h), UM_ERR);
}

static void test_query_args(void **state)
{
    const char *q = "foo+bar+--me%202";
    char *p = guard_put(&g, q, strlen(q));
    char **a = um_cgi_query_args((um_str){p, strlen(q)}, 64);
    assert_non_null(a);
    assert_string_equal(a[0], "foo");
    assert_string_equal(a[1], "bar");
    assert_string_equal(a[2], "--me 2");
    assert_null(a[3]);
    um_cgi_free_args(a);

    /* An '=' makes it a form, not a search string; bad escapes, NUL and too many words
     * give no arguments at all. */
    const char *none[] = {"", "a=b", "x+y=z", "bad%2", "bad%zz", "nul%00", "a+b+c+d+e"};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        p = guard_put(&g, none[i], strlen(none[i]));
        assert_null(um_cgi_query_args((um_str){p, strlen(none[i])}, 4));
    }
    /* Empty words are kept: "a++b" is three arguments. */
    p = guard_put(&g, "a++b%3d", 7);
    a = um_cgi_query_args((um_str){p, 7}, 64);
    assert_non_null(a);
    assert_string_equal(a[0], "a");
    assert_string_equal(a[1], "");
    assert_string_equal(a[2], "b=");
    assert_null(a[3]);
    um_cgi_free_args(a);
}

int main(void)
{
    guard_init(&g, 16384, GUARD_AFTER);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_document),
        cmocka_unit_test(test_bare_lf_and_status),
        cmocka_unit_test(test_redirects),
        cmocka_unit_test(test_content_length_and_hop_by_hop),
        cmocka_unit_test(test_incomplete),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_too_many_fields),
        cmocka_unit_test(test_query_args),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return r;
}
