/* Tests for the chunked transfer-coding decoder. Input sits against a guard page; every
 * valid and invalid message is also decoded split at every byte boundary and one byte at
 * a time, and must give the same data and verdict as when decoded whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "guard.h"
#include "umbra/http1.h"

#define CAP (64 * 1024)

static struct guard g_after, g_before;

/* Result of decoding a message whole. */
struct result {
    int rc;
    char data[CAP];
    size_t data_len;
    size_t consumed;
};

static struct result whole, split;

/* Decodes s[0..len) in one call with the input against the guard (after, or before). */
static void decode_whole(const char *s, size_t len, enum guard_side side, struct result *r)
{
    struct um_chunked d;
    struct guard *g = side == GUARD_AFTER ? &g_after : &g_before;
    char *b = guard_put(g, s, len);
    um_chunked_init(&d);
    r->rc = um_chunked_decode(&d, b, len, &r->consumed, &r->data_len);
    assert_true(r->data_len <= r->consumed);
    assert_true(r->consumed <= len);
    memcpy(r->data, b, r->data_len);
}

/* Feeds the pieces s[cuts[i]..cuts[i+1]) in turn, as a caller would: it drops what was
 * consumed and gives the rest again with more input, stopping at UM_DONE or UM_ERR. */
static void decode_pieces(const char *s, size_t len, const size_t *cuts, size_t ncuts,
                          struct result *r)
{
    struct um_chunked d;
    size_t start = 0;
    um_chunked_init(&d);
    r->data_len = 0;
    r->rc = UM_AGAIN;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        size_t n = end - start, consumed, out;
        char *b = guard_put(&g_after, s + start, n);
        r->rc = um_chunked_decode(&d, b, n, &consumed, &out);
        assert_true(out <= consumed && consumed <= n);
        memcpy(r->data + r->data_len, b, out);
        r->data_len += out;
        start += consumed;
        if (r->rc != UM_AGAIN) break;
        assert_int_equal(consumed, n);
    }
    r->consumed = start;
}

static void assert_same_result(const struct result *a, const struct result *b, const char *what,
                               size_t at)
{
    if (a->rc != b->rc || a->data_len != b->data_len ||
        (a->rc != UM_ERR && a->consumed != b->consumed) ||
        memcmp(a->data, b->data, a->data_len) != 0)
        fail_msg("%s %zu: rc %d/%d data %zu/%zu consumed %zu/%zu", what, at, a->rc, b->rc,
                 a->data_len, b->data_len, a->consumed, b->consumed);
}

/* Decodes s whole (both guards), then at every split point, then byte by byte; checks all
 * agree and returns the whole result in `whole`. */
static int decode(const char *s, size_t len)
{
    struct result *before = &split;
    decode_whole(s, len, GUARD_BEFORE, before);
    int rc_before = before->rc;
    size_t dl_before = before->data_len, c_before = before->consumed;
    decode_whole(s, len, GUARD_AFTER, &whole);
    assert_int_equal(whole.rc, rc_before);
    assert_int_equal(whole.data_len, dl_before);
    assert_int_equal(whole.consumed, c_before);

    /* Large inputs are split at fewer points; they still go through byte by byte. */
    size_t step = len > 4096 ? 37 : 1;
    for (size_t cut = 0; cut <= len; cut += step) {
        decode_pieces(s, len, &cut, 1, &split);
        assert_same_result(&split, &whole, "split at", cut);
    }

    static size_t cuts[CAP];
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    decode_pieces(s, len, cuts, len > 0 ? len - 1 : 0, &split);
    assert_same_result(&split, &whole, "bytewise", 0);
    return whole.rc;
}

#define DECODE(lit) decode((lit), sizeof(lit) - 1)

static void expect_done(const char *s, size_t len, const char *data, size_t consumed)
{
    int rc = decode(s, len);
    if (rc != UM_DONE) fail_msg("rc %d for \"%.*s\"", rc, (int)len, s);
    assert_int_equal(whole.data_len, strlen(data));
    assert_memory_equal(whole.data, data, whole.data_len);
    assert_int_equal(whole.consumed, consumed);
}

#define EXPECT_DONE(lit, data) expect_done((lit), sizeof(lit) - 1, (data), sizeof(lit) - 1)

