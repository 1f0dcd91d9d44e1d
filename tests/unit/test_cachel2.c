/* Unit tests for src/cache/l2value.c: the value a second-level cache keeps for an object,
 * encoded from a stored object and read back (every field, a body of several chunks),
 * and what reading refuses: another version, any truncation, trailing bytes, lengths
 * past the end, markers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/internal.h"
#include "umbra/buf.h"

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

static struct um_cache *mk(void)
{
    struct um_cache_opts o = {.memory_cap = 8 << 20, .shards = 4};
    return um_cache_create(&o);
}

/* A complete stored response: status 203, the given body, two tags, a Vary tag. */
static struct um_cache_obj *stored(struct um_cache *c, const char *body, size_t body_len)
{
    static const char vtag[] = {0, 0, 6, 'a', 'c', 'c', 'e', 'p', 't', 1, 0, 4, 't', 'e', 'x', 't'};
    struct um_cache_obj *o = um_cache_insert(c, S("h /k"), vtag, sizeof(vtag));
    assert_non_null(o);
    um_str tags[] = {S("t1"), S("product-17")};
    assert_int_equal(um_cache_obj_set_tags(o, tags, 2), UM_OK);
    const char head[] = "Content-Type: text/plain\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n";
    struct meta base = {.status = 203,
                        .times = {.request_time = 1000, .response_time = 1001,
                                  .date_value = 999, .age_value = 5},
                        .lifetime = 60,
                        .content_length = (int64_t)body_len};
    size_t mlen;
    struct meta *m = um__cache_meta_build(&base, S(head), NULL, &mlen);
    assert_int_equal(um_cache_obj_set_head(o, m, mlen, head, strlen(head)), UM_OK);
    free(m);
    /* Several appends: the body spans chunks. */
    for (size_t off = 0; off < body_len;) {
        size_t n = body_len - off < 7000 ? body_len - off : 7000;
        assert_int_equal(um_cache_obj_append(o, body + off, n), UM_OK);
        off += n;
    }
    um_cache_obj_set_expires(o, 1055);
    um_cache_obj_set_stale_until(o, 4655);
    um_cache_obj_finish(o, true);
    return o;
}

static void test_round_trip(void **state)
{
    (void)state;
    struct um_cache *c = mk();
    size_t blen = 50000;
    char *body = malloc(blen);
    for (size_t i = 0; i < blen; i++)
        body[i] = (char)(i * 7 + 3);
    struct um_cache_obj *o = stored(c, body, blen);
    um_cache_obj_mark_stale(o);
    struct um_buf b;
    um_buf_init(&b);
    assert_true(um_cache_l2_encode(o, &b));
    assert_int_equal(b.base[0], L2_VERSION);

    struct l2_value v;
    assert_true(um__cache_l2_decode(b.base, b.len, &v));
    assert_true(v.stale);
    assert_int_equal(v.status, 203);
    assert_int_equal(v.times.request_time, 1000);
    assert_int_equal(v.times.response_time, 1001);
    assert_int_equal(v.times.date_value, 999);
    assert_int_equal(v.times.age_value, 5);
    assert_int_equal(v.lifetime, 60);
    assert_int_equal(v.expires, 1055);
    assert_int_equal(v.stale_until, 4655);
    um_str vt = um_cache_obj_tag(o);
    assert_int_equal(v.tag.len, vt.len);
    assert_memory_equal(v.tag.base, vt.base, vt.len);
    assert_int_equal(v.ntags, 2);
    assert_true(um_str_eq(v.tags[0], "t1") || um_str_eq(v.tags[1], "t1"));
    assert_true(um_str_eq(v.tags[0], "product-17") || um_str_eq(v.tags[1], "product-17"));
    assert_true(um_str_eq(v.head, "Content-Type: text/plain\r\nETag: \"v1\"\r\n"
                                  "Cache-Control: max-age=60\r\n"));
    assert_int_equal(v.body.len, blen);
    assert_memory_equal(v.body.base, body, blen);

    /* Every truncation is refused, and so are trailing bytes. */
    for (size_t n = 0; n < b.len; n += (n < 200 ? 1 : 997))
        assert_false(um__cache_l2_decode(b.base, n, &v));
    um_buf_append(&b, "x", 1);
    assert_false(um__cache_l2_decode(b.base, b.len, &v));
    b.len--;
    /* Another version is a miss. */
    b.base[0] = L2_VERSION + 1;
    assert_false(um__cache_l2_decode(b.base, b.len, &v));
    b.base[0] = L2_VERSION;
    assert_true(um__cache_l2_decode(b.base, b.len, &v));
    /* A length that runs past the end (the tag's, at offset 60) is refused. */
    b.base[60] = (char)0xff;
    b.base[61] = (char)0xff;
    assert_false(um__cache_l2_decode(b.base, b.len, &v));

    um_buf_dispose(&b);
    free(body);
    um_cache_obj_unref(o);
    um_cache_destroy(c);
}

