/* The pure parts of large objects in slices (src/cache/slice.c): slice keys, the
 * Umbra-Slice-Range / Content-Range byte range and the purge tag. Each parsed input sits
 * right before a guard page, so an over-read crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cache/internal.h"
#include "cache/store_internal.h"
#include "guard.h"

static struct guard g;

static um_str placed(const char *s)
{
    size_t n = strlen(s);
    return (um_str){guard_put(&g, s, n), n};
}

static void test_key_round_trip(void **state)
{
    (void)state;
    char out[128];
    size_t n = um__cache_slice_key(UM_STR("a.test /v.mp4?x=1"), 1048576, 4095, out, sizeof out);
    assert_int_equal(n, strlen("a.test /v.mp4?x=1 umbra-slice:1048576:4095"));
    assert_memory_equal(out, "a.test /v.mp4?x=1 umbra-slice:1048576:4095", n);
    um_str base;
    uint64_t size, k;
    out[n] = '\0';
    assert_true(um__cache_slice_key_parse(placed(out), &base, &size, &k));
    assert_int_equal(base.len, strlen("a.test /v.mp4?x=1"));
    assert_memory_equal(base.base, "a.test /v.mp4?x=1", base.len);
    assert_int_equal(size, 1048576);
    assert_int_equal(k, 4095);
    n = um__cache_slice_key(UM_STR("k"), 18446744073709551615ull, 0, out, sizeof out);
    assert_int_equal(n, strlen("k umbra-slice:18446744073709551615:0"));
    assert_memory_equal(out, "k umbra-slice:18446744073709551615:0", n + 1);
    /* Too small a buffer: nothing. */
    assert_int_equal(um__cache_slice_key(UM_STR("a.test /v"), 1, 0, out, 10), 0);
    /* The last mark counts (a key may hold the text before it). */
    assert_true(
        um__cache_slice_key_parse(placed("h / umbra-slice:1:2 umbra-slice:3:4"), &base, &size, &k));
    assert_int_equal(base.len, strlen("h / umbra-slice:1:2"));
    assert_int_equal(size, 3);
    assert_int_equal(k, 4);
}

static void test_key_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "a.test /v.mp4",
        "a.test /v umbra-slice:",
        "a.test /v umbra-slice:1",
        "a.test /v umbra-slice:1:",
        "a.test /v umbra-slice::1",
        "a.test /v umbra-slice:0:1", /* no slice of 0 bytes */
        "a.test /v umbra-slice:1:2x",
        "a.test /v umbra-slice:99999999999999999999:1",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        um_str base;
        uint64_t size, k;
        if (um__cache_slice_key_parse(placed(bad[i]), &base, &size, &k))
            fail_msg("accepted \"%s\"", bad[i]);
    }
}

static void test_range(void **state)
{
    (void)state;
    uint64_t a, b, c;
    assert_true(um__cache_slice_range_parse(placed("0-1048575/67108864"), &a, &b, &c));
    assert_int_equal(a, 0);
    assert_int_equal(b, 1048575);
    assert_int_equal(c, 67108864);
    assert_true(um__cache_slice_range_parse(placed("999-999/1000"), &a, &b, &c));
    static const char *const bad[] = {"",     "1-0/5",  "0-5/5", "0-4", "0-4/",
                                      "-4/5", "0-4/5 ", "0-4/x", "*/5", "0-99999999999999999999/5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (um__cache_slice_range_parse(placed(bad[i]), &a, &b, &c))
            fail_msg("accepted \"%s\"", bad[i]);
}

static void test_tag(void **state)
{
    (void)state;
    char t1[UM_CACHE_SLICE_TAG_LEN], t2[UM_CACHE_SLICE_TAG_LEN], t3[UM_CACHE_SLICE_TAG_LEN];
    um__cache_slice_tag(UM_STR("a.test /v.mp4"), t1);
    um__cache_slice_tag(UM_STR("a.test /v.mp4"), t2);
    um__cache_slice_tag(UM_STR("a.test /v.mp5"), t3);
    assert_string_equal(t1, t2);
    assert_string_not_equal(t1, t3);
    assert_int_equal(strlen(t1), strlen("umbra-slice-") + 16);
    assert_memory_equal(t1, "umbra-slice-", 12);
    /* A tag the cache keeps: no spaces, within its length limit. */
    assert_null(strchr(t1, ' '));
    assert_true(strlen(t1) < UM_CACHE_TAG_MAX_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_round_trip),
        cmocka_unit_test(test_key_refused),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_tag),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
