/* Unit tests for src/cache/policy*.c: the HTTP caching rules (RFC 9111, RFC 5861, RFC 8246),
 * conditional requests (RFC 9110 13) and Cache-Status (RFC 9211).
 *
 * Times are parameters everywhere, so expiry is tested by arithmetic, never by sleeping.
 * Section numbers in comments are RFC 9111 unless another RFC is named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "guard.h"
#include "umbra/cachepolicy.h"

/* ---- fixtures ------------------------------------------------------------------------- */

/* 2023-11-14T22:13:20Z */
#define D ((time_t)1700000000)
#define DATE_D "Tue, 14 Nov 2023 22:13:20 GMT"
#define DATE_D_PLUS_300 "Tue, 14 Nov 2023 22:18:20 GMT"
#define DATE_D_PLUS_3600 "Tue, 14 Nov 2023 23:13:20 GMT"
#define DATE_D_PLUS_3660 "Tue, 14 Nov 2023 23:14:20 GMT"
#define DATE_D_MINUS_1000 "Tue, 14 Nov 2023 21:56:40 GMT"
#define DATE_D_MINUS_10D "Sat, 04 Nov 2023 22:13:20 GMT"
#define DATE_D_MINUS_30 "Tue, 14 Nov 2023 22:12:50 GMT"
#define DATE_D_PLUS_10 "Tue, 14 Nov 2023 22:13:30 GMT"

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOKV ((const char *const[]){NULL})

struct hdrs {
    struct um_header h[40];
    size_t n;
};

static void set_hdrs(struct hdrs *hs, const char *const *kv)
{
    hs->n = 0;
    for (size_t i = 0; kv[i] != NULL; i += 2) {
        assert_true(hs->n < UM_NELEMS(hs->h));
        hs->h[hs->n].name = (um_str){kv[i], strlen(kv[i])};
        hs->h[hs->n].value = (um_str){kv[i + 1], strlen(kv[i + 1])};
        hs->n++;
    }
}

static um_str S(const char *s)
{
    return (um_str){s, strlen(s)};
}

/* Request and response metas over static header arrays (the metas point into them). */
static struct hdrs RQ, RS;
static struct um_req_meta REQ;
static struct um_resp_meta RESP;

static const struct um_req_meta *req(enum um_method m, const char *const *kv)
{
    set_hdrs(&RQ, kv);
    um_req_meta_scan(&REQ, m, RQ.h, RQ.n);
    return &REQ;
}

static const struct um_resp_meta *resp(int status, const char *const *kv)
{
    set_hdrs(&RS, kv);
    um_resp_meta_scan(&RESP, status, RS.h, RS.n);
    return &RESP;
}

static struct um_cache_policy pol_default(void)
{
    struct um_cache_policy p;
    um_cache_policy_init(&p);
    return p;
}

/* Cache-Control values are parsed from right before a PROT_NONE page. */
static struct guard G;
static bool G_ready;

static struct um_cc cc_of(const char *s)
{
    if (!G_ready) {
        guard_init(&G, 4096, GUARD_AFTER);
        G_ready = true;
    }
    size_t n = strlen(s);
    struct um_cc cc;
    um_cc_init(&cc);
    um_cc_parse(&cc, (um_str){guard_put(&G, s, n), n});
    return cc;
}

/* ---- Cache-Control parsing ------------------------------------------------------------ */

static void test_cc_init_absent(void **state)
{
    struct um_cc cc;
    um_cc_init(&cc);
    assert_false(cc.present);
    assert_int_equal(cc.max_age, -1);
    assert_int_equal(cc.s_maxage, -1);
    assert_int_equal(cc.max_stale, -1);
    assert_int_equal(cc.min_fresh, -1);
    assert_int_equal(cc.stale_while_revalidate, -1);
    assert_int_equal(cc.stale_if_error, -1);
    assert_false(cc.no_store || cc.no_cache || cc.private_ || cc.public_);
}

static void test_cc_all_flags(void **state)
{
    struct um_cc cc = cc_of("no-store, no-cache, private, public, must-revalidate, "
                            "proxy-revalidate, must-understand, no-transform, immutable, "
                            "only-if-cached");
    assert_true(cc.present);
    assert_true(cc.no_store);
    assert_true(cc.no_cache);
    assert_true(cc.private_);
    assert_true(cc.public_);
    assert_true(cc.must_revalidate);
    assert_true(cc.proxy_revalidate);
    assert_true(cc.must_understand);
    assert_true(cc.no_transform);
    assert_true(cc.immutable);
    assert_true(cc.only_if_cached);
    assert_int_equal(cc.no_cache_nfields, 0);
    assert_int_equal(cc.private_nfields, 0);
}

static void test_cc_case_insensitive(void **state)
{
    struct um_cc cc = cc_of("MAX-AGE=60, No-Store, S-MaxAge=5, PUBLIC");
    assert_int_equal(cc.max_age, 60);
    assert_int_equal(cc.s_maxage, 5);
    assert_true(cc.no_store);
    assert_true(cc.public_);
}

static void test_cc_numbers(void **state)
{
    struct um_cc cc = cc_of("max-age=60, s-maxage=30, max-stale=5, min-fresh=7, "
                            "stale-while-revalidate=10, stale-if-error=20");
    assert_int_equal(cc.max_age, 60);
    assert_int_equal(cc.s_maxage, 30);
    assert_int_equal(cc.max_stale, 5);
    assert_int_equal(cc.min_fresh, 7);
    assert_int_equal(cc.stale_while_revalidate, 10);
    assert_int_equal(cc.stale_if_error, 20);
    assert_int_equal(cc.invalid, 0);
    /* Leading zeros are digits too. */
    assert_int_equal(cc_of("max-age=007").max_age, 7);
    assert_int_equal(cc_of("max-age=0").max_age, 0);
}

static void test_cc_quoted_values_tolerated(void **state)
{
    /* 5.2: "recipients ought to accept both forms". */
    struct um_cc cc = cc_of("max-age=\"60\", s-maxage=\"10\", stale-if-error=\"5\"");
    assert_int_equal(cc.max_age, 60);
    assert_int_equal(cc.s_maxage, 10);
    assert_int_equal(cc.stale_if_error, 5);
    assert_int_equal(cc.invalid, 0);
}

static void test_cc_max_stale_without_value(void **state)
{
    /* 5.2.1.2: no value means any staleness. */
    assert_int_equal(cc_of("max-stale").max_stale, UM_DELTA_MAX);
    /* A bounded repeat is the tighter one. */
    assert_int_equal(cc_of("max-stale, max-stale=10").max_stale, 10);
    assert_int_equal(cc_of("max-stale=10, max-stale").max_stale, 10);
}

static void test_cc_saturation(void **state)
{
    /* 1.2.2: values too large become 2^31. */
    assert_int_equal(cc_of("max-age=2147483647").max_age, 2147483647);
    assert_int_equal(cc_of("max-age=2147483648").max_age, UM_DELTA_MAX);
    assert_int_equal(cc_of("max-age=2147483649").max_age, UM_DELTA_MAX);
    assert_int_equal(cc_of("max-age=99999999999999999999999999999999").max_age, UM_DELTA_MAX);
    assert_int_equal(cc_of("stale-if-error=99999999999999999999").stale_if_error, UM_DELTA_MAX);
}

static void test_cc_invalid_max_age_is_stale(void **state)
{
    /* 4.2.1: "Caches are encouraged to consider responses that have invalid freshness
     * information (e.g., a max-age directive with non-integer content) to be stale." */
    const char *bad[] = {
        "max-age=abc", "max-age=-1",       "max-age=",   "max-age",     "max-age=1.5",
        "max-age=60s", "max-age=\"6\\0\"", "max-age=+5", "max-age=\"\""};
    for (size_t i = 0; i < UM_NELEMS(bad); i++) {
        struct um_cc cc = cc_of(bad[i]);
        if (cc.max_age != 0) fail_msg("%s -> %lld", bad[i], (long long)cc.max_age);
        assert_true(cc.invalid & UM_CC_INVALID_MAX_AGE);
    }
    struct um_cc cc = cc_of("s-maxage=x");
    assert_int_equal(cc.s_maxage, 0);
    assert_true(cc.invalid & UM_CC_INVALID_S_MAXAGE);
}

static void test_cc_invalid_relaxing_values_ignored(void **state)
{
    /* Directives that only widen what is served are dropped when their value is bad. */
    assert_int_equal(cc_of("min-fresh=abc").min_fresh, -1);
    assert_int_equal(cc_of("min-fresh").min_fresh, -1);
    assert_int_equal(cc_of("stale-if-error=x").stale_if_error, -1);
    assert_int_equal(cc_of("stale-while-revalidate").stale_while_revalidate, -1);
    assert_int_equal(cc_of("max-stale=-3").max_stale, -1);
    assert_true(cc_of("max-stale=-3").invalid & UM_CC_INVALID_OTHER);
}

static void test_cc_duplicates_most_restrictive(void **state)
{
    /* Same value twice: fine. */
    assert_int_equal(cc_of("max-age=60, max-age=60").max_age, 60);
    /* 4.2.1: disagreeing repeats -> stale. */
    assert_int_equal(cc_of("max-age=60, max-age=30").max_age, 0);
    assert_int_equal(cc_of("max-age=30, max-age=60").max_age, 0);
    assert_int_equal(cc_of("s-maxage=10, s-maxage=20").s_maxage, 0);
    assert_int_equal(cc_of("max-age=abc, max-age=60").max_age, 0);
    /* Relaxing directives: the tighter; min-fresh: the larger. */
    assert_int_equal(cc_of("max-stale=10, max-stale=5").max_stale, 5);
    assert_int_equal(cc_of("min-fresh=5, min-fresh=10").min_fresh, 10);
    assert_int_equal(
        cc_of("stale-while-revalidate=30, stale-while-revalidate=10").stale_while_revalidate, 10);
    assert_int_equal(cc_of("stale-if-error=30,stale-if-error=40").stale_if_error, 30);
}

static void test_cc_accumulates_over_lines(void **state)
{
    struct um_cc cc;
    um_cc_init(&cc);
    um_cc_parse(&cc, S("max-age=60"));
    um_cc_parse(&cc, S("no-transform"));
    um_cc_parse(&cc, S("max-age=120"));
    assert_true(cc.no_transform);
    assert_int_equal(cc.max_age, 0); /* two lines that disagree */
    um_cc_init(&cc);
    um_cc_parse(&cc, S("private=\"X-A\""));
    um_cc_parse(&cc, S("private=\"X-B\""));
    assert_false(cc.private_);
    assert_int_equal(cc.private_nfields, 2);
}

static void test_cc_qualified_lists(void **state)
{
    struct um_cc cc = cc_of("no-cache=\"Set-Cookie, X-Foo\", private=\"X-User\"");
    assert_false(cc.no_cache);
    assert_false(cc.private_);
    assert_int_equal(cc.no_cache_nfields, 2);
    assert_int_equal(cc.private_nfields, 1);
    assert_true(um_cc_lists_field(&cc, S("set-cookie")));
    assert_true(um_cc_lists_field(&cc, S("X-FOO")));
    assert_true(um_cc_lists_field(&cc, S("x-user")));
    assert_false(um_cc_lists_field(&cc, S("x-other")));
    /* Token form: "recipients ought to accept both forms". */
    cc = cc_of("private=Set-Cookie");
    assert_false(cc.private_);
    assert_true(um_cc_lists_field(&cc, S("Set-Cookie")));
    /* Empty elements in the list, OWS, and duplicates. */
    cc = cc_of("no-cache=\" , a ,, A, b \"");
    assert_false(cc.no_cache);
    assert_int_equal(cc.no_cache_nfields, 2);
}

