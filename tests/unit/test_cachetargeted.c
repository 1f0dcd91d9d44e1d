/* Unit tests for src/cache/policy_targeted.c: targeted cache-control fields (RFC 9213),
 * Structured Field Dictionaries (RFC 8941) of Cache-Control directives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "umbra/cachepolicy.h"

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

static struct um_header H[8];

/* Parses "CDN-Cache-Control" lines (NULL-terminated) into cc; returns the result. */
static bool parse(struct um_cc *cc, const char *const *lines)
{
    size_t n = 0;
    for (; lines[n] != NULL; n++)
        H[n] = (struct um_header){S("CDN-Cache-Control"), S(lines[n])};
    return um_cc_parse_targeted(cc, H, n, S("cdn-cache-control"));
}

#define LINES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_directives(void **state)
{
    (void)state;
    struct um_cc cc;
    assert_true(parse(&cc, LINES("max-age=600, s-maxage=30, public, must-revalidate, "
                                 "stale-while-revalidate=5;x=1, stale-if-error=7, immutable")));
    assert_int_equal(cc.max_age, 600);
    assert_int_equal(cc.s_maxage, 30);
    assert_true(cc.public_);
    assert_true(cc.must_revalidate);
    assert_true(cc.immutable);
    assert_int_equal(cc.stale_while_revalidate, 5);
    assert_int_equal(cc.stale_if_error, 7);
    assert_false(cc.no_store);
    assert_true(parse(&cc, LINES("no-store")));
    assert_true(cc.no_store);
    assert_true(parse(&cc, LINES("no-store=?0, max-age=1")));
    assert_false(cc.no_store);
    /* The last member of a name wins (RFC 8941 3.2). */
    assert_true(parse(&cc, LINES("max-age=600, max-age=5")));
    assert_int_equal(cc.max_age, 5);
    /* Lines combine. */
    assert_true(parse(&cc, LINES("public", "max-age=9")));
    assert_true(cc.public_);
    assert_int_equal(cc.max_age, 9);
    /* Large numbers saturate at 2^31. */
    assert_true(parse(&cc, LINES("max-age=999999999999999")));
    assert_int_equal(cc.max_age, UM_DELTA_MAX);
}

static void test_wrong_types_are_absent(void **state)
{
    (void)state;
    struct um_cc cc;
    assert_true(parse(&cc, LINES("max-age=1.5, s-maxage=\"3\", stale-if-error=-1, public=2")));
    assert_int_equal(cc.max_age, -1);
    assert_int_equal(cc.s_maxage, -1);
    assert_int_equal(cc.stale_if_error, -1);
    assert_false(cc.public_);
    assert_true(cc.present);
}

static void test_qualified(void **state)
{
    (void)state;
    struct um_cc cc;
    assert_true(parse(&cc, LINES("private=\"set-cookie, x-a\", no-cache=(\"x-b\")")));
    assert_false(cc.private_);
    assert_int_equal(cc.private_nfields, 2);
    assert_true(um_cc_lists_field(&cc, S("Set-Cookie")));
    assert_true(um_cc_lists_field(&cc, S("x-a")));
    assert_true(um_cc_lists_field(&cc, S("X-B")));
    assert_false(cc.no_cache);
    /* Not a clean list of names: the unqualified directive. */
    assert_true(parse(&cc, LINES("private=\"a b\", no-cache=(\"x\" 1)")));
    assert_true(cc.private_);
    assert_true(cc.no_cache);
}

static void test_invalid_fields(void **state)
{
    (void)state;
    struct um_cc cc;
    static const char *const bad[] = {
        "MAX-AGE=1", "max-age=1,", ",max-age=1", "max-age=1 public", "max-age=\"1",
        "max-age=1,,public", "max-age=1234567890123456", "max-age=1.2345", "max-age=?2",
        "max-age=:@@:", "max-age=(\"a\"", "max-age=", "9max-age", "max-age=1;",
        "max-age=\"\\x\"", "max-age=\"\x01\"",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        H[0] = (struct um_header){S("CDN-Cache-Control"), S(bad[i])};
        assert_false(um_cc_parse_targeted(&cc, H, 1, S("CDN-Cache-Control")));
        assert_false(cc.present);
        assert_int_equal(cc.max_age, -1);
    }
    /* One bad line spoils the field. */
    assert_false(parse(&cc, LINES("max-age=600", "PUBLIC")));
    /* Absent or empty: not used. */
    assert_false(parse(&cc, LINES("")));
    assert_false(um_cc_parse_targeted(&cc, H, 0, S("CDN-Cache-Control")));
}

static void test_meta_target(void **state)
{
    (void)state;
    struct um_header h[4] = {
        {S("Cache-Control"), S("no-store")},
        {S("Expires"), S("Tue, 14 Nov 2023 22:13:20 GMT")},
        {S("CDN-Cache-Control"), S("max-age=600")},
        {S("Umbra-Cache-Control"), S("MAX-AGE=1")},
    };
    um_str names[2] = {S("Umbra-Cache-Control"), S("CDN-Cache-Control")};
    struct um_cache_policy pol;
    um_cache_policy_init(&pol);
    struct um_resp_meta m;
    um_resp_meta_scan(&m, 200, h, 4);
    assert_false(um_resp_meta_target(&m, &pol)); /* none configured */
    assert_true(m.cc.no_store);
    pol.targeted = names;
    pol.num_targeted = 2;
    assert_true(um_resp_meta_target(&m, &pol)); /* Umbra's fails to parse: CDN's */
    assert_true(um_str_eq(m.targeted, "CDN-Cache-Control"));
    assert_false(m.cc.no_store);
    assert_int_equal(m.cc.max_age, 600);
    assert_false(m.has_expires);
    struct um_req_meta q;
    um_req_meta_scan(&q, UM_METHOD_GET, NULL, 0);
    assert_int_equal(um_cache_storable(&q, &m, &pol, 1700000000), UM_STORABLE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directives),
        cmocka_unit_test(test_wrong_types_are_absent),
        cmocka_unit_test(test_qualified),
        cmocka_unit_test(test_invalid_fields),
        cmocka_unit_test(test_meta_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
