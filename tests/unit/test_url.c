/* um_url_path_canon: the path that routes are matched against. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guard.h"
#include "umbra/httpfield.h"

static struct guard g;

static um_str guard(const char *s, size_t n)
{
    return (um_str){guard_put(&g, s, n), n};
}

static void canon_is(const char *in, const char *want)
{
    char out[256];
    size_t len = 0;
    um_str s = guard(in, strlen(in));
    if (!um_url_path_canon(s, out, sizeof(out), &len))
        fail_msg("refused \"%s\", want \"%s\"", in, want);
    if (len != strlen(want) || strcmp(out, want) != 0)
        fail_msg("\"%s\" -> \"%s\", want \"%s\"", in, out, want);
}

static void canon_refused(const char *in)
{
    char out[256];
    size_t len;
    um_str s = guard(in, strlen(in));
    if (um_url_path_canon(s, out, sizeof(out), &len))
        fail_msg("\"%s\" accepted as \"%s\"", in, out);
}

static void test_unreserved_decoded(void **state)
{
    (void)state;
    canon_is("/stat%69c/a.txt", "/static/a.txt");
    canon_is("/%41%7a%2D%2e%5F%7E", "/Az-._~");
    /* Reserved and other bytes stay escaped, with upper-case hex. */
    canon_is("/a%2fb", "/a%2Fb");
}

static void test_reserved_kept(void **state)
{
    (void)state;
    canon_is("/a%20b", "/a%20b");
    canon_is("/a%3fb", "/a%3Fb");
    canon_is("/%25%32%65", "/%252e"); /* %25 stays: no second decoding */
}

static void test_dot_segments(void **state)
{
    (void)state;
    canon_is("/", "/");
    canon_is("/a/./b", "/a/b");
    canon_is("/a/b/../c", "/a/c");
    canon_is("/a/..", "/");
    canon_is("/a/b/..", "/a/");
    canon_is("/a/.", "/a/");
    canon_is("/a/%2e%2e/b", "/b");
    canon_is("/a/.%2E/b", "/b");
    canon_is("//a///b//", "/a/b/");
    canon_is("/a/..%2fb", "/a/..%2Fb"); /* not a dot segment */
}

static void test_refused(void **state)
{
    (void)state;
    canon_refused("/..");
    canon_refused("/../a");
    canon_refused("/a/../../b");
    canon_refused("/%2e%2e/secret");
    canon_refused("/a%");
    canon_refused("/a%4");
    canon_refused("/a%zz");
    canon_refused("relative");
    canon_refused("");
}

static void check_host(const char *authority, const char *want)
{
    um_str a = {authority, authority ? strlen(authority) : 0};
    um_str h = um_url_host(a);
    assert_int_equal(h.len, strlen(want));
    if (h.len)
        assert_memory_equal(h.base, want, h.len);
}

static void test_host_without_port(void **state)
{
    (void)state;
    check_host("example.com:8080", "example.com");
    check_host("Example.COM", "Example.COM");
    check_host("[::1]:443", "[::1]");
    check_host("[::1]", "[::1]");
    check_host("127.0.0.1:80", "127.0.0.1");
    check_host("", "");
    check_host(NULL, ""); /* HTTP/1.0 without Host */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_without_port),
        cmocka_unit_test(test_unreserved_decoded),
        cmocka_unit_test(test_reserved_kept),
        cmocka_unit_test(test_dot_segments),
        cmocka_unit_test(test_refused),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