static void test_empty_body_and_no_tags(void **state)
{
    (void)state;
    struct um_cache *c = mk();
    struct um_cache_obj *o = um_cache_insert(c, S("h /e"), "\0", 1);
    struct meta base = {.status = 204, .lifetime = 10};
    size_t mlen;
    struct meta *m = um__cache_meta_build(&base, S(""), NULL, &mlen);
    assert_int_equal(um_cache_obj_set_head(o, m, mlen, "", 0), UM_OK);
    free(m);
    um_cache_obj_finish(o, true);
    struct um_buf b;
    um_buf_init(&b);
    assert_true(um_cache_l2_encode(o, &b));
    struct l2_value v;
    assert_true(um__cache_l2_decode(b.base, b.len, &v));
    assert_false(v.stale);
    assert_int_equal(v.status, 204);
    assert_int_equal(v.ntags, 0);
    assert_int_equal(v.body.len, 0);
    assert_int_equal(v.head.len, 0);
    um_buf_dispose(&b);
    um_cache_obj_unref(o);
    um_cache_destroy(c);
}

static void test_not_encoded(void **state)
{
    (void)state;
    struct um_cache *c = mk();
    struct um_buf b;
    um_buf_init(&b);
    /* Still filling: nothing. */
    struct um_cache_obj *o = um_cache_insert(c, S("h /f"), "\0", 1);
    assert_false(um_cache_l2_encode(o, &b));
    /* A hit-for-pass marker: nothing. */
    struct meta base = {.flags = META_F_PASS, .content_length = -1};
    size_t mlen;
    struct meta *m = um__cache_meta_build(&base, S(""), NULL, &mlen);
    assert_int_equal(um_cache_obj_set_head(o, m, mlen, "", 0), UM_OK);
    free(m);
    um_cache_obj_finish(o, true);
    assert_false(um_cache_l2_encode(o, &b));
    assert_int_equal(b.len, 0);
    um_cache_obj_unref(o);
    /* A value whose Vary tag says "marker" or "pending" is refused when read. */
    struct um_cache_obj *ok = stored(c, "abc", 3);
    assert_true(um_cache_l2_encode(ok, &b));
    struct l2_value v;
    assert_true(um__cache_l2_decode(b.base, b.len, &v));
    size_t tag_at = 1 + 1 + 2 + 7 * 8 + 4; /* version, flags, status, times, tag length */
    b.base[tag_at] = TAG_PASS;
    assert_false(um__cache_l2_decode(b.base, b.len, &v));
    b.base[tag_at] = TAG_PENDING;
    assert_false(um__cache_l2_decode(b.base, b.len, &v));
    um_buf_dispose(&b);
    um_cache_obj_unref(ok);
    um_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_body_and_no_tags),
        cmocka_unit_test(test_not_encoded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
