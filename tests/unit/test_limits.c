/* limits.h: the token bucket's arithmetic, Retry-After's rounding, the striped store as
 * a dictionary (values, add, incr, TTL, eviction of the least recently used, threads
 * adding up) and as a rate limit's buckets, and the registry a reload finds its stores
 * in. Time is a parameter: nothing sleeps. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/limits/store.c"

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

/* ---------------------------------------------------------------- the bucket */

static void test_bucket_burst_then_rate(void **st)
{
    (void)st;
    double tokens = 5, last = 100; /* a new key: full */
    int passed = 0;
    for (int i = 0; i < 20; i++)
        if (um_limit_bucket_take(&tokens, &last, 100, 2, 5) == 0) passed++;
    assert_int_equal(passed, 5);
    /* Then 2 a second: over 10 s, asked 100 times a second, 20 more pass. */
    passed = 0;
    for (int i = 1; i <= 1000; i++)
        if (um_limit_bucket_take(&tokens, &last, 100 + i * 0.01, 2, 5) == 0) passed++;
    assert_int_equal(passed, 20);
    /* Idle for long: refilled to the burst, never past it. */
    passed = 0;
    for (int i = 0; i < 20; i++)
        if (um_limit_bucket_take(&tokens, &last, 1000, 2, 5) == 0) passed++;
    assert_int_equal(passed, 5);
}

static void test_bucket_wait(void **st)
{
    (void)st;
    double tokens = 1, last = 0;
    assert_true(um_limit_bucket_take(&tokens, &last, 0, 0.5, 1) == 0);
    /* Empty at rate 0.5/s: a token in 2 s; after 1.5 s, in 0.5 s. */
    double w = um_limit_bucket_take(&tokens, &last, 0, 0.5, 1);
    assert_true(w > 1.999 && w < 2.001);
    w = um_limit_bucket_take(&tokens, &last, 1.5, 0.5, 1);
    assert_true(w > 0.499 && w < 0.501);
    assert_true(um_limit_bucket_take(&tokens, &last, 2.0, 0.5, 1) == 0);
    /* A clock that steps back adds nothing. */
    w = um_limit_bucket_take(&tokens, &last, 1.0, 0.5, 1);
    assert_true(w > 1.999 && w < 2.001);
}

static void test_retry_after(void **st)
{
    (void)st;
    assert_int_equal(um_limit_retry_after(0), 1);
    assert_int_equal(um_limit_retry_after(0.01), 1);
    assert_int_equal(um_limit_retry_after(1.0), 1);
    assert_int_equal(um_limit_retry_after(1.01), 2);
    assert_int_equal(um_limit_retry_after(99.5), 100);
}

static void test_limit_take_per_key(void **st)
{
    (void)st;
    struct um_limit_def d = {.name = "t", .rate = 1, .burst = 2, .size = 1 << 20};
    d.store = um_store_create(d.size);
    assert_true(um_limit_take(&d, S("a"), 10) == 0);
    assert_true(um_limit_take(&d, S("a"), 10) == 0);
    assert_true(um_limit_take(&d, S("a"), 10) > 0);
    assert_true(um_limit_take(&d, S("b"), 10) == 0); /* a bucket of its own */
    assert_true(um_limit_take(&d, S("a"), 11) == 0); /* a second later: one token */
    struct um_store_stats s;
    um_store_stats(d.store, &s);
    assert_int_equal(s.passed, 4);
    assert_int_equal(s.limited, 1);
    assert_int_equal(s.entries, 2);
    um_store_destroy(d.store);
}

/* ---------------------------------------------------------------- the dictionary */

static struct um_shared_value str_value(const char *s)
{
    return (struct um_shared_value){.type = UM_SHARED_STR, .str = S(s)};
}

