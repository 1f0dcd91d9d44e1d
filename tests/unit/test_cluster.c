/* The cluster's pure parts: rendezvous owners (balance, the ~1/N of keys a membership
 * change moves, the next owner when one is out) and the Umbra-Peer signature. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "umbra/cluster.h"

#define KEYS 20000
#define MAXM 16

static char names[MAXM][32];
static um_str members[MAXM];

static void make_members(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int l = snprintf(names[i], sizeof names[i], "http://10.0.0.%zu:80", i + 1);
        members[i] = (um_str){names[i], (size_t)l};
    }
}

static um_str key_of(size_t k, char *buf)
{
    int l = snprintf(buf, 64, "cdn.example /objects/%zu?v=1", k);
    return (um_str){buf, (size_t)l};
}

static void test_owners_are_balanced(void **state)
{
    (void)state;
    make_members(5);
    size_t count[5] = {0};
    char buf[64];
    for (size_t k = 0; k < KEYS; k++) {
        int o = um_cluster_owner(members, 5, key_of(k, buf), NULL, NULL);
        assert_in_range(o, 0, 4);
        /* The same answer every time. */
        assert_int_equal(o, um_cluster_owner(members, 5, key_of(k, buf), NULL, NULL));
        count[o]++;
    }
    for (size_t i = 0; i < 5; i++)
        if (count[i] < KEYS / 5 * 85 / 100 || count[i] > KEYS / 5 * 115 / 100)
            fail_msg("member %zu owns %zu of %d keys (want about %d)", i, count[i], KEYS, KEYS / 5);
}

static void test_removing_a_member_moves_only_its_keys(void **state)
{
    (void)state;
    make_members(8);
    char buf[64];
    size_t moved = 0;
    for (size_t k = 0; k < KEYS; k++) {
        um_str key = key_of(k, buf);
        int before = um_cluster_owner(members, 8, key, NULL, NULL);
        /* Member 7 (the last) leaves. */
        int after = um_cluster_owner(members, 7, key, NULL, NULL);
        if (before != 7)
            assert_int_equal(before, after); /* nobody else's key moves */
        else
            moved++;
    }
    /* About 1/8 of the keys (those it owned) moved. */
    if (moved < KEYS / 8 * 80 / 100 || moved > KEYS / 8 * 120 / 100)
        fail_msg("%zu of %d keys moved (want about %d)", moved, KEYS, KEYS / 8);
}

static void test_adding_a_member_moves_about_one_nth(void **state)
{
    (void)state;
    make_members(10);
    char buf[64];
    size_t moved = 0;
    for (size_t k = 0; k < KEYS; k++) {
        um_str key = key_of(k, buf);
        int before = um_cluster_owner(members, 9, key, NULL, NULL);
        int after = um_cluster_owner(members, 10, key, NULL, NULL);
        if (before != after) {
            assert_int_equal(after, 9); /* a key that moves goes to the newcomer */
            moved++;
        }
    }
    if (moved < KEYS / 10 * 80 / 100 || moved > KEYS / 10 * 120 / 100)
        fail_msg("%zu of %d keys moved (want about %d)", moved, KEYS, KEYS / 10);
}

static bool not_down(void *arg, size_t i)
{
    return i != *(size_t *)arg;
}

static void test_member_out_gives_the_next_owner(void **state)
{
    (void)state;
    make_members(6);
    char buf[64];
    for (size_t k = 0; k < 2000; k++) {
        um_str key = key_of(k, buf);
        size_t down = (size_t)um_cluster_owner(members, 6, key, NULL, NULL);
        int next = um_cluster_owner(members, 6, key, not_down, &down);
        assert_int_not_equal(next, (int)down);
        /* The same as the owner among the others: every node agrees on it. */
        um_str others[6];
        int map[6];
        size_t n = 0;
        for (size_t i = 0; i < 6; i++)
            if (i != down) {
                map[n] = (int)i;
                others[n++] = members[i];
            }
        assert_int_equal(next, map[um_cluster_owner(others, n, key, NULL, NULL)]);
    }
    size_t none = 0;
    assert_int_equal(um_cluster_owner(members, 1, key_of(1, buf), not_down, &none), -1);
}

