/* The disk tier's admission to memory (src/cache/disk_admit.c): a key read from disk is
 * promoted when it was read before within about the memory's worth of disk hits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cache/disktier_internal.h"

static struct um_disk_key key(uint64_t i)
{
    return um_disk_key_of(&i, sizeof(i));
}

static void test_asked_again_within_reach(void **state)
{
    (void)state;
    struct um__disk_admit a;
    um__disk_admit_init(&a, 1 << 20); /* generations of 512 KiB of disk hits */
    assert_false(um__disk_admit(&a, key(1), 16384));
    assert_true(um__disk_admit(&a, key(1), 16384));
    assert_true(um__disk_admit(&a, key(1), 16384));
    assert_false(um__disk_admit(&a, key(2), 16384));
    um__disk_admit_dispose(&a);
}

static void test_forgotten_beyond_reach(void **state)
{
    (void)state;
    struct um__disk_admit a;
    um__disk_admit_init(&a, 1 << 20);
    assert_false(um__disk_admit(&a, key(1), 16384));
    /* Within one generation of others (less than 512 KiB): still seen. */
    for (uint64_t i = 100; i < 120; i++)
        assert_false(um__disk_admit(&a, key(i), 16384));
    assert_true(um__disk_admit(&a, key(1), 16384));
    /* Then more than the memory (two generations) of other keys: forgotten. */
    for (uint64_t i = 1000; i < 1000 + 70; i++)
        um__disk_admit(&a, key(i), 16384);
    assert_false(um__disk_admit(&a, key(1), 16384));
    um__disk_admit_dispose(&a);
}

static void test_uniform_over_eight_times_memory_promotes_few(void **state)
{
    (void)state;
    /* 8 MiB of memory, 16 KiB objects, a working set of 8x: each key asked about once a
     * working set; seen again within the memory's reach about one time in eight to
     * sixteen. Promoting on every read would copy all of them. */
    struct um__disk_admit a;
    um__disk_admit_init(&a, 8u << 20);
    uint64_t n = 4096, promoted = 0, x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        promoted += um__disk_admit(&a, key(x % n), 16384);
    }
    assert_true(promoted > 200000 / 20);
    assert_true(promoted < 200000 / 5);
    um__disk_admit_dispose(&a);
}

static void test_a_hot_key_stays_promoted(void **state)
{
    (void)state;
    struct um__disk_admit a;
    um__disk_admit_init(&a, 1 << 20);
    uint64_t promoted = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        um__disk_admit(&a, key(1000000 + i), 16384); /* a stream of keys asked once */
        if (i % 10 == 0) promoted += um__disk_admit(&a, key(7), 16384);
    }
    assert_true(promoted >= 999); /* all but its first read */
    um__disk_admit_dispose(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_asked_again_within_reach),
        cmocka_unit_test(test_forgotten_beyond_reach),
        cmocka_unit_test(test_uniform_over_eight_times_memory_promotes_few),
        cmocka_unit_test(test_a_hot_key_stays_promoted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
