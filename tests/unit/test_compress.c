/* compress.h: Accept-Encoding negotiation (the cache's buckets come from it), the type
 * list, and the encoders' streams (decoded back with zlib, and checked for sizes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>
#include <zstd.h>

#include "guard.h"
#include "umbra/compress.h"

static struct guard g;
static const unsigned char all[3] = {UM_CODING_ZSTD, UM_CODING_BR, UM_CODING_GZIP};

/* The coding negotiated for one Accept-Encoding line (NULL: none) with order. */
static enum um_coding nego_order(const char *ae, const unsigned char *order, size_t n)
{
    struct um_header h[2] = {{UM_STR("Accept"), UM_STR("*/*")}};
    size_t nh = 1;
    if (ae) {
        /* The value ends right before a guard page: an over-read crashes. */
        h[nh++] = (struct um_header){UM_STR("Accept-Encoding"), {guard_put(&g, ae, strlen(ae)), strlen(ae)}};
    }
    return um_compress_negotiate(h, nh, order, n);
}

static enum um_coding nego(const char *ae)
{
    return nego_order(ae, all, 3);
}

#define IS(ae, want)                                                                       \
    do {                                                                                   \
        enum um_coding got_ = nego(ae);                                                    \
        if (got_ != (want))                                                                \
            fail_msg("\"%s\" -> %s, want %s", (ae) ? (ae) : "(none)", um_coding_name(got_), \
                     um_coding_name(want));                                                \
    } while (0)

static void test_plain_lists(void **state)
{
    (void)state;
    IS(NULL, UM_CODING_IDENTITY);
    IS("", UM_CODING_IDENTITY);
    IS("gzip", UM_CODING_GZIP);
    IS("gzip, deflate", UM_CODING_GZIP);
    IS("gzip, deflate, br", UM_CODING_BR);
    IS("gzip, deflate, br, zstd", UM_CODING_ZSTD);
    IS("br,gzip", UM_CODING_BR);
    IS(" , ,gzip , ", UM_CODING_GZIP);
    IS("deflate", UM_CODING_IDENTITY);
    IS("compress, deflate", UM_CODING_IDENTITY);
    IS("GZip", UM_CODING_GZIP);
    IS("x-gzip", UM_CODING_GZIP);
    IS("identity", UM_CODING_IDENTITY);
}

static void test_q_values(void **state)
{
    (void)state;
    IS("gzip;q=1, br;q=0.5", UM_CODING_GZIP);
    IS("gzip;q=0.8, br;q=0.9", UM_CODING_BR);
    IS("gzip; q=0.8 , br ;Q=0.9", UM_CODING_BR);
    IS("zstd;q=0.001, gzip;q=0", UM_CODING_ZSTD);
    IS("br;q=0", UM_CODING_IDENTITY);
    IS("br;q=0.000", UM_CODING_IDENTITY);
    IS("gzip;q=1.000", UM_CODING_GZIP);
    IS("gzip;q=0.5, identity", UM_CODING_IDENTITY);
    IS("gzip;q=0.5, identity;q=0.4", UM_CODING_GZIP);
    IS("gzip, identity;q=0", UM_CODING_GZIP);
    IS("identity;q=0", UM_CODING_IDENTITY); /* nothing else: identity all the same */
    /* A coding named twice takes its higher weight. */
    IS("gzip;q=0, gzip;q=0.5", UM_CODING_GZIP);
}

static void test_star(void **state)
{
    (void)state;
    IS("*", UM_CODING_ZSTD);
    IS("*;q=0", UM_CODING_IDENTITY);
    IS("zstd;q=0, *", UM_CODING_BR);
    IS("zstd;q=0, br;q=0, *;q=0.5", UM_CODING_GZIP);
    IS("gzip;q=0.2, *;q=0.5", UM_CODING_ZSTD);
    IS("*;q=0.5, identity", UM_CODING_IDENTITY);
}

static void test_malformed_is_identity(void **state)
{
    (void)state;
    IS("gzip;q=abc", UM_CODING_IDENTITY);
    IS("gzip;q=2", UM_CODING_IDENTITY);
    IS("gzip;q=1.5", UM_CODING_IDENTITY);
    IS("gzip;q=1.001", UM_CODING_IDENTITY);
    IS("gzip;q=0.0001", UM_CODING_IDENTITY);
    IS("gzip;q=", UM_CODING_IDENTITY);
    IS("gzip;q", UM_CODING_IDENTITY);
    IS("gzip;", UM_CODING_IDENTITY);
    IS("gzip;level=1", UM_CODING_IDENTITY);
    IS("gzip;q=1;q=1", UM_CODING_IDENTITY);
    IS("gz ip", UM_CODING_IDENTITY);
    IS("\"gzip\"", UM_CODING_IDENTITY);
    IS("br, gzip;q=-1", UM_CODING_IDENTITY);
    IS("gzip;q=1.", UM_CODING_GZIP); /* "1." is a qvalue: no DIGIT after the dot */
    IS("gzip;q=0.", UM_CODING_IDENTITY);
}