static void test_cc_qualified_lists_degrade_to_unqualified(void **state)
{
    /* Anything we cannot keep exactly becomes the unqualified (more restrictive) form. */
    struct um_cc cc = cc_of("private=\"a1,a2,a3,a4,a5,a6,a7,a8,a9\"");
    assert_true(cc.private_);
    cc = cc_of("no-cache=\"a b\"");
    assert_true(cc.no_cache);
    cc = cc_of("no-cache=\"\"");
    assert_true(cc.no_cache);
    cc = cc_of("no-cache=\"X\\-Foo\"");
    assert_true(cc.no_cache);
    cc = cc_of("no-cache=\"Set-Cookie"); /* unterminated */
    assert_true(cc.no_cache);
    cc = cc_of("private=");
    assert_true(cc.private_);
    /* An unqualified one overrides a qualified one, in either order. */
    cc = cc_of("private=\"x\", private");
    assert_true(cc.private_);
    cc = cc_of("no-cache, no-cache=\"x\"");
    assert_true(cc.no_cache);
}

static void test_cc_garbage_and_extensions_ignored(void **state)
{
    struct um_cc cc = cc_of(",,, , max-age=5 ,, foo=bar, \"junk\", =7, ext=\"a,b\", no-store,");
    assert_int_equal(cc.max_age, 5);
    assert_true(cc.no_store);
    assert_false(cc.no_cache || cc.private_ || cc.public_);
    /* A comma inside a quoted-string does not split the list. */
    cc = cc_of("foo=\"max-age=1, no-store\", public");
    assert_false(cc.no_store);
    assert_int_equal(cc.max_age, -1);
    assert_true(cc.public_);
    /* Nor does an escaped quote end the string. */
    cc = cc_of("foo=\"a\\\", no-store\", max-age=3");
    assert_false(cc.no_store);
    assert_int_equal(cc.max_age, 3);
    cc = cc_of("");
    assert_true(cc.present);
    assert_int_equal(cc.max_age, -1);
    cc = cc_of("   ");
    assert_int_equal(cc.max_age, -1);
    /* Unknown directives that look like known ones are not them. */
    cc = cc_of("no-stores, max-ages=5, xmax-age=5");
    assert_false(cc.no_store);
    assert_int_equal(cc.max_age, -1);
}

static void test_cc_empty_slices(void **state)
{
    struct um_cc cc;
    um_cc_init(&cc);
    um_cc_parse(&cc, (um_str){NULL, 0});
    assert_true(cc.present);
    assert_int_equal(cc.max_age, -1);
    struct um_vary v;
    um_vary_init(&v);
    um_vary_parse(&v, (um_str){NULL, 0});
    assert_int_equal(v.n, 0);
    assert_true(um_vary_usable(&v));
}

static void test_cc_arguments_on_flags(void **state)
{
    /* Restrictive flags hold whatever follows; permissive ones need to be bare. */
    assert_true(cc_of("no-store=1").no_store);
    assert_true(cc_of("must-revalidate=\"x\"").must_revalidate);
    assert_true(cc_of("no-store junk").no_store);
    assert_false(cc_of("public=1").public_);
    assert_false(cc_of("public junk").public_);
    assert_false(cc_of("immutable=\"yes\"").immutable);
    assert_false(cc_of("must-understand=1").must_understand);
    assert_true(cc_of("public=1").invalid & UM_CC_INVALID_OTHER);
}

static void test_cc_malformed_members(void **state)
{
    /* Trailing junk makes a max-age malformed: stale. */
    assert_int_equal(cc_of("max-age=60 60").max_age, 0);
    assert_int_equal(cc_of("max-age=60;foo").max_age, 0);
    /* OWS around "=" is tolerated. */
    assert_int_equal(cc_of("max-age = 60").max_age, 60);
    assert_int_equal(cc_of("max-age=\t60\t, public").max_age, 60);
    /* Control bytes and non-ASCII are just garbage. */
    struct um_cc cc = cc_of("\x01\xff, max-age=4");
    assert_int_equal(cc.max_age, 4);
}

/* ---- message scans ----------------------------------------------------------------------- */

static void test_resp_meta_scan(void **state)
{
    const struct um_resp_meta *m =
        resp(200, KV("Date", DATE_D, "Expires", DATE_D_PLUS_300, "Last-Modified", DATE_D_MINUS_1000,
                     "ETag", "\"v1\"", "Age", "12", "Cache-Control", "max-age=5", "Vary",
                     "Accept-Encoding", "Set-Cookie", "a=b"));
    assert_int_equal(m->status, 200);
    assert_true(m->has_date);
    assert_int_equal(m->date, D);
    assert_true(m->has_expires && m->expires_valid);
    assert_int_equal(m->expires, D + 300);
    assert_true(m->has_last_modified);
    assert_int_equal(m->last_modified, D - 1000);
    assert_true(um_str_eq(m->etag, "\"v1\""));
    assert_int_equal(m->age_value, 12);
    assert_int_equal(m->cc.max_age, 5);
    assert_int_equal(m->vary.n, 1);
    assert_true(m->has_set_cookie);
}

static void test_resp_meta_bad_fields(void **state)
{
    const struct um_resp_meta *m =
        resp(200, KV("Date", "yesterday", "Expires", "0", "Last-Modified", "soon", "ETag",
                     "v1-unquoted", "Age", "abc"));
    assert_false(m->has_date);
    assert_true(m->has_expires);
    assert_false(m->expires_valid);
    assert_false(m->has_last_modified);
    assert_null(m->etag.base);
    assert_int_equal(m->age_value, 0); /* 5.1: an invalid Age is ignored */
    m = resp(200, KV("ETag", "W/\"w\"", "ETag", "\"second\"", "Age", "10, 20", "Age", "99"));
    assert_true(um_str_eq(m->etag, "W/\"w\""));
    assert_int_equal(m->age_value, 10); /* 5.1: the first member of a list, the first line */
    m = resp(200, KV("Age", "-1"));
    assert_int_equal(m->age_value, 0);
    m = resp(200, KV("Age", "-5"));
    assert_int_equal(m->age_value, 0);
    m = resp(200, KV("Age", "1.5"));
    assert_int_equal(m->age_value, 0);
    m = resp(200, KV("Age", "99999999999999"));
    assert_int_equal(m->age_value, UM_DELTA_MAX); /* valid but too large: 2^31 */
    m = resp(200, NOKV);
    assert_int_equal(m->age_value, 0);
    assert_false(m->has_expires);
}

static void test_req_meta_pragma(void **state)
{
    /* 5.4: Pragma: no-cache counts only when there is no Cache-Control. */
    assert_true(req(UM_METHOD_GET, KV("Pragma", "no-cache"))->cc.no_cache);
    assert_true(req(UM_METHOD_GET, KV("Pragma", "foo, No-Cache"))->cc.no_cache);
    assert_false(
        req(UM_METHOD_GET, KV("Pragma", "no-cache", "Cache-Control", "max-stale"))->cc.no_cache);
    assert_false(req(UM_METHOD_GET, KV("Cache-Control", "", "Pragma", "no-cache"))->cc.no_cache);
    assert_false(req(UM_METHOD_GET, KV("Pragma", "no-cache=1"))->cc.no_cache);
    assert_false(req(UM_METHOD_GET, KV("Pragma", "x=\"no-cache\""))->cc.no_cache);
    assert_true(req(UM_METHOD_GET, KV("Authorization", "Basic eA=="))->has_authorization);
    assert_false(req(UM_METHOD_GET, NOKV)->has_authorization);
}

/* ---- storability (section 3) ------------------------------------------------------------- */

static enum um_nostore store(enum um_method m, const char *const *rq, int status,
                             const char *const *rs)
{
    struct um_cache_policy p = pol_default();
    req(m, rq);
    resp(status, rs);
    return um_cache_storable(&REQ, &RESP, &p, D);
}

static enum um_nostore store_pol(const struct um_cache_policy *p, int status, const char *const *rs)
{
    req(UM_METHOD_GET, NOKV);
    resp(status, rs);
    return um_cache_storable(&REQ, &RESP, p, D);
}

#define MAXAGE KV("Cache-Control", "max-age=60")

static void test_store_basic(void **state)
{
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, MAXAGE), UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("Expires", DATE_D_PLUS_300)), UM_STORABLE);
}

static void test_store_method(void **state)
{
    assert_int_equal(store(UM_METHOD_POST, NOKV, 200, MAXAGE), UM_NOSTORE_METHOD);
    assert_int_equal(store(UM_METHOD_HEAD, NOKV, 200, MAXAGE), UM_NOSTORE_METHOD);
    assert_int_equal(store(UM_METHOD_OTHER, NOKV, 200, MAXAGE), UM_NOSTORE_METHOD);
}

static void test_store_status(void **state)
{
    assert_int_equal(store(UM_METHOD_GET, NOKV, 100, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 199, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 304, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 206, MAXAGE), UM_NOSTORE_PARTIAL);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 600, MAXAGE), UM_NOSTORE_STATUS);
    /* RFC 6585: MUST NOT be stored, whatever the directives say. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 429, KV("Cache-Control", "public, max-age=60")),
                     UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 428, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 431, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 511, MAXAGE), UM_NOSTORE_STATUS);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 407, MAXAGE), UM_NOSTORE_STATUS);
}

static void test_store_no_store(void **state)
{
    assert_int_equal(store(UM_METHOD_GET, KV("Cache-Control", "no-store"), 200, MAXAGE),
                     UM_NOSTORE_REQUEST_NO_STORE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "max-age=60, no-store")),
                     UM_NOSTORE_NO_STORE);
    /* no-store beats public. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "public, no-store")),
                     UM_NOSTORE_NO_STORE);
}

static void test_store_must_understand(void **state)
{
    /* 5.2.2.3: a cache that implements the status ignores no-store. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200,
                           KV("Cache-Control", "must-understand, no-store, max-age=60")),
                     UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 404,
                           KV("Cache-Control", "must-understand, no-store", "ETag", "\"a\"")),
                     UM_STORABLE);
    /* One that does not: not stored, even with explicit freshness. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 299,
                           KV("Cache-Control", "must-understand, no-store, max-age=60")),
                     UM_NOSTORE_MUST_UNDERSTAND);
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 418, KV("Cache-Control", "must-understand, max-age=60")),
        UM_NOSTORE_MUST_UNDERSTAND);
    /* A valued must-understand does not count: no-store holds. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200,
                           KV("Cache-Control", "must-understand=1, no-store, max-age=60")),
                     UM_NOSTORE_NO_STORE);
    /* Without must-understand an unknown status may be stored when explicitly fresh. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 299, MAXAGE), UM_STORABLE);
}

static void test_store_private(void **state)
{
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "private, max-age=60")),
                     UM_NOSTORE_PRIVATE);
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "public, private, max-age=60")),
        UM_NOSTORE_PRIVATE);
    /* Qualified: stored, without the listed fields. */
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200,
              KV("Cache-Control", "private=\"X-User\", max-age=60", "X-User", "alice")),
        UM_STORABLE);
    assert_false(um_cache_field_storable(S("x-user"), &RESP));
    assert_true(um_cache_field_storable(S("Content-Type"), &RESP));
}

static void test_store_authorization(void **state)
{
    const char *const *auth = KV("Authorization", "Bearer t");
    /* 3.5: only with a directive that allows a shared cache to store it. */
    assert_int_equal(store(UM_METHOD_GET, auth, 200, MAXAGE), UM_NOSTORE_AUTHORIZATION);
    assert_int_equal(store(UM_METHOD_GET, auth, 200, KV("Cache-Control", "public, max-age=60")),
                     UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, auth, 200, KV("Cache-Control", "s-maxage=60")),
                     UM_STORABLE);
    assert_int_equal(
        store(UM_METHOD_GET, auth, 200, KV("Cache-Control", "must-revalidate, max-age=60")),
        UM_STORABLE);
    /* A malformed s-maxage makes the response stale but does not share it. */
    assert_int_equal(
        store(UM_METHOD_GET, auth, 200, KV("Cache-Control", "s-maxage=soon", "ETag", "\"a\"")),
        UM_NOSTORE_AUTHORIZATION);
    /* proxy-revalidate alone is not one of them. */
    assert_int_equal(
        store(UM_METHOD_GET, auth, 200, KV("Cache-Control", "proxy-revalidate, max-age=60")),
        UM_NOSTORE_AUTHORIZATION);
}