static void expect_err(const char *s, size_t len)
{
    int rc = decode(s, len);
    if (rc != UM_ERR) fail_msg("rc %d for \"%.*s\"", rc, (int)len, s);
}

#define EXPECT_ERR(lit) expect_err((lit), sizeof(lit) - 1)

static void test_simple(void **state)
{
    EXPECT_DONE("5\r\nhello\r\n0\r\n\r\n", "hello");
    EXPECT_DONE("0\r\n\r\n", "");
}

static void test_multi_chunk(void **state)
{
    EXPECT_DONE("3\r\nabc\r\n0A\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n", "abc0123456789!");
    EXPECT_DONE("a\r\n0123456789\r\nF\r\n0123456789abcde\r\n000\r\n\r\n",
                "01234567890123456789abcde");
    EXPECT_DONE("0000000000000003\r\nxyz\r\n0\r\n\r\n", "xyz");
    /* Data may hold anything, CR and LF included. */
    EXPECT_DONE("4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n");
}

static void test_extensions(void **state)
{
    EXPECT_DONE("5;name=value\r\nhello\r\n0;last\r\n\r\n", "hello");
    EXPECT_DONE("3;a;b=1;c=\"x y\\\"z\\\\\"\r\nabc\r\n0\r\n\r\n", "abc");
    EXPECT_DONE("3 ; a = b ;c\t=\t\"q\"\r\nabc\r\n0\r\n\r\n", "abc");
    EXPECT_DONE("3;a=\"\"\r\nabc\r\n0\r\n\r\n", "abc");
    EXPECT_DONE("3;a=\"caf\xc3\xa9\"\r\nabc\r\n0\r\n\r\n", "abc");
}

static void test_trailers(void **state)
{
    EXPECT_DONE("3\r\nabc\r\n0\r\nX-Sum: abc\r\nY:\r\nZ: a b\t\r\n\r\n", "abc");
    EXPECT_DONE("0\r\nExpires: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n", "");
}

/* Decodes s one byte at a time with room for cap bytes of trailers; returns the fields. */
static size_t trailers_of(const char *s, size_t cap, struct um_chunked *d, char *tbuf,
                          struct um_header *out, size_t max)
{
    um_chunked_init(d);
    d->trailers = tbuf;
    d->trailers_cap = cap;
    size_t len = strlen(s), consumed, n;
    int rc = UM_AGAIN;
    for (size_t i = 0; i < len && rc == UM_AGAIN; i++) {
        char *b = guard_put(&g_after, s + i, 1);
        rc = um_chunked_decode(d, b, 1, &consumed, &n);
    }
    assert_int_equal(rc, UM_DONE);
    return um_chunked_trailer_fields(d->trailers, d->trailers_len, out, max);
}

/* The trailer section is kept for the caller when it gives room, whatever the splits. */
static void test_trailers_kept(void **state)
{
    (void)state;
    struct um_chunked d;
    char tbuf[64];
    struct um_header f[4];
    size_t n = trailers_of("3\r\nabc\r\n0\r\nX-Sum: abc\r\nY:\r\nZ:  a b\t\r\n\r\n", sizeof(tbuf),
                           &d, tbuf, f, 4);
    assert_int_equal(n, 3);
    assert_true(um_str_eq(f[0].name, "X-Sum") && um_str_eq(f[0].value, "abc"));
    assert_true(um_str_eq(f[1].name, "Y") && f[1].value.len == 0);
    assert_true(um_str_eq(f[2].name, "Z") && um_str_eq(f[2].value, "a b"));
    assert_false(d.trailers_cut);
    /* No trailers: nothing kept. */
    assert_int_equal(trailers_of("0\r\n\r\n", sizeof(tbuf), &d, tbuf, f, 4), 0);
    assert_int_equal(d.trailers_len, 0);
    /* Past the room: cut, which the caller sees. */
    trailers_of("0\r\nA-Long-Name: a long value\r\n\r\n", 10, &d, tbuf, f, 4);
    assert_true(d.trailers_cut);
}