static void test_dict_values(void **st)
{
    (void)st;
    struct um_store *s = um_store_create(1 << 20);
    char buf[64];
    size_t full;
    struct um_shared_value v, sv = str_value("hello");
    assert_int_equal(um_shared_set(s, S("k"), &sv, 0, 0), UM_SHARED_OK);
    assert_true(um_shared_get(s, S("k"), 0, &v, buf, sizeof buf, &full));
    assert_int_equal(v.type, UM_SHARED_STR);
    assert_int_equal(full, 5);
    assert_memory_equal(v.str.base, "hello", 5);
    /* A shorter buffer is filled, and told the length. */
    assert_true(um_shared_get(s, S("k"), 0, &v, buf, 2, &full));
    assert_int_equal(v.str.len, 2);
    assert_int_equal(full, 5);
    /* Replaced by a number, then a boolean. */
    struct um_shared_value nv = {.type = UM_SHARED_NUM, .num = 2.5};
    assert_int_equal(um_shared_set(s, S("k"), &nv, 0, 0), UM_SHARED_OK);
    assert_true(um_shared_get(s, S("k"), 0, &v, buf, sizeof buf, NULL));
    assert_int_equal(v.type, UM_SHARED_NUM);
    assert_true(v.num == 2.5);
    struct um_shared_value bv = {.type = UM_SHARED_BOOL, .num = 7};
    assert_int_equal(um_shared_set(s, S("k"), &bv, 0, 0), UM_SHARED_OK);
    assert_true(um_shared_get(s, S("k"), 0, &v, buf, sizeof buf, NULL));
    assert_int_equal(v.type, UM_SHARED_BOOL);
    assert_true(v.num == 1);
    /* add only when absent. */
    assert_int_equal(um_shared_add(s, S("k"), &sv, 0, 0), UM_SHARED_EXISTS);
    assert_int_equal(um_shared_add(s, S("k2"), &sv, 0, 0), UM_SHARED_OK);
    /* incr: init + n when absent; refused on a string. */
    double out = 0;
    assert_int_equal(um_shared_incr(s, S("c"), 1, 10, 0, 0, &out), UM_SHARED_OK);
    assert_true(out == 11);
    assert_int_equal(um_shared_incr(s, S("c"), -3, 10, 0, 0, &out), UM_SHARED_OK);
    assert_true(out == 8);
    assert_int_equal(um_shared_incr(s, S("k2"), 1, 0, 0, 0, &out), UM_SHARED_NOT_NUM);
    /* delete; setting nothing deletes too. */
    assert_true(um_shared_delete(s, S("k2"), 0));
    assert_false(um_shared_delete(s, S("k2"), 0));
    struct um_shared_value none = {.type = UM_SHARED_NONE};
    assert_int_equal(um_shared_set(s, S("c"), &none, 0, 0), UM_SHARED_OK);
    assert_false(um_shared_get(s, S("c"), 0, &v, buf, sizeof buf, NULL));
    um_store_destroy(s);
}

static void test_dict_ttl(void **st)
{
    (void)st;
    struct um_store *s = um_store_create(1 << 20);
    struct um_shared_value v, sv = str_value("v");
    char buf[8];
    assert_int_equal(um_shared_set(s, S("t"), &sv, 5, 100), UM_SHARED_OK);
    assert_true(um_shared_get(s, S("t"), 104.9, &v, buf, sizeof buf, NULL));
    assert_false(um_shared_get(s, S("t"), 105, &v, buf, sizeof buf, NULL));
    /* An expired entry is absent for add and incr as well. */
    assert_int_equal(um_shared_set(s, S("t"), &sv, 5, 100), UM_SHARED_OK);
    assert_int_equal(um_shared_add(s, S("t"), &sv, 0, 106), UM_SHARED_OK);
    /* Deleting an expired entry finds nothing. */
    assert_int_equal(um_shared_set(s, S("e"), &sv, 1, 100), UM_SHARED_OK);
    assert_false(um_shared_delete(s, S("e"), 101));
    double out;
    assert_int_equal(um_shared_incr(s, S("n"), 1, 0, 2, 200, &out), UM_SHARED_OK);
    assert_int_equal(um_shared_incr(s, S("n"), 1, 0, 2, 201, &out), UM_SHARED_OK);
    assert_true(out == 2);
    assert_int_equal(um_shared_incr(s, S("n"), 1, 0, 2, 202.5, &out), UM_SHARED_OK);
    assert_true(out == 1);
    um_store_destroy(s);
}

static void count_key(void *arg, um_str key)
{
    (void)key;
    (*(size_t *)arg)++;
}

