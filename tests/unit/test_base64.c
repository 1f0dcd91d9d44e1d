/* Base64 (umbra/base64.h) against RFC 4648's test vectors (section 10), base64url without
 * padding, and what the decoder refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "umbra/base64.h"

static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};

static void test_rfc4648_vectors(void **state)
{
    (void)state;
    for (size_t i = 0; i < 7; i++) {
        struct um_buf b;
        um_buf_init(&b);
        um_base64_append(&b, plain[i], strlen(plain[i]), false);
        assert_int_equal(b.len, strlen(coded[i]));
        assert_memory_equal(b.base, coded[i], b.len);
        um_buf_dispose(&b);
        char out[8];
        size_t n = 99;
        assert_true(um_base64_decode((um_str){coded[i], strlen(coded[i])}, out, sizeof out, &n));
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(out, plain[i], n);
        /* Padding is optional. */
        size_t len = strlen(coded[i]);
        while (len > 0 && coded[i][len - 1] == '=')
            len--;
        assert_true(um_base64_decode((um_str){coded[i], len}, out, sizeof out, &n));
        assert_int_equal(n, strlen(plain[i]));
    }
}

static void test_url_alphabet_without_padding(void **state)
{
    (void)state;
    struct um_buf b;
    um_buf_init(&b);
    um_base64_append(&b, "\xfb\xff", 2, true);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.base, "-_8", 3);
    um_buf_reset(&b);
    um_base64_append(&b, "\xfb\xff", 2, false);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.base, "+/8=", 4);
    um_buf_dispose(&b);
}

static void test_decoder_refuses(void **state)
{
    (void)state;
    char out[8];
    size_t n;
    static const char *const bad[] = {"Zm9v!", "Z", "Zm9vY", "Z=m9", "Zm===", "-_8", "Zm 9v"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(um_base64_decode((um_str){bad[i], strlen(bad[i])}, out, sizeof out, &n));
    /* Longer than the room given. */
    assert_false(um_base64_decode((um_str){"Zm9vYmFy", 8}, out, 5, &n));
    assert_true(um_base64_decode((um_str){"Zm9vYmFy", 8}, out, 6, &n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc4648_vectors),
        cmocka_unit_test(test_url_alphabet_without_padding),
        cmocka_unit_test(test_decoder_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