static void test_bytes_after_end(void **state)
{
    static const char s[] = "2\r\nhi\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
    assert_int_equal(DECODE(s), UM_DONE);
    assert_int_equal(whole.consumed, strlen("2\r\nhi\r\n0\r\n\r\n"));
    assert_int_equal(whole.data_len, 2);
    assert_memory_equal(whole.data, "hi", 2);

    /* Once done, the decoder reads nothing more. */
    struct um_chunked d;
    size_t consumed, out;
    char *b = guard_put(&g_after, s, sizeof(s) - 1);
    um_chunked_init(&d);
    assert_int_equal(um_chunked_decode(&d, b, sizeof(s) - 1, &consumed, &out), UM_DONE);
    assert_int_equal(um_chunked_decode(&d, b + consumed, sizeof(s) - 1 - consumed, &consumed, &out),
                     UM_DONE);
    assert_int_equal(consumed, 0);
    assert_int_equal(out, 0);
}

static void test_incomplete(void **state)
{
    struct um_chunked d;
    size_t consumed, out;
    static const char s[] = "a\r\n01234";
    char *b = guard_put(&g_after, s, sizeof(s) - 1);
    um_chunked_init(&d);
    assert_int_equal(um_chunked_decode(&d, b, sizeof(s) - 1, &consumed, &out), UM_AGAIN);
    assert_int_equal(consumed, sizeof(s) - 1);
    assert_int_equal(out, 5);
    assert_memory_equal(b, "01234", 5);
    assert_int_equal(um_chunked_decode(&d, b, 0, &consumed, &out), UM_AGAIN);
    assert_int_equal(consumed, 0);

    /* The largest size is accepted and then waits for data. */
    assert_int_equal(DECODE("ffffffffffffffff\r\nabc"), UM_AGAIN);
    assert_int_equal(whole.data_len, 3);
    assert_int_equal(DECODE("FFFFFFFFFFFFFFFF;x\r\n"), UM_AGAIN);
    assert_int_equal(DECODE(""), UM_AGAIN);
}