static void test_dict_eviction(void **st)
{
    (void)st;
    struct um_store *s = um_store_create(16 << 10);
    struct um_shared_value sv = str_value("xxxxxxxxxxxxxxxxxxxx"), v;
    char key[32], buf[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "key%d", i);
        assert_int_equal(um_shared_set(s, S(key), &sv, 0, 0), UM_SHARED_OK);
        /* Used after every write: always the most recent of its stripe, never dropped. */
        assert_true(i == 0 || um_shared_get(s, S("key0"), 0, &v, buf, sizeof buf, NULL));
    }
    struct um_store_stats stats;
    um_store_stats(s, &stats);
    assert_true(stats.bytes <= 16 << 10);
    assert_true(stats.entries > 10 && stats.entries < 5000);
    assert_int_equal(stats.evicted + stats.entries, 5000);
    size_t n = 0;
    assert_int_equal(um_shared_keys(s, 0, 0, count_key, &n), stats.entries);
    assert_int_equal(n, stats.entries);
    n = 0;
    assert_int_equal(um_shared_keys(s, 7, 0, count_key, &n), 7);
    assert_true(um_shared_get(s, S("key4999"), 0, &v, buf, sizeof buf, NULL));
    assert_false(um_shared_get(s, S("key1"), 0, &v, buf, sizeof buf, NULL));
    /* A value larger than a stripe's share never fits. */
    char big[1024];
    memset(big, 'b', sizeof big);
    struct um_shared_value bigv = {.type = UM_SHARED_STR, .str = {big, sizeof big}};
    assert_int_equal(um_shared_set(s, S("big"), &bigv, 0, 0), UM_SHARED_TOO_BIG);
    um_store_destroy(s);
}

struct incr_arg {
    struct um_store *s;
    int n;
};

static void *incr_thread(void *p)
{
    struct incr_arg *a = p;
    double out;
    char key[16];
    for (int i = 0; i < a->n; i++) {
        snprintf(key, sizeof key, "k%d", i % 8);
        um_shared_incr(a->s, S(key), 1, 0, 0, 0, &out);
    }
    return NULL;
}

static void test_dict_threads_add_up(void **st)
{
    (void)st;
    struct incr_arg a = {um_store_create(1 << 20), 20000};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, incr_thread, &a);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    double sum = 0;
    char key[16], buf[8];
    for (int i = 0; i < 8; i++) {
        struct um_shared_value v;
        snprintf(key, sizeof key, "k%d", i);
        assert_true(um_shared_get(a.s, S(key), 0, &v, buf, sizeof buf, NULL));
        sum += v.num;
    }
    assert_true(sum == 4 * 20000);
    um_store_destroy(a.s);
}

/* ---------------------------------------------------------------- the registry */

static void test_registry_keeps_unchanged(void **st)
{
    (void)st;
    /* The running snapshot's reference, then the reload's. */
    struct um_store *a = um__limits_store_ref(UM__STORE_LIMIT, "api", 1 << 20, 10, 20, 0, NULL);
    struct um_store *b = um__limits_store_ref(UM__STORE_LIMIT, "api", 1 << 20, 10, 20, 0, NULL);
    assert_ptr_equal(a, b);
    /* Another rate, kind, or key: another store. */
    struct um_store *c = um__limits_store_ref(UM__STORE_LIMIT, "api", 1 << 20, 11, 20, 0, NULL);
    struct um_store *d = um__limits_store_ref(UM__STORE_SHARED, "api", 1 << 20, 0, 0, 0, NULL);
    struct um_store *e = um__limits_store_ref(UM__STORE_LIMIT, "api", 1 << 20, 10, 20, 2, "x-k");
    assert_ptr_not_equal(a, c);
    assert_ptr_not_equal(a, d);
    assert_ptr_not_equal(a, e);
    /* What a snapshot stored survives the other's release. */
    struct um_shared_value sv = str_value("kept"), v;
    char buf[8];
    assert_int_equal(um_shared_set(a, S("x"), &sv, 0, 0), UM_SHARED_OK);
    um__limits_store_unref(a);
    assert_true(um_shared_get(b, S("x"), 0, &v, buf, sizeof buf, NULL));
    um__limits_store_unref(b);
    um__limits_store_unref(c);
    um__limits_store_unref(d);
    um__limits_store_unref(e);
    assert_null(registry);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_burst_then_rate),
        cmocka_unit_test(test_bucket_wait),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_limit_take_per_key),
        cmocka_unit_test(test_dict_values),
        cmocka_unit_test(test_dict_ttl),
        cmocka_unit_test(test_dict_eviction),
        cmocka_unit_test(test_dict_threads_add_up),
        cmocka_unit_test(test_registry_keeps_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