static void test_signature_round_trip(void **state)
{
    (void)state;
    struct um_cluster_mac *secret = um_cluster_mac_create("0123456789abcdef-secret");
    struct um_cluster_mac *other = um_cluster_mac_create("another-secret-0000");
    um_str key = UM_STR("cdn.example /a?b=1 \x01\xff");
    char v[512], out[256];
    size_t n =
        um_cluster_sign(secret, UM_STR("GET"), UM_STR("/a?b=1"), key, 1700000000, v, sizeof v);
    assert_true(n > 0 && n == strlen(v));
    size_t kl = 0;
    assert_true(um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){v, n},
                                  1700000000 + 5, out, sizeof out, &kl));
    assert_int_equal(kl, key.len);
    assert_memory_equal(out, key.base, kl);
    /* Another secret, method, target, or too late or too early: refused. */
    assert_false(um_cluster_verify(other, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){v, n},
                                   1700000000, out, sizeof out, &kl));
    assert_false(um_cluster_verify(secret, UM_STR("PURGE"), UM_STR("/a?b=1"), (um_str){v, n},
                                   1700000000, out, sizeof out, &kl));
    assert_false(um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=2"), (um_str){v, n},
                                   1700000000, out, sizeof out, &kl));
    assert_false(um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){v, n},
                                   1700000000 + UM_CLUSTER_WINDOW + 1, out, sizeof out, &kl));
    assert_false(um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){v, n},
                                   1700000000 - UM_CLUSTER_WINDOW - 1, out, sizeof out, &kl));
    /* A key too large for the caller's buffer. */
    assert_false(um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){v, n},
                                   1700000000, out, 4, &kl));
    /* Any byte changed in the value: refused. */
    for (size_t i = 0; i < n; i++) {
        char w[512];
        memcpy(w, v, n);
        w[i] = w[i] == '1' ? '2' : '1';
        if (um_cluster_verify(secret, UM_STR("GET"), UM_STR("/a?b=1"), (um_str){w, n}, 1700000000,
                              out, sizeof out, &kl))
            fail_msg("accepted with byte %zu changed: %.*s", i, (int)n, w);
    }
    /* Too small an output buffer: nothing written. */
    assert_int_equal(um_cluster_sign(secret, UM_STR("GET"), UM_STR("/"), key, 1, v, 40), 0);
    um_cluster_mac_destroy(secret);
    um_cluster_mac_destroy(other);
}

/* The MAC is RFC 2104's HMAC-SHA256 of "METHOD TARGET\nKEY\nTS" (what any other HMAC
 * finds: these were computed with Python's hmac), for a short secret and for one longer
 * than SHA-256's block, which is hashed first. */
static void test_signature_is_standard_hmac(void **state)
{
    (void)state;
    static const struct {
        const char *secret, *sig;
    } cases[] = {
        {"0123456789abcdef", "0d47dd1faa93813a62c709ad67ae16362cba20934ff0aea6e759bddbf0cd064a"},
        {"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
         "kkkkkkkkkkkk",
         "f35c9d1e4398da83c474bde177bdfd08e54292a7e4230dd8e106239f9254e4c0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct um_cluster_mac *m = um_cluster_mac_create(cases[i].secret);
        char v[256], want[256];
        size_t n =
            um_cluster_sign(m, UM_STR("GET"), UM_STR("/"), UM_STR("ab"), 1700000000, v, sizeof v);
        snprintf(want, sizeof want, "ts=1700000000, key=6162, sig=%s", cases[i].sig);
        assert_int_equal(n, strlen(want));
        assert_string_equal(v, want);
        um_cluster_mac_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owners_are_balanced),
        cmocka_unit_test(test_removing_a_member_moves_only_its_keys),
        cmocka_unit_test(test_adding_a_member_moves_about_one_nth),
        cmocka_unit_test(test_member_out_gives_the_next_owner),
        cmocka_unit_test(test_signature_round_trip),
        cmocka_unit_test(test_signature_is_standard_hmac),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