static void test_errors(void **state)
{
    /* chunk-size */
    EXPECT_ERR("g\r\nx\r\n0\r\n\r\n");
    EXPECT_ERR("5g\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("-5\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("+5\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("0x5\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR(" 5\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR(";a\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("10000000000000000\r\n");    /* 17 digits: overflow */
    EXPECT_ERR("00000000000000000\r\n");    /* 17 digits even if zero */
    EXPECT_ERR("5 \r\nhello\r\n0\r\n\r\n"); /* whitespace must lead to ';' */
    EXPECT_ERR("5\r\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5\rhello\r\n0\r\n\r\n");
    /* bare LF */
    EXPECT_ERR("5\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5\r\nhello\n0\r\n\r\n");
    EXPECT_ERR("5\r\nhello\r\n0\n\r\n");
    EXPECT_ERR("5\r\nhello\r\n0\r\n\n");
    EXPECT_ERR("5;a\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("0\r\nX: y\n\r\n");
    /* missing or wrong CRLF after data */
    EXPECT_ERR("5\r\nhelloX\r\n0\r\n\r\n");
    EXPECT_ERR("5\r\nhello0\r\n\r\n");
    EXPECT_ERR("5\r\nhello\rX0\r\n\r\n");
    EXPECT_ERR("3\r\nhello\r\n0\r\n\r\n");
    /* extensions */
    EXPECT_ERR("5;\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;=v\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a \r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=b \r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=b c\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a(b\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\"unterminated\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\"x\"y\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5;a=\x80\r\nhello\r\n0\r\n\r\n");
    EXPECT_ERR("5,a\r\nhello\r\n0\r\n\r\n");
    /* trailers */
    EXPECT_ERR("0\r\nX: a\r\n b\r\n\r\n");
    EXPECT_ERR("0\r\n X: a\r\n\r\n");
    EXPECT_ERR("0\r\nX : a\r\n\r\n");
    EXPECT_ERR("0\r\n: a\r\n\r\n");
    EXPECT_ERR("0\r\nX-No-Colon\r\n\r\n");
    EXPECT_ERR("0\r\nX: a\x00"
               "b\r\n\r\n");
    EXPECT_ERR("0\r\nX: a\x7f\r\n\r\n");
    EXPECT_ERR("0\r\nX: a\rb\r\n\r\n");
    EXPECT_ERR("0\r\n\rX\r\n");
}

static void test_limits(void **state)
{
    static char s[CAP];
    size_t n;

    /* A size line up to 4 KiB is fine, longer is not. */
    n = (size_t)snprintf(s, sizeof(s), "1;x=");
    memset(s + n, 'v', 4096 - n - 2);
    n = 4096 - 2;
    n += (size_t)snprintf(s + n, sizeof(s) - n, "\r\nz\r\n0\r\n\r\n");
    assert_int_equal(decode(s, n), UM_DONE);
    assert_int_equal(whole.data_len, 1);
    n = (size_t)snprintf(s, sizeof(s), "1;x=");
    memset(s + n, 'v', 4096 - n - 1);
    n = 4096 - 1;
    n += (size_t)snprintf(s + n, sizeof(s) - n, "\r\nz\r\n0\r\n\r\n");
    assert_int_equal(decode(s, n), UM_ERR);

    /* A trailer section up to 16 KiB (with its final CRLF) is fine, longer is not. */
    n = (size_t)snprintf(s, sizeof(s), "0\r\n");
    while (n < 3 + 16384 - 2 - 100)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "X-Pad: %090d\r\n", 0); /* 99 bytes */
    size_t pad = 3 + 16384 - 2 - n - 4; /* "Y: " + value + CRLF fills up to the final CRLF */
    n += (size_t)snprintf(s + n, sizeof(s) - n, "Y:%*s\r\n\r\n", (int)pad, "");
    assert_int_equal(n, 3 + 16384);
    assert_int_equal(decode(s, n), UM_DONE);
    memmove(s + n - 4, " \r\n\r\n", 5);
    assert_int_equal(decode(s, n + 1), UM_ERR);

    /* A huge trailer section fails without waiting for its end. */
    n = (size_t)snprintf(s, sizeof(s), "0\r\n");
    while (n < 40000)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "X-Pad: %090d\r\n", 0);
    struct um_chunked d;
    size_t consumed, out;
    char *b = guard_put(&g_after, s, n);
    um_chunked_init(&d);
    assert_int_equal(um_chunked_decode(&d, b, n, &consumed, &out), UM_ERR);
    assert_true(consumed <= 3 + 16384 + 1);
}

static void test_error_is_sticky(void **state)
{
    struct um_chunked d;
    size_t consumed, out;
    char *b = guard_put(&g_after, "x\r\n", 3);
    um_chunked_init(&d);
    assert_int_equal(um_chunked_decode(&d, b, 3, &consumed, &out), UM_ERR);
    b = guard_put(&g_after, "0\r\n\r\n", 5);
    assert_int_equal(um_chunked_decode(&d, b, 5, &consumed, &out), UM_ERR);
    assert_int_equal(out, 0);
}

static void test_large_body(void **state)
{
    /* Many chunks of varied sizes, checked at every split point like the others. */
    static char s[CAP], want[CAP];
    size_t n = 0, w = 0;
    for (size_t size = 1; size < 600; size = size * 3 + 1) {
        n += (size_t)snprintf(s + n, sizeof(s) - n, "%zx\r\n", size);
        for (size_t i = 0; i < size; i++)
            s[n++] = want[w++] = (char)('a' + (i + size) % 26);
        s[n++] = '\r';
        s[n++] = '\n';
    }
    n += (size_t)snprintf(s + n, sizeof(s) - n, "0\r\nT: v\r\n\r\n");
    want[w] = '\0';
    expect_done(s, n, want, n);
}

static int setup(void **state)
{
    guard_init(&g_after, CAP, GUARD_AFTER);
    guard_init(&g_before, CAP, GUARD_BEFORE);
    return 0;
}

static int teardown(void **state)
{
    guard_dispose(&g_after);
    guard_dispose(&g_before);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple),        cmocka_unit_test(test_multi_chunk),
        cmocka_unit_test(test_extensions),    cmocka_unit_test(test_trailers),
        cmocka_unit_test(test_trailers_kept), cmocka_unit_test(test_bytes_after_end),
        cmocka_unit_test(test_incomplete),    cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),        cmocka_unit_test(test_error_is_sticky),
        cmocka_unit_test(test_large_body),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
