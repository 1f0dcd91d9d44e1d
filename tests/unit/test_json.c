/* The JSON pull reader (umbra/json.h). Each document is copied right before a guard page,
 * so an over-read crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guard.h"
#include "umbra/json.h"

static struct guard g;

static void open_doc(struct um_json *j, const char *s)
{
    um_json_init(j, guard_put(&g, s, strlen(s)), strlen(s));
}

static void test_object_walk(void **state)
{
    (void)state;
    struct um_json j;
    open_doc(&j, " {\"a\": [\"x\", \"y\\n\"], \"b\" : true, \"skip\": {\"n\": [1, -2.5e3, null]},"
                 "\"c\": \"caf\\u00e9 \\ud83d\\ude00\"}\n");
    size_t i = 0, k = 0;
    um_str key, v;
    bool b;
    assert_true(um_json_enter(&j, '{'));
    assert_true(um_json_more(&j, '}', &i));
    assert_true(um_json_key(&j, &key) && um_str_eq(key, "a"));
    assert_int_equal(um_json_peek(&j), '[');
    assert_true(um_json_enter(&j, '['));
    assert_true(um_json_more(&j, ']', &k) && um_json_string(&j, &v) && um_str_eq(v, "x"));
    assert_true(um_json_more(&j, ']', &k) && um_json_string(&j, &v) && um_str_eq(v, "y\n"));
    assert_false(um_json_more(&j, ']', &k));
    assert_true(um_json_more(&j, '}', &i) && um_json_key(&j, &key) && um_str_eq(key, "b"));
    assert_true(um_json_bool(&j, &b) && b);
    assert_true(um_json_more(&j, '}', &i) && um_json_key(&j, &key) && um_json_skip(&j));
    assert_true(um_json_more(&j, '}', &i) && um_json_key(&j, &key) && um_json_string(&j, &v));
    assert_true(um_str_eq(v, "caf\xc3\xa9 \xf0\x9f\x98\x80"));
    assert_false(um_json_more(&j, '}', &i));
    assert_true(um_json_done(&j));
    assert_null(j.error);
}

static void error_is(const char *doc, size_t at, const char *expected)
{
    struct um_json j;
    open_doc(&j, doc);
    size_t i = 0;
    um_str key, v;
    um_json_enter(&j, '{');
    while (um_json_more(&j, '}', &i) && um_json_key(&j, &key) && um_json_skip(&j))
        ;
    (void)v;
    if (um_json_done(&j))
        fail_msg("accepted %s", doc);
    if (j.at != at || strcmp(j.error, expected) != 0)
        fail_msg("%s: at %zu expected %s; want at %zu expected %s", doc, j.at, j.error, at,
                 expected);
}

static void test_errors_say_what_and_where(void **state)
{
    (void)state;
    error_is("", 0, "'{'");
    error_is("[1]", 0, "'{'");
    error_is("{\"a\" 1}", 5, "':'");
    error_is("{\"a\": 1,}", 8, "a string");
    error_is("{\"a\": 1 \"b\": 2}", 8, "',' or '}'");
    error_is("{\"a\": tru}", 6, "true or false");
    error_is("{\"a\": \"x", 8, "the string's closing '\"'");
    error_is("{\"a\": \"\\q\"}", 9, "a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    error_is("{\"a\": \"\\u0000\"}", 9, "a \\u escape of a character (not 0000, nor a lone surrogate)");
    error_is("{\"a\": \"\\udc00\"}", 9, "a \\u escape of a character (not 0000, nor a lone surrogate)");
    error_is("{\"a\": \"\\ud83dx\"}", 13, "the low surrogate of a \\u pair");
    error_is("{\"a\": \"\x01\"}", 7, "no control character inside a string");
    error_is("{} x", 3, "the end of the document");
    error_is("{\"a\": [1, }", 10, "a value");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_object_walk),
        cmocka_unit_test(test_errors_say_what_and_where),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
