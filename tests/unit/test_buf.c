/* struct um_buf: growable and fixed buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/buf.h"

static void test_zeroed_is_empty(void **state)
{
    (void)state;
    struct um_buf b = {0};
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_int_equal(um_buf_room(&b), 0);
    um_buf_append(&b, NULL, 0); /* nothing to add: nothing allocated */
    assert_null(b.base);
    assert_null(um_buf_detach(&b));
    um_buf_dispose(&b);
    um_buf_init(&b);
    assert_null(b.base);
    um_buf_dispose(&b);
}

static void test_append(void **state)
{
    (void)state;
    struct um_buf b;
    um_buf_init(&b);
    um_buf_append(&b, "abc", 3);
    um_buf_append_str(&b, "def");
    um_buf_append_char(&b, 'g');
    um_buf_append(&b, "\0h", 2); /* bytes, not a string */
    assert_int_equal(b.len, 9);
    assert_memory_equal(b.base, "abcdefg\0h", 10);
    assert_int_equal(b.base[b.len], '\0');
    assert_true(um_buf_room(&b) + b.len + 1 == b.cap);
    um_buf_dispose(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

/* Many small appends and a few large ones, across every growth, against a plain copy. */
static void test_growth(void **state)
{
    (void)state;
    struct um_buf b = {0};
    size_t size = 3u << 20, n = 0;
    char *want = malloc(size);
    assert_non_null(want);
    for (unsigned i = 0; n < size - 70000; i++) {
        char chunk[65536];
        size_t k = i % 50 == 49 ? sizeof chunk : i % 7 + 1;
        for (size_t j = 0; j < k; j++)
            chunk[j] = (char)('a' + (i + j) % 26);
        um_buf_append(&b, chunk, k);
        memcpy(want + n, chunk, k);
        n += k;
        assert_int_equal(b.len, n);
        assert_int_equal(b.base[n], '\0');
        assert_true(b.cap > n);
    }
    assert_memory_equal(b.base, want, n);
    free(want);
    um_buf_dispose(&b);
}

static void test_printf(void **state)
{
    (void)state;
    struct um_buf b = {0};
    um_buf_printf(&b, "%d-%s", 42, "x"); /* into nothing: counted, then written */
    assert_string_equal(b.base, "42-x");
    assert_int_equal(b.len, 4);
    um_buf_printf(&b, "%s", ""); /* nothing at all */
    assert_int_equal(b.len, 4);
    /* Longer than the room left: formatted twice. */
    char *big = malloc(20000);
    assert_non_null(big);
    memset(big, 'z', 19999);
    big[19999] = '\0';
    um_buf_printf(&b, "[%s]%llu", big, 18446744073709551615ull);
    assert_int_equal(b.len, 4 + 1 + 19999 + 1 + 20);
    assert_memory_equal(b.base, "42-x[zzz", 8);
    assert_string_equal(b.base + 4 + 1 + 19999, "]18446744073709551615");
    free(big);
    um_buf_dispose(&b);
}

static void test_reset_keeps_memory(void **state)
{
    (void)state;
    struct um_buf b = {0};
    um_buf_append_str(&b, "hello");
    char *base = b.base;
    size_t cap = b.cap;
    um_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_ptr_equal(b.base, base);
    assert_int_equal(b.cap, cap);
    assert_string_equal(b.base, "");
    um_buf_append_str(&b, "bye");
    assert_string_equal(b.base, "bye");
    um_buf_dispose(&b);
}

static void test_reserve_commit(void **state)
{
    (void)state;
    struct um_buf b = {0};
    um_buf_append_str(&b, "head:");
    um_buf_reserve(&b, 10000);
    assert_true(um_buf_room(&b) >= 10000);
    char *base = b.base;
    memset(b.base + b.len, 'q', 10000);
    um_buf_commit(&b, 10000);
    assert_ptr_equal(b.base, base); /* the room was made: nothing moved */
    assert_int_equal(b.len, 5 + 10000);
    assert_int_equal(b.base[b.len], '\0');
    um_buf_reserve(&b, 0);
    assert_ptr_equal(b.base, base);
    um_buf_dispose(&b);
}

static void test_detach(void **state)
{
    (void)state;
    struct um_buf b = {0};
    um_buf_printf(&b, "%s %d", "status", 200);
    size_t len = b.len;
    char *p = um_buf_detach(&b);
    assert_int_equal(len, 10);
    assert_string_equal(p, "status 200");
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(p);
    um_buf_append_str(&b, "again"); /* usable after a detach */
    assert_string_equal(b.base, "again");
    um_buf_dispose(&b);
}

/* A fixed buffer stores a prefix and counts the rest, as snprintf does; it never writes
 * outside its storage. */
static void test_fixed_truncates(void **state)
{
    (void)state;
    char mem[4 + 8 + 4];
    for (size_t size = 0; size <= 8; size++) {
        memset(mem, '#', sizeof mem);
        struct um_buf b;
        um_buf_init_fixed(&b, mem + 4, size);
        um_buf_append_str(&b, "ab");
        um_buf_printf(&b, "%d", 345);
        um_buf_append_char(&b, 'c');
        um_buf_append(&b, "de", 2);
        char want[16];
        int n = snprintf(want, sizeof want, "ab%dcde", 345);
        assert_int_equal(b.len, (size_t)n);
        if (size > 0) {
            size_t k = (size_t)n < size - 1 ? (size_t)n : size - 1;
            assert_memory_equal(mem + 4, want, k);
            assert_int_equal(mem[4 + k], '\0');
        }
        assert_memory_equal(mem, "####", 4);
        assert_memory_equal(mem + 4 + size, "############", 12 - size);
        um_buf_reset(&b);
        assert_int_equal(b.len, 0);
        um_buf_append_str(&b, "z");
        assert_int_equal(b.len, 1);
        if (size > 1) assert_string_equal(mem + 4, "z");
        um_buf_dispose(&b); /* the storage is the caller's: left alone */
        assert_memory_equal(mem, "####", 4);
    }
}

static void test_fixed_without_storage(void **state)
{
    (void)state;
    struct um_buf b;
    um_buf_init_fixed(&b, NULL, 0);
    um_buf_append_str(&b, "counted");
    um_buf_printf(&b, "%05d", 7);
    assert_int_equal(b.len, 12);
    assert_null(b.base);
    um_buf_dispose(&b);
}

static void test_fixed_exact_fit(void **state)
{
    (void)state;
    char mem[6];
    struct um_buf b;
    um_buf_init_fixed(&b, mem, sizeof mem);
    um_buf_append_str(&b, "hello"); /* five bytes and the NUL */
    assert_int_equal(b.len, 5);
    assert_string_equal(mem, "hello");
    assert_int_equal(um_buf_room(&b), 0);
    um_buf_append_char(&b, '!');
    assert_int_equal(b.len, 6);
    assert_string_equal(mem, "hello");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zeroed_is_empty),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_reset_keeps_memory),
        cmocka_unit_test(test_reserve_commit),
        cmocka_unit_test(test_detach),
        cmocka_unit_test(test_fixed_truncates),
        cmocka_unit_test(test_fixed_without_storage),
        cmocka_unit_test(test_fixed_exact_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