static void test_store_set_cookie(void **state)
{
    /* Our choice: a cookie is shared only on an explicit opt-in. */
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "max-age=60", "Set-Cookie", "sid=1")),
        UM_NOSTORE_SET_COOKIE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200,
                           KV("Last-Modified", DATE_D_MINUS_1000, "Set-Cookie", "sid=1")),
                     UM_NOSTORE_SET_COOKIE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200,
                           KV("Cache-Control", "public, max-age=60", "Set-Cookie", "ab=B")),
                     UM_STORABLE);
    assert_true(um_cache_field_storable(S("Set-Cookie"), &RESP)); /* 3.1: kept as received */
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "s-maxage=60", "Set-Cookie", "ab=B")),
        UM_STORABLE);
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200,
              KV("Cache-Control", "max-age=60, private=\"Set-Cookie\"", "Set-Cookie", "sid=1")),
        UM_STORABLE);
    assert_false(um_cache_field_storable(S("set-cookie"), &RESP));
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200,
              KV("Cache-Control", "max-age=60, no-cache=\"set-cookie\"", "Set-Cookie", "sid=1")),
        UM_STORABLE);
    assert_false(um_cache_field_storable(S("Set-Cookie"), &RESP));
}

static void test_store_vary(void **state)
{
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "max-age=60", "Vary", "*")),
        UM_NOSTORE_VARY);
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200,
              KV("Cache-Control", "max-age=60", "Vary", "Accept-Encoding", "Vary", "Origin, *")),
        UM_NOSTORE_VARY);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200,
                           KV("Cache-Control", "max-age=60", "Vary", "Accept-Encoding")),
                     UM_STORABLE);
    assert_int_equal(
        store(UM_METHOD_GET, NOKV, 200,
              KV("Cache-Control", "max-age=60", "Vary", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q")),
        UM_NOSTORE_VARY);
}

static void test_store_cacheability(void **state)
{
    /* Section 3: explicit freshness, public or a heuristically cacheable status. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 302, KV("ETag", "\"a\"")), UM_NOSTORE_UNCACHEABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 302, MAXAGE), UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 307, KV("Expires", DATE_D_PLUS_300)), UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 500, KV("Last-Modified", DATE_D_MINUS_1000)),
                     UM_NOSTORE_UNCACHEABLE);
    /* public makes it heuristically cacheable (5.2.2.9). */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 302,
                           KV("Cache-Control", "public", "Last-Modified", DATE_D_MINUS_1000)),
                     UM_STORABLE);
    /* Heuristically cacheable statuses without any freshness but with a validator. */
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("ETag", "\"a\"")), UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 404, KV("Last-Modified", DATE_D_MINUS_1000)),
                     UM_STORABLE);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 451, KV("ETag", "\"a\"")), UM_STORABLE);
}

static void test_store_useless(void **state)
{
    struct um_cache_policy p = pol_default();
    /* Nothing to serve it with: no lifetime, no validator, no stale window. */
    assert_int_equal(store_pol(&p, 200, NOKV), UM_NOSTORE_USELESS);
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "max-age=0")), UM_NOSTORE_USELESS);
    assert_int_equal(store_pol(&p, 200, KV("Expires", "0")), UM_NOSTORE_USELESS);
    assert_int_equal(store_pol(&p, 200, KV("Expires", "0", "ETag", "\"a\"")), UM_STORABLE);
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "max-age=0, stale-if-error=60")),
                     UM_STORABLE);
    assert_int_equal(
        store_pol(&p, 200, KV("Cache-Control", "max-age=0, stale-if-error=60, must-revalidate")),
        UM_NOSTORE_USELESS);
    /* no-cache: every use asks the origin, so it needs a validator to be worth keeping. */
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "no-cache, max-age=600")),
                     UM_NOSTORE_USELESS);
    assert_int_equal(
        store_pol(&p, 200, KV("Cache-Control", "no-cache, max-age=600", "ETag", "\"a\"")),
        UM_STORABLE);
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "no-cache=\"X-A\", max-age=600")),
                     UM_STORABLE);
    p.stale_if_error = 30;
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "max-age=0")), UM_STORABLE);
    assert_int_equal(store_pol(&p, 200, KV("Cache-Control", "no-cache")), UM_NOSTORE_USELESS);
    /* The route's defaults. */
    p = pol_default();
    p.default_ttl = 600;
    assert_int_equal(store_pol(&p, 200, NOKV), UM_STORABLE);
    assert_int_equal(store_pol(&p, 404, NOKV), UM_NOSTORE_USELESS);
    p.negative_ttl = 30;
    assert_int_equal(store_pol(&p, 404, NOKV), UM_STORABLE);
    /* Defaults never make a non-heuristically-cacheable status storable. */
    assert_int_equal(store_pol(&p, 302, NOKV), UM_NOSTORE_UNCACHEABLE);
    assert_int_equal(store_pol(&p, 500, NOKV), UM_NOSTORE_UNCACHEABLE);
}

static void test_store_order(void **state)
{
    /* The first rule that fails is the one reported. */
    assert_int_equal(
        store(UM_METHOD_POST, KV("Cache-Control", "no-store"), 200, KV("Cache-Control", "private")),
        UM_NOSTORE_METHOD);
    assert_int_equal(
        store(UM_METHOD_GET, KV("Cache-Control", "no-store"), 206, KV("Cache-Control", "private")),
        UM_NOSTORE_PARTIAL);
    assert_int_equal(store(UM_METHOD_GET, NOKV, 200, KV("Cache-Control", "no-store, private")),
                     UM_NOSTORE_NO_STORE);
}

static void test_field_storable(void **state)
{
    resp(200, KV("Connection", "close, X-Hop", "Cache-Control", "no-cache=\"X-Nc\"", "X-Hop", "1"));
    const char *no[] = {"Connection",
                        "keep-alive",
                        "Proxy-Connection",
                        "TE",
                        "Transfer-Encoding",
                        "Upgrade",
                        "Proxy-Authenticate",
                        "Proxy-Authentication-Info",
                        "Proxy-Authorization",
                        "Age",
                        "x-hop",
                        "X-NC"};
    for (size_t i = 0; i < UM_NELEMS(no); i++)
        if (um_cache_field_storable(S(no[i]), &RESP)) fail_msg("%s storable", no[i]);
    const char *yes[] = {"Content-Type",     "ETag",    "Date",
                         "Cache-Control",    "Vary",    "X-Other",
                         "Content-Encoding", "Expires", "Last-Modified"};
    for (size_t i = 0; i < UM_NELEMS(yes); i++)
        if (!um_cache_field_storable(S(yes[i]), &RESP)) fail_msg("%s not storable", yes[i]);
}

/* Connection may name fields on several lines, in any case, with odd whitespace; a field
 * named there is not stored whether it comes before or after the line. */
static void test_field_storable_connection_lines(void **state)
{
    resp(200, KV("X-Early", "1", "connection", " X-EARLY ,,\tx-mid  ", "X-Mid", "2",
                 "CONNECTION", "x-late", "X-Late", "3", "X-Lately", "4"));
    assert_true(RESP.has_connection);
    const char *no[] = {"x-early", "X-Early", "X-MID", "x-late", "X-LATE"};
    for (size_t i = 0; i < UM_NELEMS(no); i++) {
        if (um_cache_field_storable(S(no[i]), &RESP)) fail_msg("%s storable", no[i]);
        if (um_cache_field_storable_id(S(no[i]), um_http_field_id(S(no[i])), &RESP))
            fail_msg("%s storable (id)", no[i]);
    }
    const char *yes[] = {"X-Lately", "X-Ear", "Content-Type"};
    for (size_t i = 0; i < UM_NELEMS(yes); i++)
        if (!um_cache_field_storable(S(yes[i]), &RESP)) fail_msg("%s not storable", yes[i]);
    /* Without a Connection line, only the fixed list and Cache-Control's names. */
    resp(200, KV("X-Early", "1", "Cache-Control", "private=\"x-early\"", "X-Late", "2"));
    assert_false(RESP.has_connection);
    assert_false(um_cache_field_storable(S("X-EARLY"), &RESP));
    assert_true(um_cache_field_storable(S("X-Late"), &RESP));
    assert_false(um_cache_field_storable(S("KEEP-ALIVE"), &RESP));
    assert_false(um_cache_field_storable(S("proxy-authentication-info"), &RESP));
}

static void test_nostore_strings(void **state)
{
    assert_string_equal(um_cache_nostore_str(UM_NOSTORE_NO_STORE), "no-store");
    assert_string_equal(um_cache_nostore_str(UM_NOSTORE_PRIVATE), "private");
    assert_string_equal(um_cache_nostore_str(UM_STORABLE), "storable");
    for (int r = UM_STORABLE; r <= UM_NOSTORE_USELESS; r++)
        assert_string_not_equal(um_cache_nostore_str((enum um_nostore)r), "unknown");
    assert_string_equal(um_cache_use_str(UM_USE_STALE_WHILE_REVALIDATE), "stale-while-revalidate");
}

static void test_heuristic_statuses(void **state)
{
    const int yes[] = {200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 451, 501};
    const int no[] = {201, 202, 205, 302, 303, 307, 400, 401, 403, 500, 502, 503, 504};
    for (size_t i = 0; i < UM_NELEMS(yes); i++)
        assert_true(um_status_heuristically_cacheable(yes[i]));
    for (size_t i = 0; i < UM_NELEMS(no); i++)
        assert_false(um_status_heuristically_cacheable(no[i]));
}

/* ---- freshness lifetime (4.2.1, 4.2.2) -------------------------------------------------- */

static int64_t lifetime(const struct um_cache_policy *p, int status, const char *const *rs,
                        time_t response_time, enum um_fresh_source *src)
{
    resp(status, rs);
    return um_freshness_lifetime(&RESP, p, response_time, src);
}

static void test_lifetime_precedence(void **state)
{
    struct um_cache_policy p = pol_default();
    p.default_ttl = 999;
    enum um_fresh_source src;
    const char *const *all = KV("Date", DATE_D, "Cache-Control", "max-age=50, s-maxage=100",
                                "Expires", DATE_D_PLUS_300, "Last-Modified", DATE_D_MINUS_1000);
    assert_int_equal(lifetime(&p, 200, all, D, &src), 100);
    assert_int_equal(src, UM_FRESH_S_MAXAGE);
    assert_int_equal(lifetime(&p, 200,
                              KV("Date", DATE_D, "Cache-Control", "max-age=50", "Expires",
                                 DATE_D_PLUS_300, "Last-Modified", DATE_D_MINUS_1000),
                              D, &src),
                     50);
    assert_int_equal(src, UM_FRESH_MAX_AGE);
    assert_int_equal(
        lifetime(&p, 200,
                 KV("Date", DATE_D, "Expires", DATE_D_PLUS_300, "Last-Modified", DATE_D_MINUS_1000),
                 D, &src),
        300);
    assert_int_equal(src, UM_FRESH_EXPIRES);
    /* A configured default comes before the Last-Modified heuristic (both are guesses;
     * the configured one is the operator's). */
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000), D, &src), 999);
    assert_int_equal(src, UM_FRESH_DEFAULT);
    assert_int_equal(lifetime(&p, 200, KV("Date", DATE_D), D, &src), 999);
    assert_int_equal(src, UM_FRESH_DEFAULT);
    p.default_ttl = 0;
    assert_int_equal(lifetime(&p, 200, KV("Date", DATE_D), D, &src), 0);
    assert_int_equal(src, UM_FRESH_NONE);
    /* src may be NULL. */
    assert_int_equal(lifetime(&p, 200, all, D, NULL), 100);
}

static void test_lifetime_zero_max_age_beats_expires(void **state)
{
    struct um_cache_policy p = pol_default();
    enum um_fresh_source src;
    /* 5.3: with max-age present Expires is ignored, even when max-age is 0. */
    assert_int_equal(
        lifetime(&p, 200,
                 KV("Date", DATE_D, "Expires", DATE_D_PLUS_300, "Cache-Control", "max-age=0"), D,
                 &src),
        0);
    assert_int_equal(src, UM_FRESH_MAX_AGE);
    /* And s-maxage=0 beats max-age for a shared cache. */
    assert_int_equal(lifetime(&p, 200, KV("Cache-Control", "max-age=600, s-maxage=0"), D, &src), 0);
    assert_int_equal(src, UM_FRESH_S_MAXAGE);
}

