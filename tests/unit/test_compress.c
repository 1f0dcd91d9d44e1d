/* compress.h: Accept-Encoding negotiation (the cache's buckets come from it), the type
 * list, and the encoders' streams (decoded back with zlib, and checked for sizes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>
#include <zstd.h>

#include "guard.h"
#include "umbra/compress.h"
#include "umbra/module.h"

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

/* What a decoder gives for in[0..len) of a gzip or zstd stream, without its end: the
 * bytes decodable so far. */
static size_t decodable(enum um_coding c, const char *in, size_t len, char *out, size_t cap)
{
    if (c == UM_CODING_GZIP) {
        z_stream z;
        memset(&z, 0, sizeof(z));
        assert_int_equal(inflateInit2(&z, 16 + 15), Z_OK);
        z.next_in = (Bytef *)(uintptr_t)in;
        z.avail_in = (uInt)len;
        z.next_out = (Bytef *)out;
        z.avail_out = (uInt)cap;
        int rc = inflate(&z, Z_SYNC_FLUSH);
        assert_true(rc == Z_OK || rc == Z_BUF_ERROR || rc == Z_STREAM_END);
        size_t n = z.total_out;
        inflateEnd(&z);
        return n;
    }
    ZSTD_DStream *d = ZSTD_createDStream();
    ZSTD_inBuffer ib = {in, len, 0};
    ZSTD_outBuffer ob = {out, cap, 0};
    while (ib.pos < ib.size) {
        size_t r = ZSTD_decompressStream(d, &ob, &ib);
        assert_false(ZSTD_isError(r));
        if (ob.pos == ob.size)
            break;
    }
    ZSTD_freeDStream(d);
    return ob.pos;
}

static void test_flush_makes_all_input_decodable(void **state)
{
    (void)state;
    /* Issue #26 (8): an event of a live stream must be readable at the client before the
     * next one comes; without a flush the encoder keeps this compressible input in its
     * block. */
    static const char ev[] = "id: 1\nevent: progress\ndata: {\"step\": 1, \"of\": 4}\n\n";
    static char back[4096];
    enum um_coding codings[] = {UM_CODING_GZIP, UM_CODING_ZSTD};
    for (size_t k = 0; k < 2; k++) {
        struct um_encoder *e = um_encoder_create(codings[k], 6, -1);
        struct um_buf out;
        um_buf_init(&out);
        assert_int_equal(um_encoder_run(e, ev, sizeof(ev) - 1, false, &out), UM_OK);
        assert_true(decodable(codings[k], out.base, out.len, back, sizeof(back)) <
                    sizeof(ev) - 1);
        assert_int_equal(um_encoder_flush(e, &out), UM_OK);
        assert_int_equal(decodable(codings[k], out.base, out.len, back, sizeof(back)),
                         sizeof(ev) - 1);
        assert_memory_equal(back, ev, sizeof(ev) - 1);
        /* The stream goes on, and ends as a whole. */
        assert_int_equal(um_encoder_run(e, ev, sizeof(ev) - 1, true, &out), UM_OK);
        assert_int_equal(decodable(codings[k], out.base, out.len, back, sizeof(back)),
                         2 * (sizeof(ev) - 1));
        assert_int_equal(um_encoder_flush(e, &out), UM_ERR); /* after the end */
        um_encoder_destroy(e);
        um_buf_dispose(&out);
    }
}

/* ---- the compressing origin, over a scripted inner origin and a scripted client ---- */

struct script {
    struct um_origin base;
    struct um_sink *sink;
    int64_t content_length;
    const char *ct;
    int resumes;
};

static void script_fetch(struct um_origin *o, struct um_fetch *f, struct um_sink *sink)
{
    (void)f;
    struct script *sc = (struct script *)o;
    sc->sink = sink;
    struct um_header h[2] = {{UM_STR("Content-Type"), {sc->ct, strlen(sc->ct)}},
                             {UM_STR("ETag"), UM_STR("\"e1\"")}};
    struct um_response_head head = {.status = 200, .headers = h, .num_headers = 2,
                                    .content_length = sc->content_length};
    sink->ops->on_head(sink, &head);
}

static void script_resume(struct um_origin *o, struct um_sink *sink)
{
    (void)sink;
    ((struct script *)o)->resumes++;
}