static void test_server_order_and_subset(void **state)
{
    (void)state;
    static const unsigned char gz_first[3] = {UM_CODING_GZIP, UM_CODING_BR, UM_CODING_ZSTD};
    static const unsigned char only_gzip[1] = {UM_CODING_GZIP};
    assert_int_equal(nego_order("br, gzip, zstd", gz_first, 3), UM_CODING_GZIP);
    assert_int_equal(nego_order("br;q=0.9, gzip;q=0.8", gz_first, 3), UM_CODING_BR);
    assert_int_equal(nego_order("br, zstd", only_gzip, 1), UM_CODING_IDENTITY);
    assert_int_equal(nego_order("*", only_gzip, 1), UM_CODING_GZIP);
    assert_int_equal(nego_order("gzip", only_gzip, 0), UM_CODING_IDENTITY);
}

static void test_several_lines_combine(void **state)
{
    (void)state;
    struct um_header h[3] = {
        {UM_STR("accept-encoding"), UM_STR("gzip")},
        {UM_STR("Host"), UM_STR("x")},
        {UM_STR("ACCEPT-ENCODING"), UM_STR("br;q=0.5")},
    };
    assert_int_equal(um_compress_negotiate(h, 3, all, 3), UM_CODING_GZIP);
    h[0].value = UM_STR("gzip;q=0.1");
    assert_int_equal(um_compress_negotiate(h, 3, all, 3), UM_CODING_BR);
    h[2].value = UM_STR("br;q=x"); /* one bad line spoils the field */
    assert_int_equal(um_compress_negotiate(h, 3, all, 3), UM_CODING_IDENTITY);
}

static void test_types(void **state)
{
    (void)state;
    struct um_compress_conf cc;
    memset(&cc, 0, sizeof(cc));
    strcpy(cc.types[cc.num_types++], "text/*");
    strcpy(cc.types[cc.num_types++], "application/json");
    assert_true(um_compress_type_ok(&cc, UM_STR("text/html")));
    assert_true(um_compress_type_ok(&cc, UM_STR("TEXT/plain; charset=utf-8")));
    assert_true(um_compress_type_ok(&cc, UM_STR("application/json ; x=y")));
    assert_true(um_compress_type_ok(&cc, UM_STR("Application/JSON")));
    assert_false(um_compress_type_ok(&cc, UM_STR("application/jsonx")));
    assert_false(um_compress_type_ok(&cc, UM_STR("texts/html")));
    assert_false(um_compress_type_ok(&cc, UM_STR("text")));
    assert_false(um_compress_type_ok(&cc, UM_STR("image/png")));
    assert_false(um_compress_type_ok(&cc, UM_STR("")));
}

static void test_gzip_stream_round_trip(void **state)
{
    (void)state;
    struct um_encoder *e = um_encoder_create(UM_CODING_GZIP, 6, -1);
    assert_non_null(e);
    struct um_buf out;
    um_buf_init(&out);
    static char in[300000];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (char)("abcdefgh"[i % 8] + (i / 4096) % 3);
    for (size_t off = 0; off < sizeof(in); off += 7000) {
        size_t n = sizeof(in) - off < 7000 ? sizeof(in) - off : 7000;
        assert_int_equal(um_encoder_run(e, in + off, n, false, &out), UM_OK);
    }
    assert_int_equal(um_encoder_run(e, NULL, 0, true, &out), UM_OK);
    um_encoder_destroy(e);
    static char back[sizeof(in) + 16];
    z_stream z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(inflateInit2(&z, 16 + 15), Z_OK);
    z.next_in = (Bytef *)out.base;
    z.avail_in = (uInt)out.len;
    z.next_out = (Bytef *)back;
    z.avail_out = sizeof(back);
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    assert_int_equal(z.total_out, sizeof(in));
    assert_memory_equal(back, in, sizeof(in));
    inflateEnd(&z);
    assert_true(out.len < sizeof(in) / 10);
    um_buf_dispose(&out);
}

static void test_zstd_and_br_streams_end(void **state)
{
    (void)state;
    static char in[100000];
    memset(in, 'z', sizeof(in));
    for (int c = UM_CODING_BR; c <= UM_CODING_ZSTD; c++) {
        struct um_encoder *e = um_encoder_create((enum um_coding)c, 3, sizeof(in));
        assert_non_null(e);
        struct um_buf out;
        um_buf_init(&out);
        assert_int_equal(um_encoder_run(e, in, 60000, false, &out), UM_OK);
        assert_int_equal(um_encoder_run(e, in + 60000, 40000, true, &out), UM_OK);
        /* After the end, more input is an error, never a silently longer stream. */
        assert_int_equal(um_encoder_run(e, in, 1, false, &out), UM_ERR);
        um_encoder_destroy(e);
        assert_true(out.len > 0 && out.len < 1000);
        if (c == UM_CODING_ZSTD) {
            static char back[sizeof(in)];
            size_t n = ZSTD_decompress(back, sizeof(back), out.base, out.len);
            assert_false(ZSTD_isError(n));
            assert_int_equal(n, sizeof(in));
            assert_memory_equal(back, in, sizeof(in));
        }
        um_buf_dispose(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_lists),
        cmocka_unit_test(test_q_values),
        cmocka_unit_test(test_star),
        cmocka_unit_test(test_malformed_is_identity),
        cmocka_unit_test(test_server_order_and_subset),
        cmocka_unit_test(test_several_lines_combine),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_gzip_stream_round_trip),
        cmocka_unit_test(test_zstd_and_br_streams_end),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