static void test_lifetime_expires_edge_cases(void **state)
{
    struct um_cache_policy p = pol_default();
    enum um_fresh_source src;
    /* 5.3: an invalid Expires, "0" above all, is already expired - even with Last-Modified,
     * since it is explicit expiry and heuristics are then not allowed. */
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Expires", "0", "Last-Modified", DATE_D_MINUS_1000), D,
                 &src),
        0);
    assert_int_equal(src, UM_FRESH_EXPIRES);
    assert_int_equal(lifetime(&p, 200, KV("Date", DATE_D, "Expires", "-1"), D, NULL), 0);
    /* In the past. */
    assert_int_equal(lifetime(&p, 200, KV("Date", DATE_D, "Expires", DATE_D_MINUS_1000), D, NULL),
                     0);
    /* No Date: the time of receipt stands in (RFC 9110 6.6.1). */
    assert_int_equal(lifetime(&p, 200, KV("Expires", DATE_D_PLUS_300), D + 100, NULL), 200);
    /* An unparseable Date is no Date. */
    assert_int_equal(lifetime(&p, 200, KV("Date", "now", "Expires", DATE_D_PLUS_300), D, NULL),
                     300);
    /* Repeated lines: identical is fine, disagreeing is stale (4.2.1). */
    assert_int_equal(
        lifetime(&p, 200,
                 KV("Date", DATE_D, "Expires", DATE_D_PLUS_300, "Expires", DATE_D_PLUS_300), D,
                 NULL),
        300);
    assert_int_equal(
        lifetime(&p, 200,
                 KV("Date", DATE_D, "Expires", DATE_D_PLUS_300, "Expires", DATE_D_PLUS_3600), D,
                 NULL),
        0);
    /* Far future saturates at 2^31. */
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Expires", "Fri, 31 Dec 9999 23:59:59 GMT"), D, NULL),
        UM_DELTA_MAX);
}

static void test_lifetime_clock_skew(void **state)
{
    /* 4.2.1: Expires - Date uses only the origin's clock, so a Date an hour ahead of ours
     * changes nothing. */
    struct um_cache_policy p = pol_default();
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D_PLUS_3600, "Expires", DATE_D_PLUS_3660), D, NULL), 60);
}

static void test_lifetime_heuristic(void **state)
{
    struct um_cache_policy p = pol_default();
    enum um_fresh_source src;
    /* 10% of Date - Last-Modified. */
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000), D, NULL), 100);
    /* Capped (10 days -> 1 day, not 86400 * 10 / 10). */
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_10D), D, NULL), 86400);
    p.heuristic_max = 3600;
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_10D), D, NULL), 3600);
    /* Last-Modified after Date, or equal: nothing to go on. */
    p = pol_default();
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_PLUS_300), D, &src), 0);
    assert_int_equal(src, UM_FRESH_HEURISTIC);
    assert_int_equal(lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D), D, NULL), 0);
    /* No Date: from the time of receipt. */
    assert_int_equal(lifetime(&p, 200, KV("Last-Modified", DATE_D_MINUS_1000), D + 1000, NULL),
                     200);
    /* With a default set, or the heuristic off: the default applies. */
    p.default_ttl = 500;
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000), D, &src), 500);
    assert_int_equal(src, UM_FRESH_DEFAULT);
    p.heuristic_max = 0;
    assert_int_equal(
        lifetime(&p, 200, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000), D, &src), 500);
    assert_int_equal(src, UM_FRESH_DEFAULT);
}

static void test_lifetime_heuristic_only_when_allowed(void **state)
{
    struct um_cache_policy p = pol_default();
    p.default_ttl = 500;
    enum um_fresh_source src;
    /* 4.2.2: not for statuses that are not heuristically cacheable... */
    assert_int_equal(
        lifetime(&p, 302, KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000), D, &src), 0);
    assert_int_equal(src, UM_FRESH_NONE);
    assert_int_equal(lifetime(&p, 500, KV("Date", DATE_D), D, &src), 0);
    /* ...unless public (where the configured default, then the heuristic, applies). */
    assert_int_equal(
        lifetime(&p, 302,
                 KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000, "Cache-Control", "public"),
                 D, &src),
        500);
    assert_int_equal(src, UM_FRESH_DEFAULT);
    p.default_ttl = 0;
    assert_int_equal(
        lifetime(&p, 302,
                 KV("Date", DATE_D, "Last-Modified", DATE_D_MINUS_1000, "Cache-Control", "public"),
                 D, &src),
        100);
    assert_int_equal(src, UM_FRESH_HEURISTIC);
    p.default_ttl = 500;
    /* Heuristically cacheable errors use negative_ttl, not default_ttl. */
    assert_int_equal(lifetime(&p, 404, KV("Date", DATE_D), D, &src), 0);
    p.negative_ttl = 20;
    assert_int_equal(lifetime(&p, 410, KV("Date", DATE_D), D, &src), 20);
    assert_int_equal(src, UM_FRESH_DEFAULT);
    assert_int_equal(lifetime(&p, 301, KV("Date", DATE_D), D, NULL), 500);
}

static void test_lifetime_invalid_and_huge_max_age(void **state)
{
    struct um_cache_policy p = pol_default();
    assert_int_equal(
        lifetime(&p, 200,
                 KV("Cache-Control", "max-age=ten", "Expires", DATE_D_PLUS_300, "Date", DATE_D), D,
                 NULL),
        0);
    assert_int_equal(lifetime(&p, 200, KV("Cache-Control", "max-age=99999999999999"), D, NULL),
                     UM_DELTA_MAX);
}

/* ---- age (4.2.3) ------------------------------------------------------------------------ */

static int64_t age_of(time_t req_t, time_t resp_t, time_t date, int64_t age_value, time_t now)
{
    struct um_age_times t = {req_t, resp_t, date, age_value};
    return um_current_age(&t, now);
}

static void test_age_formula(void **state)
{
    /* apparent_age = max(0, 1002 - 998) = 4; response_delay = 1002 - 1000 = 2;
     * corrected_age_value = 0 + 2 = 2; corrected_initial_age = max(4, 2) = 4;
     * resident_time = 1010 - 1002 = 8; current_age = 12. */
    assert_int_equal(age_of(1000, 1002, 998, 0, 1010), 12);
    /* With Age: 30: corrected_age_value = 32 > 4, so 32 + 8 = 40. */
    assert_int_equal(age_of(1000, 1002, 998, 30, 1010), 40);
    /* Apparent age dominates a small Age: date 900 -> apparent 102, corrected 5+2 = 7;
     * 102 + 8 = 110. */
    assert_int_equal(age_of(1000, 1002, 900, 5, 1010), 110);
    /* Right at receipt. */
    assert_int_equal(age_of(1000, 1000, 1000, 0, 1000), 0);
}

static void test_age_clock_skew(void **state)
{
    /* Date 98 s in our future: apparent_age clamps to 0; only the delay counts: 2 + 8. */
    assert_int_equal(age_of(1000, 1002, 1100, 0, 1010), 10);
    /* Our clock stepped back: a negative residence counts as 0 (the 2 s delay remains),
     * and so does a negative delay. */
    assert_int_equal(age_of(1000, 1002, 1002, 0, 990), 2);
    assert_int_equal(age_of(1005, 1002, 1002, 0, 1002), 0);
}

static void test_age_saturation(void **state)
{
    /* An Age of 2^31 or more ("infinity") keeps the response at 2^31. */
    assert_int_equal(age_of(1000, 1002, 1000, UM_DELTA_MAX, 5000), UM_DELTA_MAX);
    assert_int_equal(age_of(0, 0, -INT64_C(100000000000), 0, INT64_C(100000000000)), UM_DELTA_MAX);
}

static void test_age_times_from_meta(void **state)
{
    struct um_age_times t;
    um_age_times_init(&t, resp(200, KV("Date", DATE_D, "Age", "7")), D + 1, D + 3);
    assert_int_equal(t.request_time, D + 1);
    assert_int_equal(t.response_time, D + 3);
    assert_int_equal(t.date_value, D);
    assert_int_equal(t.age_value, 7);
    /* max(3, 7 + 2) + 10 */
    assert_int_equal(um_current_age(&t, D + 13), 19);
    /* Without Date, date_value is the response time. */
    um_age_times_init(&t, resp(200, NOKV), D, D);
    assert_int_equal(t.date_value, D);
    assert_int_equal(t.age_value, 0);
}

static void test_is_fresh(void **state)
{
    assert_true(um_is_fresh(60, 59));
    assert_false(um_is_fresh(60, 60));
    assert_false(um_is_fresh(0, 0));
}

/* ---- reuse decision (4, 5.2.1, RFC 5861, RFC 8246) --------------------------------------- */

static struct um_cc STORED_CC;

static enum um_cache_use use3(const char *stored_cc, int64_t life, int64_t age, bool validator,
                              const char *const *rq)
{
    STORED_CC = cc_of(stored_cc);
    struct um_stored_view v = {&STORED_CC, life, age, validator};
    return um_cache_decide(&v, req(UM_METHOD_GET, rq));
}

static enum um_cache_use use(const char *stored_cc, int64_t life, int64_t age,
                             const char *const *rq)
{
    return use3(stored_cc, life, age, true, rq);
}

#define RCC(v) KV("Cache-Control", v)

static void test_use_fresh_and_stale(void **state)
{
    assert_int_equal(use("max-age=100", 100, 99, NOKV), UM_USE_FRESH);
    assert_int_equal(use("max-age=100", 100, 100, NOKV), UM_USE_REVALIDATE);
    assert_int_equal(use3("max-age=100", 100, 150, false, NOKV), UM_USE_MISS);
    assert_int_equal(um_cache_decide(NULL, req(UM_METHOD_GET, NOKV)), UM_USE_MISS);
}

static void test_use_request_no_cache(void **state)
{
    /* 5.2.1.4 */
    assert_int_equal(use("max-age=100", 100, 1, RCC("no-cache")), UM_USE_REVALIDATE);
    assert_int_equal(use3("max-age=100", 100, 1, false, RCC("no-cache")), UM_USE_MISS);
    /* 5.4 */
    assert_int_equal(use("max-age=100", 100, 1, KV("Pragma", "no-cache")), UM_USE_REVALIDATE);
    assert_int_equal(
        use("max-age=100", 100, 1, KV("Pragma", "no-cache", "Cache-Control", "max-stale")),
        UM_USE_FRESH);
}

static void test_use_response_no_cache(void **state)
{
    /* 5.2.2.4: unqualified: always validate, fresh or not. */
    assert_int_equal(use("no-cache, max-age=100", 100, 1, NOKV), UM_USE_REVALIDATE);
    /* Qualified: reusable (the fields were never stored). */
    assert_int_equal(use("no-cache=\"Set-Cookie\", max-age=100", 100, 1, NOKV), UM_USE_FRESH);
}