static void script_destroy(struct um_origin *o)
{
    (void)o;
}

static const struct um_origin_ops script_ops = {
    .fetch = script_fetch, .resume = script_resume, .destroy = script_destroy};

struct client {
    struct um_sink sink;
    bool refuse;
    int ended, err;
    char coding[16];
    bool chunked_len; /* content_length was -1 */
    struct um_buf body;
};

static void c_head(struct um_sink *s, const struct um_response_head *h)
{
    struct client *c = (struct client *)s;
    c->chunked_len = h->content_length < 0;
    for (size_t i = 0; i < h->num_headers; i++)
        if (um_str_eq_ci(h->headers[i].name, "content-encoding"))
            snprintf(c->coding, sizeof(c->coding), "%.*s", (int)h->headers[i].value.len,
                     h->headers[i].value.base);
}

static size_t c_data(struct um_sink *s, const char *d, size_t n)
{
    struct client *c = (struct client *)s;
    if (c->refuse)
        return 0;
    um_buf_append(&c->body, d, n);
    return n;
}

static void c_end(struct um_sink *s, int err)
{
    struct client *c = (struct client *)s;
    c->ended++;
    c->err = err;
}

static const struct um_sink_ops client_ops = {.on_head = c_head, .on_data = c_data,
                                              .on_end = c_end};

static struct um_route route;
static struct um_compress_conf route_compress;
static struct um_request req;

static void setup_route(void)
{
    memset(&route, 0, sizeof(route));
    memset(&route_compress, 0, sizeof(route_compress));
    um_route_set_part(&route, &um_compress_settings, &route_compress);
    route_compress.enabled = true;
    route_compress.order[0] = UM_CODING_ZSTD;
    route_compress.order[1] = UM_CODING_GZIP;
    route_compress.num_algorithms = 2;
    strcpy(route_compress.types[route_compress.num_types++], "text/*");
    route_compress.min_size = 10;
    route_compress.level[UM_CODING_GZIP] = 6;
    route_compress.level[UM_CODING_ZSTD] = 3;
    memset(&req, 0, sizeof(req));
    req.method_id = UM_METHOD_GET;
}

static struct um_origin *start(struct script *sc, struct client *c, const char *ae)
{
    setup_route();
    req.headers[0] = (struct um_header){UM_STR("Accept-Encoding"), {ae, strlen(ae)}};
    req.num_headers = 1;
    sc->base.ops = &script_ops;
    memset(c, 0, sizeof(*c));
    c->sink.ops = &client_ops;
    um_buf_init(&c->body);
    struct um_origin *o = um_compress_origin_create(&sc->base, &route);
    struct um_fetch f = {.req = &req, .route = &route};
    o->ops->fetch(o, &f, &c->sink);
    return o;
}

static void test_origin_flushes_when_the_origin_runs_dry(void **state)
{
    (void)state;
    struct script sc = {.content_length = -1, .ct = "text/event-stream"};
    struct client c;
    struct um_origin *o = start(&sc, &c, "gzip");
    assert_string_equal(c.coding, "gzip");
    static const char ev[] = "data: one\n\n";
    static char back[256];
    assert_int_equal(sc.sink->ops->on_data(sc.sink, ev, sizeof(ev) - 1), sizeof(ev) - 1);
    assert_int_equal(decodable(UM_CODING_GZIP, c.body.base, c.body.len, back, sizeof(back)), 0);
    um_sink_flush(sc.sink);
    assert_int_equal(decodable(UM_CODING_GZIP, c.body.base, c.body.len, back, sizeof(back)),
                     sizeof(ev) - 1);
    /* Nothing new since: a second flush sends nothing (no empty blocks). */
    size_t len = c.body.len;
    um_sink_flush(sc.sink);
    assert_int_equal(c.body.len, len);
    sc.sink->ops->on_end(sc.sink, UM_OK);
    assert_int_equal(c.ended, 1);
    assert_int_equal(c.err, UM_OK);
    um_buf_dispose(&c.body);
    o->ops->destroy(o);
}

