/* The wire form of a purge (umbra/purge.h): what peers and the Redis bus carry. Each
 * decoded input sits right before a guard page, so an over-read crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guard.h"
#include "umbra/purge.h"

static struct guard g;

static bool decode(const char *s, struct um_purge *p, um_str *tags, size_t max)
{
    size_t n = strlen(s);
    return um_purge_decode(guard_put(&g, s, n), n, p, tags, max);
}

static void encoded_is(const struct um_purge *p, const char *want)
{
    struct um_buf b;
    um_buf_init(&b);
    assert_true(um_purge_encode(p, &b));
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.base, want, b.len);
    um_buf_dispose(&b);
}

static void test_round_trip(void **state)
{
    (void)state;
    um_str tags[8];
    struct um_purge p;
    struct um_purge url = {.kind = UM_PURGE_URL, .soft = true, .key = UM_STR("a.test /x y?q")};
    encoded_is(&url, "soft key a.test /x y?q");
    assert_true(decode("soft key a.test /x y?q", &p, tags, 8));
    assert_int_equal(p.kind, UM_PURGE_URL);
    assert_true(p.soft);
    assert_true(um_str_eq(p.key, "a.test /x y?q"));

    struct um_purge pre = {.kind = UM_PURGE_PREFIX, .host = UM_STR(""), .prefix = UM_STR("/p ")};
    encoded_is(&pre, "hard prefix  /p ");
    assert_true(decode("hard prefix  /p ", &p, tags, 8));
    assert_int_equal(p.kind, UM_PURGE_PREFIX);
    assert_false(p.soft);
    assert_int_equal(p.host.len, 0);
    assert_true(um_str_eq(p.prefix, "/p "));
    assert_true(decode("hard prefix b.test /img/", &p, tags, 8));
    assert_true(um_str_eq(p.host, "b.test"));
    assert_true(um_str_eq(p.prefix, "/img/"));

    um_str t[2] = {UM_STR("product-17"), UM_STR("home")};
    struct um_purge tp = {.kind = UM_PURGE_TAGS, .soft = true, .tags = t, .ntags = 2};
    encoded_is(&tp, "soft tags product-17 home");
    assert_true(decode("soft tags product-17 home", &p, tags, 8));
    assert_int_equal(p.kind, UM_PURGE_TAGS);
    assert_int_equal(p.ntags, 2);
    assert_true(um_str_eq(p.tags[0], "product-17"));
    assert_true(um_str_eq(p.tags[1], "home"));
    /* More tags than room: the first max are kept. */
    assert_true(decode("hard tags a b c", &p, tags, 2));
    assert_int_equal(p.ntags, 2);
}

static void test_refused(void **state)
{
    (void)state;
    um_str tags[8];
    struct um_purge p;
    const char *bad[] = {"", "soft", "soft key", "soft key ", "medium key a /", "hard url a /",
                         "hard prefix nohost", "hard tags", "hard tags   ", "hard key a\r\n/x",
                         "NODE\nU\n0\n\na /x"};
    for (size_t i = 0; i < UM_NELEMS(bad); i++)
        if (decode(bad[i], &p, tags, 8))
            fail_msg("accepted \"%s\"", bad[i]);
    struct um_buf b;
    um_buf_init(&b);
    um_str sp[1] = {UM_STR("a b")};
    struct um_purge cant[] = {
        {.kind = UM_PURGE_URL, .key = UM_STR("a /x\n")},
        {.kind = UM_PURGE_PREFIX, .host = UM_STR("a b"), .prefix = UM_STR("/")},
        {.kind = UM_PURGE_TAGS, .tags = sp, .ntags = 1},
        {.kind = UM_PURGE_TAGS, .tags = sp, .ntags = 0},
    };
    for (size_t i = 0; i < UM_NELEMS(cant); i++)
        assert_false(um_purge_encode(&cant[i], &b));
    assert_int_equal(b.len, 0);
    um_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