static void test_use_request_max_age(void **state)
{
    /* 5.2.1.1: "age is less than or equal to". */
    assert_int_equal(use("max-age=100", 100, 10, RCC("max-age=10")), UM_USE_FRESH);
    assert_int_equal(use("max-age=100", 100, 11, RCC("max-age=10")), UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100", 100, 1, RCC("max-age=0")), UM_USE_REVALIDATE);
    /* A stale response is not wanted without max-stale even within max-age. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=600", 100, 150, RCC("max-age=200")),
                     UM_USE_REVALIDATE);
    /* With max-stale, both bounds apply. */
    assert_int_equal(use("max-age=100", 100, 150, RCC("max-age=200, max-stale")), UM_USE_STALE);
    assert_int_equal(use("max-age=100", 100, 150, RCC("max-age=120, max-stale")),
                     UM_USE_REVALIDATE);
}

static void test_use_immutable(void **state)
{
    /* RFC 8246: a reload (max-age=0) of a fresh immutable response needs no validation... */
    assert_int_equal(use("max-age=100, immutable", 100, 50, RCC("max-age=0")), UM_USE_FRESH);
    /* ...a forced reload (no-cache) still does... */
    assert_int_equal(use("max-age=100, immutable", 100, 50,
                         KV("Cache-Control", "no-cache", "Pragma", "no-cache")),
                     UM_USE_REVALIDATE);
    /* ...and once stale it is like any other. */
    assert_int_equal(use("max-age=100, immutable", 100, 150, RCC("max-age=0")), UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100, immutable", 100, 150, NOKV), UM_USE_REVALIDATE);
}

static void test_use_min_fresh(void **state)
{
    /* 5.2.1.3: lifetime >= age + min-fresh. */
    assert_int_equal(use("max-age=100", 100, 50, RCC("min-fresh=50")), UM_USE_FRESH);
    assert_int_equal(use("max-age=100", 100, 50, RCC("min-fresh=51")), UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100, stale-while-revalidate=60", 100, 101, RCC("min-fresh=0")),
                     UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100", 100, 101, RCC("min-fresh=0, max-stale")),
                     UM_USE_REVALIDATE);
}

static void test_use_max_stale(void **state)
{
    /* 5.2.1.2: stale by 10. */
    assert_int_equal(use("max-age=100", 100, 110, RCC("max-stale=10")), UM_USE_STALE);
    assert_int_equal(use("max-age=100", 100, 110, RCC("max-stale=9")), UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100", 100, 100000, RCC("max-stale")), UM_USE_STALE);
    assert_int_equal(use3("max-age=100", 100, 110, false, RCC("max-stale=9")), UM_USE_MISS);
}

static void test_use_stale_forbidden(void **state)
{
    /* 4.2.4: must-revalidate, proxy-revalidate and s-maxage forbid stale, whatever the
     * client or stale-while-revalidate allow. */
    const char *forbid[] = {"max-age=100, must-revalidate, stale-while-revalidate=600",
                            "max-age=100, proxy-revalidate, stale-while-revalidate=600",
                            "s-maxage=100, stale-while-revalidate=600",
                            "max-age=100, no-cache, stale-while-revalidate=600"};
    for (size_t i = 0; i < UM_NELEMS(forbid); i++) {
        assert_int_equal(use(forbid[i], 100, 110, RCC("max-stale")), UM_USE_REVALIDATE);
        assert_int_equal(use(forbid[i], 100, 110, NOKV), UM_USE_REVALIDATE);
    }
    /* Fresh, they change nothing (except no-cache). */
    assert_int_equal(use("max-age=100, must-revalidate", 100, 10, NOKV), UM_USE_FRESH);
    assert_int_equal(use("s-maxage=100", 100, 10, NOKV), UM_USE_FRESH);
}

static void test_use_stale_while_revalidate(void **state)
{
    /* RFC 5861 3: stale by up to the window. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 130, NOKV),
                     UM_USE_STALE_WHILE_REVALIDATE);
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 131, NOKV),
                     UM_USE_REVALIDATE);
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 100, NOKV),
                     UM_USE_STALE_WHILE_REVALIDATE);
    assert_int_equal(use("max-age=100, stale-while-revalidate=0", 100, 101, NOKV),
                     UM_USE_REVALIDATE);
    /* Without validators the refresh is a full fetch; still served stale meanwhile. */
    assert_int_equal(use3("max-age=100, stale-while-revalidate=30", 100, 110, false, NOKV),
                     UM_USE_STALE_WHILE_REVALIDATE);
    /* Client max-stale within both: served and refreshed. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 110, RCC("max-stale=100")),
                     UM_USE_STALE_WHILE_REVALIDATE);
    /* Client max-stale tighter than the window: the client wins. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 110, RCC("max-stale=5")),
                     UM_USE_REVALIDATE);
    /* Client max-stale wider than the window: plain stale. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 200, RCC("max-stale=100")),
                     UM_USE_STALE);
    /* Client no-cache: validation first. */
    assert_int_equal(use("max-age=100, stale-while-revalidate=30", 100, 110, RCC("no-cache")),
                     UM_USE_REVALIDATE);
}

static void test_use_only_if_cached(void **state)
{
    /* 5.2.1.7: a stored response consistent with the request, or 504. */
    assert_int_equal(um_cache_decide(NULL, req(UM_METHOD_GET, RCC("only-if-cached"))),
                     UM_USE_GATEWAY_TIMEOUT);
    assert_int_equal(use("max-age=100", 100, 1, RCC("only-if-cached")), UM_USE_FRESH);
    assert_int_equal(use("max-age=100", 100, 101, RCC("only-if-cached")), UM_USE_GATEWAY_TIMEOUT);
    assert_int_equal(use3("max-age=100", 100, 101, false, RCC("only-if-cached")),
                     UM_USE_GATEWAY_TIMEOUT);
    assert_int_equal(use("max-age=100", 100, 101, RCC("only-if-cached, max-stale")), UM_USE_STALE);
    assert_int_equal(use("max-age=100, stale-while-revalidate=9", 100, 101, RCC("only-if-cached")),
                     UM_USE_STALE_WHILE_REVALIDATE);
    assert_int_equal(use("no-cache", 100, 1, RCC("only-if-cached")), UM_USE_GATEWAY_TIMEOUT);
}

/* ---- stale-if-error (RFC 5861 4) ------------------------------------------------------- */

static bool sie(const char *stored_cc, int64_t life, int64_t age, const char *const *rq,
                int64_t pol_window, int origin_status)
{
    STORED_CC = cc_of(stored_cc);
    struct um_stored_view v = {&STORED_CC, life, age, true};
    struct um_cache_policy p = pol_default();
    p.stale_if_error = pol_window;
    return um_cache_stale_if_error_ok(&v, req(UM_METHOD_GET, rq), &p, origin_status);
}

static void test_sie_window(void **state)
{
    assert_true(sie("max-age=100, stale-if-error=60", 100, 130, NOKV, 0, 503));
    assert_true(sie("max-age=100, stale-if-error=60", 100, 160, NOKV, 0, 503));
    assert_false(sie("max-age=100, stale-if-error=60", 100, 161, NOKV, 0, 503));
    /* No window anywhere. */
    assert_false(sie("max-age=100", 100, 101, NOKV, 0, 503));
    /* The route's contract. */
    assert_true(sie("max-age=100", 100, 400, NOKV, 300, 503));
    assert_false(sie("max-age=100", 100, 401, NOKV, 300, 503));
    /* The response's own window beats the route's. */
    assert_false(sie("max-age=100, stale-if-error=10", 100, 150, NOKV, 300, 503));
}

static void test_sie_statuses(void **state)
{
    const char *cc = "max-age=100, stale-if-error=60";
    const int yes[] = {0, 500, 502, 503, 504};
    const int no[] = {200, 404, 501, 505, 429};
    for (size_t i = 0; i < UM_NELEMS(yes); i++)
        assert_true(sie(cc, 100, 110, NOKV, 0, yes[i]));
    for (size_t i = 0; i < UM_NELEMS(no); i++)
        assert_false(sie(cc, 100, 110, NOKV, 0, no[i]));
}

static void test_sie_suppressed(void **state)
{
    /* 4.2.4, 5.2.2.2: must-revalidate and friends mean 504 when disconnected. */
    assert_false(sie("max-age=100, stale-if-error=60, must-revalidate", 100, 110, NOKV, 0, 0));
    assert_false(sie("max-age=100, stale-if-error=60, proxy-revalidate", 100, 110, NOKV, 0, 0));
    assert_false(sie("s-maxage=100, stale-if-error=60", 100, 110, NOKV, 0, 0));
    assert_false(sie("max-age=100", 100, 110, NOKV, 600, 0) &&
                 sie("max-age=100, must-revalidate", 100, 110, NOKV, 600, 0));
    /* no-cache: not even a fresh one without validation. */
    assert_false(sie("max-age=100, no-cache, stale-if-error=60", 100, 10, NOKV, 0, 503));
    /* A fresh response is fine, must-revalidate or not. */
    assert_true(sie("max-age=100, must-revalidate", 100, 10, NOKV, 0, 503));
    assert_true(sie("max-age=100", 100, 10, NOKV, 0, 0));
    /* Nothing stored. */
    struct um_cache_policy p = pol_default();
    assert_false(um_cache_stale_if_error_ok(NULL, req(UM_METHOD_GET, NOKV), &p, 503));
}

static void test_sie_request_side(void **state)
{
    /* Request stale-if-error alone is consent. */
    assert_true(sie("max-age=100", 100, 150, RCC("stale-if-error=100"), 0, 502));
    /* Both: the smaller. */
    assert_false(sie("max-age=100, stale-if-error=60", 100, 130, RCC("stale-if-error=10"), 0, 502));
    assert_true(sie("max-age=100, stale-if-error=60", 100, 105, RCC("stale-if-error=10"), 0, 502));
    /* A client that asked for validation gets stale only with its own consent. */
    assert_false(sie("max-age=100, stale-if-error=60", 100, 110, RCC("no-cache"), 0, 502));
    assert_false(sie("max-age=100, stale-if-error=60", 100, 110, KV("Pragma", "no-cache"), 0, 502));
    assert_false(sie("max-age=100, stale-if-error=60", 100, 110, RCC("max-age=0"), 0, 502));
    assert_true(sie("max-age=100, stale-if-error=60", 100, 110, RCC("no-cache, stale-if-error=30"),
                    0, 502));
    /* A client bound on staleness holds. */
    assert_false(sie("max-age=100, stale-if-error=60", 100, 130, RCC("max-stale=5"), 0, 502));
}

/* ---- Vary (4.1) --------------------------------------------------------------------------- */

static void test_vary_parse(void **state)
{
    struct um_vary v;
    um_vary_init(&v);
    um_vary_parse(&v, S("Accept-Encoding, accept-encoding , User-Agent,,"));
    assert_int_equal(v.n, 2);
    assert_true(um_str_eq(v.names[0], "Accept-Encoding"));
    assert_true(um_str_eq(v.names[1], "User-Agent"));
    assert_true(um_vary_usable(&v));
    um_vary_parse(&v, S("ORIGIN"));
    assert_int_equal(v.n, 3);
    um_vary_init(&v);
    um_vary_parse(&v, S("*"));
    assert_true(v.star);
    assert_false(um_vary_usable(&v));
    um_vary_init(&v);
    um_vary_parse(&v, S("Accept, *"));
    assert_false(um_vary_usable(&v));
    um_vary_init(&v);
    um_vary_parse(&v, S("Accept Encoding"));
    assert_true(v.bad);
    um_vary_init(&v);
    um_vary_parse(&v, S(""));
    assert_true(um_vary_usable(&v));
    assert_int_equal(v.n, 0);
}

static void test_vary_parse_limit(void **state)
{
    struct um_vary v;
    um_vary_init(&v);
    um_vary_parse(&v, S("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p"));
    assert_int_equal(v.n, UM_VARY_MAX);
    assert_true(um_vary_usable(&v));
    um_vary_parse(&v, S("A, q"));
    assert_true(v.bad);
}

static const char *norm(const char *name, const char *const *kv, bool *present)
{
    static char out[256];
    set_hdrs(&RQ, kv);
    size_t n = um_vary_normalize(S(name), RQ.h, RQ.n, out, sizeof(out), present);
    assert_true(n < sizeof(out));
    assert_int_equal(strlen(out), n);
    return out;
}

static void test_vary_normalize_lists(void **state)
{
    bool p;
    assert_string_equal(norm("Accept-Encoding", KV("accept-encoding", "GZip ,  BR;Q=0.5"), &p),
                        "gzip,br;q=0.5");
    assert_true(p);
    /* Lines combined; empty members dropped. */
    assert_string_equal(norm("accept-encoding",
                             KV("Accept-Encoding", "gzip", "X", "y", "Accept-Encoding", ",, br ,"),
                             &p),
                        "gzip,br");
    assert_string_equal(norm("Accept-Language", KV("Accept-Language", "en-US, fr ; q=0.5"), &p),
                        "en-us,fr;q=0.5");
    assert_string_equal(norm("Accept-Charset", KV("Accept-Charset", "UTF-8"), &p), "utf-8");
    /* Accept: media types and parameter names fold, parameter values do not. */
    assert_string_equal(norm("Accept", KV("Accept", "Text/HTML;Charset=UTF-8 ; Q=0.9, */*"), &p),
                        "text/html;charset=UTF-8;q=0.9,*/*");
    assert_string_equal(norm("Accept", KV("Accept", "text/x;p=\"A,  B\""), &p),
                        "text/x;p=\"A,  B\"");
}

static void test_vary_normalize_generic(void **state)
{
    bool p;
    assert_string_equal(norm("User-Agent", KV("User-Agent", "Mozilla/5.0   (X11;\t Linux)"), &p),
                        "Mozilla/5.0 (X11; Linux)");
    assert_string_equal(norm("X-Thing", KV("X-Thing", "A", "x-thing", "b  c"), &p), "A, b c");
    assert_string_equal(norm("X-Q", KV("X-Q", "\"a   b\"  c"), &p), "\"a   b\" c");
    assert_string_equal(norm("Cookie", KV("Cookie", " a=1 ;; b=2", "Cookie", "c=3;"), &p),
                        "a=1; b=2; c=3");
}

static void test_vary_normalize_absent_vs_empty(void **state)
{
    bool p = true;
    assert_string_equal(norm("Accept-Encoding", KV("Accept", "x"), &p), "");
    assert_false(p);
    assert_string_equal(norm("Accept-Encoding", KV("Accept-Encoding", ""), &p), "");
    assert_true(p);
}

static void test_vary_normalize_truncation(void **state)
{
    bool p;
    char out[5];
    set_hdrs(&RQ, KV("Accept-Encoding", "gzip, deflate, br"));
    size_t n = um_vary_normalize(S("accept-encoding"), RQ.h, RQ.n, out, sizeof(out), &p);
    assert_int_equal(n, strlen("gzip,deflate,br"));
    assert_string_equal(out, "gzip");
    /* Size query with no buffer. */
    assert_int_equal(um_vary_normalize(S("accept-encoding"), RQ.h, RQ.n, NULL, 0, &p), n);
}

static bool vmatch(const char *const *filler, const char *const *later, const char *names)
{
    /* Stores the filler's normalised values for each name, then matches later against them. */
    static char bufs[4][128];
    struct um_vary v;
    struct um_vary_value vals[4];
    um_vary_init(&v);
    um_vary_parse(&v, S(names));
    assert_true(v.n <= 4);
    struct hdrs fh;
    set_hdrs(&fh, filler);
    for (size_t i = 0; i < v.n; i++) {
        bool present;
        size_t n = um_vary_normalize(v.names[i], fh.h, fh.n, bufs[i], sizeof(bufs[i]), &present);
        assert_true(n < sizeof(bufs[i]));
        vals[i] = (struct um_vary_value){v.names[i], {bufs[i], n}, present};
    }
    struct hdrs lh;
    set_hdrs(&lh, later);
    return um_vary_matches(vals, v.n, lh.h, lh.n);
}

static void test_vary_matches(void **state)
{
    const char *const *gz = KV("Accept-Encoding", "gzip, br");
    assert_true(vmatch(gz, KV("accept-encoding", "GZIP,BR"), "Accept-Encoding"));
    assert_true(
        vmatch(gz, KV("Accept-Encoding", "gzip", "Accept-Encoding", "br"), "Accept-Encoding"));
    assert_false(vmatch(gz, KV("Accept-Encoding", "br, gzip"), "Accept-Encoding")); /* order */
    assert_false(vmatch(gz, KV("Accept-Encoding", "gzip"), "Accept-Encoding"));
    assert_false(vmatch(gz, KV("Accept-Encoding", "gzip, br, zstd"), "Accept-Encoding"));
    assert_false(vmatch(gz, NOKV, "Accept-Encoding"));
    assert_true(vmatch(NOKV, KV("Other", "x"), "Accept-Encoding"));
    assert_false(vmatch(NOKV, KV("Accept-Encoding", ""), "Accept-Encoding"));
    /* Several names: all must match. */
    const char *const *two = KV("Accept-Language", "en", "Origin", "https://a.example");
    assert_true(vmatch(two, KV("Origin", "https://a.example", "Accept-Language", "EN"),
                       "Accept-Language, Origin"));
    assert_false(vmatch(two, KV("Origin", "https://b.example", "Accept-Language", "en"),
                        "Accept-Language, Origin"));
    /* Case matters where the grammar says so. */
    assert_false(vmatch(KV("X-Token", "abc"), KV("X-Token", "ABC"), "X-Token"));
    /* No Vary: anything matches. */
    assert_true(um_vary_matches(NULL, 0, NULL, 0));
}

static void test_vary_matches_prefix_is_not_match(void **state)
{
    /* The comparing emitter must not accept a prefix or an extension of the stored value. */
    assert_false(vmatch(KV("X-A", "abc"), KV("X-A", "ab"), "X-A"));
    assert_false(vmatch(KV("X-A", "ab"), KV("X-A", "abc"), "X-A"));
    assert_true(vmatch(KV("X-A", ""), KV("X-A", ""), "X-A"));
}

/* ---- 304 selection and update (4.3.4) ------------------------------------------------ */

static void test_304_select_strong(void **state)
{
    struct um_stored_validators s[] = {{S("\"a\""), false, 0, 10},
                                       {S("\"b\""), false, 0, 20},
                                       {S("\"a\""), false, 0, 30},
                                       {S("W/\"a\""), false, 0, 40}};
    size_t out[4];
    resp(304, KV("ETag", "\"a\""));
    assert_int_equal(um_cache_304_select(&RESP, s, 4, out), 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 2);
    /* Strong validator matching nothing: MUST NOT update anything. */
    resp(304, KV("ETag", "\"zzz\"", "Last-Modified", DATE_D));
    assert_int_equal(um_cache_304_select(&RESP, s, 4, out), 0);
}

static void test_304_select_weak(void **state)
{
    struct um_stored_validators s[] = {
        {S("\"a\""), false, 0, 10}, {S("W/\"a\""), false, 0, 50}, {S("\"b\""), false, 0, 99}};
    size_t out[3];
    resp(304, KV("ETag", "W/\"a\""));
    assert_int_equal(um_cache_304_select(&RESP, s, 3, out), 1);
    assert_int_equal(out[0], 1); /* the most recent of the two that match weakly */
    resp(304, KV("ETag", "W/\"c\""));
    assert_int_equal(um_cache_304_select(&RESP, s, 3, out), 0);
}

static void test_304_select_last_modified(void **state)
{
    struct um_stored_validators s[] = {
        {{NULL, 0}, true, D, 10}, {{NULL, 0}, true, D - 5, 20}, {{NULL, 0}, true, D, 15}};
    size_t out[3];
    resp(304, KV("Last-Modified", DATE_D));
    assert_int_equal(um_cache_304_select(&RESP, s, 3, out), 1);
    assert_int_equal(out[0], 2);
    resp(304, KV("Last-Modified", DATE_D_PLUS_10));
    assert_int_equal(um_cache_304_select(&RESP, s, 3, out), 0);
}

static void test_304_select_no_validator(void **state)
{
    size_t out[2];
    struct um_stored_validators bare[] = {{{NULL, 0}, false, 0, 1}, {{NULL, 0}, false, 0, 2}};
    struct um_stored_validators tagged[] = {{S("\"a\""), false, 0, 1}};
    resp(304, KV("Date", DATE_D));
    assert_int_equal(um_cache_304_select(&RESP, bare, 1, out), 1);
    assert_int_equal(out[0], 0);
    assert_int_equal(um_cache_304_select(&RESP, bare, 2, out), 0);
    assert_int_equal(um_cache_304_select(&RESP, tagged, 1, out), 0);
}

static void test_304_updatable_fields(void **state)
{
    resp(304, KV("Cache-Control", "max-age=60, private=\"X-User\"", "Connection", "X-Hop"));
    const char *no[] = {"Content-Length", "Content-Range", "Content-Encoding",  "Content-MD5",
                        "ETag",           "Connection",    "Transfer-Encoding", "Age",
                        "X-User",         "x-hop",         "Proxy-Authenticate"};
    const char *yes[] = {"Cache-Control", "Expires",          "Date",
                         "Last-Modified", "Content-Type",     "Vary",
                         "X-Custom",      "Content-Location", "Set-Cookie"};
    for (size_t i = 0; i < UM_NELEMS(no); i++)
        if (um_cache_field_updatable(S(no[i]), &RESP)) fail_msg("%s updatable", no[i]);
    for (size_t i = 0; i < UM_NELEMS(yes); i++)
        if (!um_cache_field_updatable(S(yes[i]), &RESP)) fail_msg("%s not updatable", yes[i]);
}

/* ---- invalidation (4.4) ----------------------------------------------------------------- */

static void test_invalidates(void **state)
{
    assert_true(um_cache_invalidates(UM_METHOD_POST, 200));
    assert_true(um_cache_invalidates(UM_METHOD_POST, 303));
    assert_true(um_cache_invalidates(UM_METHOD_PUT, 204));
    assert_true(um_cache_invalidates(UM_METHOD_DELETE, 200));
    assert_true(um_cache_invalidates(UM_METHOD_PATCH, 201));
    assert_true(um_cache_invalidates(UM_METHOD_OTHER, 200)); /* safety unknown */
    assert_false(um_cache_invalidates(UM_METHOD_POST, 404));
    assert_false(um_cache_invalidates(UM_METHOD_POST, 500));
    assert_false(um_cache_invalidates(UM_METHOD_POST, 100));
    assert_false(um_cache_invalidates(UM_METHOD_GET, 200));
    assert_false(um_cache_invalidates(UM_METHOD_HEAD, 200));
    assert_false(um_cache_invalidates(UM_METHOD_OPTIONS, 200));
    assert_false(um_cache_invalidates(UM_METHOD_TRACE, 200));
}

static void target_is(const char *scheme, const char *auth, const char *base, const char *value,
                      const char *want)
{
    char out[128];
    size_t len = 999;
    bool ok =
        um_cache_same_origin_target(S(scheme), S(auth), S(base), S(value), out, sizeof(out), &len);
    if (want == NULL) {
        if (ok) fail_msg("\"%s\" -> \"%s\", want refusal", value, out);
        return;
    }
    if (!ok) fail_msg("\"%s\" refused, want \"%s\"", value, want);
    if (strcmp(out, want) != 0 || len != strlen(want))
        fail_msg("\"%s\" -> \"%s\", want \"%s\"", value, out, want);
}

static void test_same_origin_absolute(void **state)
{
    const char *h = "http", *a = "example.com", *b = "/a/b/c?x=1";
    target_is(h, a, b, "http://example.com/p?q", "/p?q");
    target_is(h, a, b, "HTTP://EXAMPLE.COM:80/p", "/p");
    target_is(h, a, b, "http://example.com:/p", "/p");
    target_is(h, a, b, "http://example.com", "/");
    target_is(h, a, b, "http://example.com?q", "/?q");
    target_is(h, a, b, "http://example.com/x/../y#frag", "/y");
    target_is(h, "Example.COM:80", b, "http://example.com/p", "/p");
    target_is("https", a, b, "https://example.com:443/p", "/p");
    target_is("https", "example.com:8443", b, "https://example.com:8443/p", "/p");
    target_is(h, "[::1]:8080", b, "http://[::1]:8080/p", "/p");
    target_is(h, a, b, "//example.com/p", "/p");
}

static void test_same_origin_refused(void **state)
{
    const char *h = "http", *a = "example.com", *b = "/a/b/c";
    target_is(h, a, b, "http://example.com:8080/p", NULL);
    target_is(h, a, b, "https://example.com/p", NULL);
    target_is("https", a, b, "http://example.com/p", NULL);
    target_is(h, a, b, "http://other.com/p", NULL);
    target_is(h, a, b, "http://example.com.evil/p", NULL);
    target_is(h, a, b, "//other.com/p", NULL);
    target_is(h, a, b, "http://user@example.com/p", NULL);
    target_is(h, a, b, "http://example.com@evil.com/p", NULL);
    target_is(h, a, b, "http:/p", NULL);
    target_is(h, a, b, "mailto:x@example.com", NULL);
    target_is(h, a, b, "/p q", NULL);
    target_is(h, a, b, "/p\x7f", NULL);
    target_is(h, a, b, "http://example.com:99999/p", NULL);
    target_is(h, a, b, "http://[::1/p", NULL);
    target_is(h, a, b, "http:///p", NULL);
    /* Too long for the buffer. */
    char out[4];
    size_t len;
    assert_false(
        um_cache_same_origin_target(S(h), S(a), S(b), S("/abcdef"), out, sizeof(out), &len));
}

static void test_same_origin_relative(void **state)
{
    /* RFC 3986 5.2 against the request's path and query. */
    const char *h = "http", *a = "example.com", *b = "/a/b/c?x=1";
    target_is(h, a, b, "/x/./y/../z", "/x/z");
    target_is(h, a, b, "d", "/a/b/d");
    target_is(h, a, b, "./d/", "/a/b/d/");
    target_is(h, a, b, "../d?y", "/a/d?y");
    target_is(h, a, b, "../../../../x", "/x");
    target_is(h, a, b, "..", "/a/");
    target_is(h, a, b, ".", "/a/b/");
    target_is(h, a, b, "", "/a/b/c?x=1");
    target_is(h, a, b, "?y", "/a/b/c?y");
    target_is(h, a, b, "#frag", "/a/b/c?x=1");
    target_is(h, a, b, "/p#f", "/p");
    target_is(h, a, b, "g;x=1/../y", "/a/b/y");
    target_is(h, a, "/", "x", "/x");
    target_is(h, a, b, "  /trimmed  ", "/trimmed");
}

/* ---- conditional requests (RFC 9110 13.2.2) ------------------------------------------- */

static struct um_cond_stored stored200(void)
{
    struct um_cond_stored s = {.status = 200,
                               .etag = S("\"abc\""),
                               .has_last_modified = true,
                               .last_modified = D - 1000,
                               .has_date = true,
                               .date = D,
                               .response_time = D + 1,
                               .size = 1000};
    return s;
}

static int cond_m(enum um_method m, const char *const *rq, const struct um_cond_stored *s,
                  bool origin)
{
    uint64_t a = 12345, b = 12345;
    return um_cache_conditional(req(m, rq), s, origin, &a, &b);
}

static int cond(const char *const *rq)
{
    struct um_cond_stored s = stored200();
    return cond_m(UM_METHOD_GET, rq, &s, false);
}

static int ocond(enum um_method m, const char *const *rq)
{
    struct um_cond_stored s = stored200();
    return cond_m(m, rq, &s, true);
}

static void test_cond_none(void **state)
{
    assert_int_equal(cond(NOKV), 200);
    assert_int_equal(cond(KV("Accept", "*/*")), 200);
}

static void test_cond_if_none_match(void **state)
{
    /* 13.1.2: weak comparison; "*" matches any current representation. */
    assert_int_equal(cond(KV("If-None-Match", "\"abc\"")), 304);
    assert_int_equal(cond(KV("If-None-Match", "W/\"abc\"")), 304);
    assert_int_equal(cond(KV("If-None-Match", "\"x\", \"abc\"")), 304);
    assert_int_equal(cond(KV("If-None-Match", "\"x\"", "If-None-Match", "\"abc\"")), 304);
    assert_int_equal(cond(KV("If-None-Match", "*")), 304);
    assert_int_equal(cond(KV("If-None-Match", "\"x\"")), 200);
    assert_int_equal(cond(KV("If-None-Match", "abc")), 200); /* malformed: no match */
    struct um_cond_stored s = stored200();
    assert_int_equal(cond_m(UM_METHOD_HEAD, KV("If-None-Match", "\"abc\""), &s, false), 304);
    /* Other methods: 412 (an origin's case; a cache only serves GET/HEAD). */
    assert_int_equal(ocond(UM_METHOD_PUT, KV("If-None-Match", "*")), 412);
    assert_int_equal(ocond(UM_METHOD_POST, KV("If-None-Match", "\"abc\"")), 412);
    /* No stored ETag: only "*" matches. */
    s.etag = (um_str){NULL, 0};
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-None-Match", "\"abc\""), &s, false), 200);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-None-Match", "*"), &s, false), 304);
}