static void test_origin_failing_encoder_cuts_the_body(void **state)
{
    (void)state;
    /* The origin said 100 bytes and sends more: zstd (told the size) fails; the client must
     * hear UM_ERR, never a whole-looking stream. */
    struct script sc = {.content_length = 100, .ct = "text/plain"};
    struct client c;
    struct um_origin *o = start(&sc, &c, "zstd");
    assert_string_equal(c.coding, "zstd");
    static char big[5000];
    memset(big, 'a', sizeof(big));
    assert_int_equal(sc.sink->ops->on_data(sc.sink, big, sizeof(big)), sizeof(big));
    assert_int_equal(sc.sink->ops->on_data(sc.sink, big, sizeof(big)), sizeof(big));
    sc.sink->ops->on_end(sc.sink, UM_OK);
    assert_int_equal(c.ended, 1);
    assert_int_equal(c.err, UM_ERR);
    o->ops->destroy(o);
    um_buf_dispose(&c.body);
}

static void test_origin_backpressure_and_resume(void **state)
{
    (void)state;
    struct script sc = {.content_length = -1, .ct = "text/html; charset=utf-8"};
    struct client c;
    struct um_origin *o = start(&sc, &c, "gzip");
    assert_string_equal(c.coding, "gzip");
    assert_true(c.chunked_len);
    static char in[200000];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (char)('a' + (i * 7919 % 26));
    c.refuse = true;
    /* The first piece is taken (its output waits); the next is refused until the client
     * drains. */
    assert_int_equal(sc.sink->ops->on_data(sc.sink, in, 100000), 100000);
    assert_int_equal(sc.sink->ops->on_data(sc.sink, in + 100000, 100000), 0);
    c.refuse = false;
    o->ops->resume(o, &c.sink);
    assert_int_equal(sc.resumes, 1);
    assert_int_equal(sc.sink->ops->on_data(sc.sink, in + 100000, 100000), 100000);
    c.refuse = true;
    sc.sink->ops->on_end(sc.sink, UM_OK);
    assert_int_equal(c.ended, 0); /* the tail waits for the client */
    c.refuse = false;
    o->ops->resume(o, &c.sink);
    assert_int_equal(c.ended, 1);
    assert_int_equal(c.err, UM_OK);
    static char back[sizeof(in) + 16];
    z_stream z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(inflateInit2(&z, 16 + 15), Z_OK);
    z.next_in = (Bytef *)c.body.base;
    z.avail_in = (uInt)c.body.len;
    z.next_out = (Bytef *)back;
    z.avail_out = sizeof(back);
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    assert_int_equal(z.total_out, sizeof(in));
    assert_memory_equal(back, in, sizeof(in));
    inflateEnd(&z);
    o->ops->destroy(o);
    um_buf_dispose(&c.body);
}

static void test_origin_passes_what_it_does_not_compress(void **state)
{
    (void)state;
    struct script sc = {.content_length = 5, .ct = "text/plain"}; /* under min_size */
    struct client c;
    struct um_origin *o = start(&sc, &c, "gzip");
    assert_string_equal(c.coding, "");
    assert_int_equal(sc.sink->ops->on_data(sc.sink, "hello", 5), 5);
    sc.sink->ops->on_end(sc.sink, UM_OK);
    assert_int_equal(c.ended, 1);
    assert_int_equal(c.body.len, 5);
    assert_memory_equal(c.body.base, "hello", 5);
    o->ops->destroy(o);
    um_buf_dispose(&c.body);

    struct script sc2 = {.content_length = 5000, .ct = "image/png"};
    o = start(&sc2, &c, "gzip");
    assert_string_equal(c.coding, "");
    sc2.sink->ops->on_end(sc2.sink, UM_OK);
    assert_int_equal(c.ended, 1);
    o->ops->destroy(o);
    um_buf_dispose(&c.body);
}

int main(void)
{
    um_modules_init(); /* the modules' settings, as the server's main does */
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
        cmocka_unit_test(test_flush_makes_all_input_decodable),
        cmocka_unit_test(test_origin_flushes_when_the_origin_runs_dry),
        cmocka_unit_test(test_origin_failing_encoder_cuts_the_body),
        cmocka_unit_test(test_origin_backpressure_and_resume),
        cmocka_unit_test(test_origin_passes_what_it_does_not_compress),
    };
    guard_init(&g, 4096, GUARD_AFTER);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    guard_dispose(&g);
    return failed;
}