static void test_cond_if_modified_since(void **state)
{
    /* Last-Modified is D - 1000. 13.1.3: false (304) when LM <= the date. */
    assert_int_equal(cond(KV("If-Modified-Since", DATE_D_MINUS_1000)), 304);
    assert_int_equal(cond(KV("If-Modified-Since", DATE_D)), 304);
    assert_int_equal(cond(KV("If-Modified-Since", "Tue, 14 Nov 2023 21:56:39 GMT")), 200);
    /* Ignored: invalid date, several members, not GET/HEAD. */
    assert_int_equal(cond(KV("If-Modified-Since", "yesterday")), 200);
    assert_int_equal(cond(KV("If-Modified-Since", DATE_D, "If-Modified-Since", DATE_D)), 200);
    assert_int_equal(ocond(UM_METHOD_POST, KV("If-Modified-Since", DATE_D)), 200);
    struct um_cond_stored s = stored200();
    assert_int_equal(cond_m(UM_METHOD_HEAD, KV("If-Modified-Since", DATE_D), &s, false), 304);
}

static void test_cond_ims_without_last_modified(void **state)
{
    /* RFC 9111 4.3.2: a cache uses Date, then the time of receipt. */
    struct um_cond_stored s = stored200();
    s.has_last_modified = false;
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Modified-Since", DATE_D), &s, false), 304);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Modified-Since", DATE_D_MINUS_30), &s, false),
                     200);
    s.has_date = false; /* response_time is D + 1 */
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Modified-Since", DATE_D), &s, false), 200);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Modified-Since", DATE_D_PLUS_10), &s, false),
                     304);
    /* An origin without a modification date ignores the field (RFC 9110 13.1.3). */
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Modified-Since", DATE_D_PLUS_10), &s, true), 200);
}

static void test_cond_inm_beats_ims(void **state)
{
    /* 13.1.3: If-Modified-Since is ignored when If-None-Match is present. */
    assert_int_equal(cond(KV("If-None-Match", "\"x\"", "If-Modified-Since", DATE_D)), 200);
    assert_int_equal(cond(KV("If-Modified-Since", "yesterday", "If-None-Match", "\"abc\"")), 304);
}

static void test_cond_cache_forwards_if_match(void **state)
{
    /* RFC 9111 4.3.2: If-Match and If-Unmodified-Since are not for a cache. */
    assert_int_equal(cond(KV("If-Match", "\"abc\"")), 0);
    assert_int_equal(cond(KV("If-Unmodified-Since", DATE_D)), 0);
    assert_int_equal(cond(KV("If-Match", "*", "If-None-Match", "\"abc\"")), 0);
}

static void test_cond_origin_if_match(void **state)
{
    /* 13.1.1: strong comparison; "*" true with a current representation. */
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Match", "\"abc\"")), 200);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Match", "\"x\", \"abc\"")), 200);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Match", "*")), 200);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Match", "\"x\"")), 412);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Match", "W/\"abc\"")), 412);
    assert_int_equal(ocond(UM_METHOD_PUT, KV("If-Match", "\"x\"")), 412);
    struct um_cond_stored s = stored200();
    s.etag = S("W/\"abc\"");
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Match", "W/\"abc\""), &s, true), 412);
    s.etag = (um_str){NULL, 0};
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Match", "\"abc\""), &s, true), 412);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Match", "*"), &s, true), 200);
}

static void test_cond_origin_if_unmodified_since(void **state)
{
    /* 13.1.4: true when LM <= the date. */
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Unmodified-Since", DATE_D)), 200);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-Unmodified-Since", DATE_D_MINUS_1000)), 200);
    assert_int_equal(ocond(UM_METHOD_PUT, KV("If-Unmodified-Since", DATE_D_MINUS_10D)), 412);
    /* Ignored: invalid, a list, with If-Match, without a modification date. */
    assert_int_equal(ocond(UM_METHOD_PUT, KV("If-Unmodified-Since", "0")), 200);
    assert_int_equal(ocond(UM_METHOD_PUT, KV("If-Unmodified-Since", DATE_D_MINUS_10D,
                                             "If-Unmodified-Since", DATE_D_MINUS_10D)),
                     200);
    assert_int_equal(
        ocond(UM_METHOD_PUT, KV("If-Match", "\"abc\"", "If-Unmodified-Since", DATE_D_MINUS_10D)),
        200);
    struct um_cond_stored s = stored200();
    s.has_last_modified = false;
    assert_int_equal(cond_m(UM_METHOD_PUT, KV("If-Unmodified-Since", DATE_D_MINUS_10D), &s, true),
                     200);
}

static void test_cond_precedence(void **state)
{
    /* 13.2.2: If-Match before If-None-Match... */
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-None-Match", "\"abc\"", "If-Match", "\"x\"")),
                     412);
    assert_int_equal(ocond(UM_METHOD_GET, KV("If-None-Match", "\"abc\"", "If-Match", "\"abc\"")),
                     304);
    /* ...If-Unmodified-Since before If-None-Match... */
    assert_int_equal(ocond(UM_METHOD_GET,
                           KV("If-None-Match", "\"abc\"", "If-Unmodified-Since", DATE_D_MINUS_10D)),
                     412);
    assert_int_equal(
        ocond(UM_METHOD_GET, KV("If-None-Match", "\"abc\"", "If-Unmodified-Since", DATE_D)), 304);
    /* ...preconditions before Range. */
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-None-Match", "\"abc\"")), 304);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Modified-Since", DATE_D)), 304);
    assert_int_equal(ocond(UM_METHOD_GET, KV("Range", "bytes=0-9", "If-Match", "\"x\"")), 412);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-None-Match", "\"x\"")), 206);
}

static void test_cond_range(void **state)
{
    struct um_cond_stored s = stored200();
    uint64_t a = 0, b = 0;
    assert_int_equal(
        um_cache_conditional(req(UM_METHOD_GET, KV("Range", "bytes=0-99")), &s, false, &a, &b),
        206);
    assert_int_equal(a, 0);
    assert_int_equal(b, 99);
    assert_int_equal(
        um_cache_conditional(req(UM_METHOD_GET, KV("Range", "bytes=-10")), &s, false, &a, &b), 206);
    assert_int_equal(a, 990);
    assert_int_equal(b, 999);
    /* first/last may be NULL. */
    assert_int_equal(
        um_cache_conditional(req(UM_METHOD_GET, KV("Range", "bytes=0-1")), &s, false, NULL, NULL),
        206);
    assert_int_equal(cond(KV("Range", "bytes=2000-")), 416);
    assert_int_equal(cond(KV("Range", "bytes=0-1,5-6")), 200); /* one range only */
    assert_int_equal(cond(KV("Range", "items=0-1")), 200);     /* other unit */
    assert_int_equal(cond(KV("Range", "bytes=0-1", "Range", "bytes=0-1")), 200);
    /* Only GET (RFC 9110 14.2), only a stored 200. */
    assert_int_equal(cond_m(UM_METHOD_HEAD, KV("Range", "bytes=0-1"), &s, false), 200);
    s.status = 203;
    assert_int_equal(cond_m(UM_METHOD_GET, KV("Range", "bytes=0-1"), &s, true), 203);
}

static void test_cond_if_range(void **state)
{
    /* 13.1.5: entity tag strongly matched... */
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "\"abc\"")), 206);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "\"x\"")), 200);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "W/\"abc\"")), 200);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "\"abc\", \"x\"")), 200);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "\"abc")), 200);
    /* ...or a date equal to a strong Last-Modified (D - 1000 with Date D). */
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", DATE_D_MINUS_1000)), 206);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", DATE_D)), 200);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "garbage")), 200);
    assert_int_equal(cond(KV("Range", "bytes=0-9", "If-Range", "\"abc\"", "If-Range", "\"abc\"")),
                     200);
    /* Last-Modified 30 s before Date is weak (RFC 9110 8.8.2.2). */
    struct um_cond_stored s = stored200();
    s.last_modified = D - 30;
    assert_int_equal(
        cond_m(UM_METHOD_GET, KV("Range", "bytes=0-9", "If-Range", DATE_D_MINUS_30), &s, false),
        200);
    s.last_modified = D - 60;
    s.date = D;
    assert_int_equal(cond_m(UM_METHOD_GET,
                            KV("Range", "bytes=0-9", "If-Range", "Tue, 14 Nov 2023 22:12:20 GMT"),
                            &s, false),
                     206);
    /* Weak stored ETag: never matches If-Range. */
    s = stored200();
    s.etag = S("W/\"abc\"");
    assert_int_equal(
        cond_m(UM_METHOD_GET, KV("Range", "bytes=0-9", "If-Range", "\"abc\""), &s, false), 200);
    /* If-Range without Range is ignored; a failed If-Range means no 416 either. */
    assert_int_equal(cond(KV("If-Range", "\"x\"")), 200);
    assert_int_equal(cond(KV("Range", "bytes=5000-", "If-Range", "\"x\"")), 200);
}

static void test_cond_non_2xx_ignores_preconditions(void **state)
{
    /* RFC 9110 13.2.1: a stored 404 is sent as it is. */
    struct um_cond_stored s = stored200();
    s.status = 404;
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-None-Match", "*"), &s, false), 404);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-Match", "\"x\""), &s, false), 404);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("Range", "bytes=0-1"), &s, true), 404);
    /* A cache evaluates only against a stored 200; an origin against any 2xx. */
    s.status = 204;
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-None-Match", "\"abc\""), &s, false), 204);
    assert_int_equal(cond_m(UM_METHOD_GET, KV("If-None-Match", "\"abc\""), &s, true), 304);
}

/* ---- Cache-Status (RFC 9211) ------------------------------------------------------------ */

static const char *cstatus(const struct um_cache_status *cs)
{
    static char out[256];
    memset(out, 'x', sizeof(out));
    size_t n = um_cache_status_format(out, sizeof(out), cs);
    assert_true(n < sizeof(out));
    assert_int_equal(strlen(out), n);
    return out;
}

static void test_cache_status_hit(void **state)
{
    struct um_cache_status cs = {.cache_name = "umbra", .hit = true, .has_ttl = true, .ttl = 42};
    assert_string_equal(cstatus(&cs), "umbra; hit; ttl=42");
    cs.ttl = -5;
    assert_string_equal(cstatus(&cs), "umbra; hit; ttl=-5");
    /* fwd and its companions are not written with hit. */
    cs = (struct um_cache_status){
        .cache_name = "umbra", .hit = true, .fwd = UM_FWD_MISS, .fwd_status = 200, .stored = true};
    assert_string_equal(cstatus(&cs), "umbra; hit");
}

static void test_cache_status_fwd(void **state)
{
    struct um_cache_status cs = {.cache_name = "umbra",
                                 .fwd = UM_FWD_URI_MISS,
                                 .fwd_status = 200,
                                 .stored = true,
                                 .has_ttl = true,
                                 .ttl = 60};
    assert_string_equal(cstatus(&cs), "umbra; fwd=uri-miss; fwd-status=200; stored; ttl=60");
    cs = (struct um_cache_status){
        .cache_name = "umbra", .fwd = UM_FWD_STALE, .fwd_status = 304, .collapsed = true};
    assert_string_equal(cstatus(&cs), "umbra; fwd=stale; fwd-status=304; collapsed");
    const struct {
        enum um_cache_fwd f;
        const char *s;
    } all[] = {{UM_FWD_BYPASS, "umbra; fwd=bypass"},
               {UM_FWD_METHOD, "umbra; fwd=method"},
               {UM_FWD_URI_MISS, "umbra; fwd=uri-miss"},
               {UM_FWD_VARY_MISS, "umbra; fwd=vary-miss"},
               {UM_FWD_MISS, "umbra; fwd=miss"},
               {UM_FWD_REQUEST, "umbra; fwd=request"},
               {UM_FWD_STALE, "umbra; fwd=stale"},
               {UM_FWD_PARTIAL, "umbra; fwd=partial"},
               {UM_FWD_NONE, "umbra"}};
    for (size_t i = 0; i < UM_NELEMS(all); i++) {
        cs = (struct um_cache_status){.cache_name = "umbra", .fwd = all[i].f};
        assert_string_equal(cstatus(&cs), all[i].s);
    }
}

static void test_cache_status_strings(void **state)
{
    /* Not a token: an sf-string, with '"' and '\' escaped and non-ASCII replaced. */
    struct um_cache_status cs = {.cache_name = "my \"cache\"\\x", .fwd = UM_FWD_MISS};
    assert_string_equal(cstatus(&cs), "\"my \\\"cache\\\"\\\\x\"; fwd=miss");
    cs = (struct um_cache_status){.cache_name = "edge.example:8080/c", .hit = true};
    assert_string_equal(cstatus(&cs), "edge.example:8080/c; hit");
    cs = (struct um_cache_status){.cache_name = "1cache", .hit = true};
    assert_string_equal(cstatus(&cs), "\"1cache\"; hit");
    cs = (struct um_cache_status){.cache_name = NULL, .hit = true};
    assert_string_equal(cstatus(&cs), "umbra; hit");
    cs = (struct um_cache_status){.cache_name = "umbra", .fwd = UM_FWD_MISS, .detail = "no-store"};
    assert_string_equal(cstatus(&cs), "umbra; fwd=miss; detail=no-store");
    cs.detail = "a b";
    assert_string_equal(cstatus(&cs), "umbra; fwd=miss; detail=\"a b\"");
    cs = (struct um_cache_status){.cache_name = "umbra", .hit = true, .key = "/a\"b\xc3\xa9"};
    assert_string_equal(cstatus(&cs), "umbra; hit; key=\"/a\\\"b??\"");
}

static void test_cache_status_ttl_limits(void **state)
{
    /* sf-integer has at most 15 digits. */
    struct um_cache_status cs = {.cache_name = "c", .hit = true, .has_ttl = true, .ttl = INT64_MAX};
    assert_string_equal(cstatus(&cs), "c; hit; ttl=999999999999999");
    cs.ttl = INT64_MIN + 1;
    assert_string_equal(cstatus(&cs), "c; hit; ttl=-999999999999999");
    cs.ttl = 0;
    assert_string_equal(cstatus(&cs), "c; hit; ttl=0");
}

static void test_cache_status_truncation(void **state)
{
    struct um_cache_status cs = {.cache_name = "umbra", .fwd = UM_FWD_URI_MISS, .fwd_status = 200};
    const char *full = "umbra; fwd=uri-miss; fwd-status=200";
    char out[10];
    size_t n = um_cache_status_format(out, sizeof(out), &cs);
    assert_int_equal(n, strlen(full));
    assert_string_equal(out, "umbra; fw");
    assert_int_equal(um_cache_status_format(NULL, 0, &cs), strlen(full));
    /* A hit too (its short way writes only what fits whole). */
    cs = (struct um_cache_status){.cache_name = "umbra", .hit = true, .has_ttl = true, .ttl = 42};
    n = um_cache_status_format(out, sizeof(out), &cs);
    assert_int_equal(n, strlen("umbra; hit; ttl=42"));
    assert_string_equal(out, "umbra; hi");
    assert_int_equal(um_cache_status_format(NULL, 0, &cs), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cc_init_absent),
        cmocka_unit_test(test_cc_all_flags),
        cmocka_unit_test(test_cc_case_insensitive),
        cmocka_unit_test(test_cc_numbers),
        cmocka_unit_test(test_cc_quoted_values_tolerated),
        cmocka_unit_test(test_cc_max_stale_without_value),
        cmocka_unit_test(test_cc_saturation),
        cmocka_unit_test(test_cc_invalid_max_age_is_stale),
        cmocka_unit_test(test_cc_invalid_relaxing_values_ignored),
        cmocka_unit_test(test_cc_duplicates_most_restrictive),
        cmocka_unit_test(test_cc_accumulates_over_lines),
        cmocka_unit_test(test_cc_qualified_lists),
        cmocka_unit_test(test_cc_qualified_lists_degrade_to_unqualified),
        cmocka_unit_test(test_cc_garbage_and_extensions_ignored),
        cmocka_unit_test(test_cc_empty_slices),
        cmocka_unit_test(test_cc_arguments_on_flags),
        cmocka_unit_test(test_cc_malformed_members),
        cmocka_unit_test(test_resp_meta_scan),
        cmocka_unit_test(test_resp_meta_bad_fields),
        cmocka_unit_test(test_req_meta_pragma),
        cmocka_unit_test(test_store_basic),
        cmocka_unit_test(test_store_method),
        cmocka_unit_test(test_store_status),
        cmocka_unit_test(test_store_no_store),
        cmocka_unit_test(test_store_must_understand),
        cmocka_unit_test(test_store_private),
        cmocka_unit_test(test_store_authorization),
        cmocka_unit_test(test_store_set_cookie),
        cmocka_unit_test(test_store_vary),
        cmocka_unit_test(test_store_cacheability),
        cmocka_unit_test(test_store_useless),
        cmocka_unit_test(test_store_order),
        cmocka_unit_test(test_field_storable),
        cmocka_unit_test(test_field_storable_connection_lines),
        cmocka_unit_test(test_nostore_strings),
        cmocka_unit_test(test_heuristic_statuses),
        cmocka_unit_test(test_lifetime_precedence),
        cmocka_unit_test(test_lifetime_zero_max_age_beats_expires),
        cmocka_unit_test(test_lifetime_expires_edge_cases),
        cmocka_unit_test(test_lifetime_clock_skew),
        cmocka_unit_test(test_lifetime_heuristic),
        cmocka_unit_test(test_lifetime_heuristic_only_when_allowed),
        cmocka_unit_test(test_lifetime_invalid_and_huge_max_age),
        cmocka_unit_test(test_age_formula),
        cmocka_unit_test(test_age_clock_skew),
        cmocka_unit_test(test_age_saturation),
        cmocka_unit_test(test_age_times_from_meta),
        cmocka_unit_test(test_is_fresh),
        cmocka_unit_test(test_use_fresh_and_stale),
        cmocka_unit_test(test_use_request_no_cache),
        cmocka_unit_test(test_use_response_no_cache),
        cmocka_unit_test(test_use_request_max_age),
        cmocka_unit_test(test_use_immutable),
        cmocka_unit_test(test_use_min_fresh),
        cmocka_unit_test(test_use_max_stale),
        cmocka_unit_test(test_use_stale_forbidden),
        cmocka_unit_test(test_use_stale_while_revalidate),
        cmocka_unit_test(test_use_only_if_cached),
        cmocka_unit_test(test_sie_window),
        cmocka_unit_test(test_sie_statuses),
        cmocka_unit_test(test_sie_suppressed),
        cmocka_unit_test(test_sie_request_side),
        cmocka_unit_test(test_vary_parse),
        cmocka_unit_test(test_vary_parse_limit),
        cmocka_unit_test(test_vary_normalize_lists),
        cmocka_unit_test(test_vary_normalize_generic),
        cmocka_unit_test(test_vary_normalize_absent_vs_empty),
        cmocka_unit_test(test_vary_normalize_truncation),
        cmocka_unit_test(test_vary_matches),
        cmocka_unit_test(test_vary_matches_prefix_is_not_match),
        cmocka_unit_test(test_304_select_strong),
        cmocka_unit_test(test_304_select_weak),
        cmocka_unit_test(test_304_select_last_modified),
        cmocka_unit_test(test_304_select_no_validator),
        cmocka_unit_test(test_304_updatable_fields),
        cmocka_unit_test(test_invalidates),
        cmocka_unit_test(test_same_origin_absolute),
        cmocka_unit_test(test_same_origin_refused),
        cmocka_unit_test(test_same_origin_relative),
        cmocka_unit_test(test_cond_none),
        cmocka_unit_test(test_cond_if_none_match),
        cmocka_unit_test(test_cond_if_modified_since),
        cmocka_unit_test(test_cond_ims_without_last_modified),
        cmocka_unit_test(test_cond_inm_beats_ims),
        cmocka_unit_test(test_cond_cache_forwards_if_match),
        cmocka_unit_test(test_cond_origin_if_match),
        cmocka_unit_test(test_cond_origin_if_unmodified_since),
        cmocka_unit_test(test_cond_precedence),
        cmocka_unit_test(test_cond_range),
        cmocka_unit_test(test_cond_if_range),
        cmocka_unit_test(test_cond_non_2xx_ignores_preconditions),
        cmocka_unit_test(test_cache_status_hit),
        cmocka_unit_test(test_cache_status_fwd),
        cmocka_unit_test(test_cache_status_strings),
        cmocka_unit_test(test_cache_status_ttl_limits),
        cmocka_unit_test(test_cache_status_truncation),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (G_ready) guard_dispose(&G);
    return rc;
}
