/* Fuzzes the caching rules' parsers and the decisions built on them (umbra/cachepolicy.h):
 * Cache-Control, Vary and its request-field normalisation, and a response / request head
 * summarised by um_resp_meta_scan / um_req_meta_scan (which read Date, Expires,
 * Last-Modified, Age and ETag with the date parser).
 *
 * Input: [status byte][fields], fields being "Name: value" lines separated by LF (a line
 * without a colon is a field with an empty name). The same fields serve as the response
 * and as the request. The status is 100 + byte * 2 (100..610).
 *
 * Properties:
 * - um_cc_parse (and um_cc_parse_targeted, which either accepts a targeted field whole or
 *   leaves nothing) keeps durations in -1..UM_DELTA_MAX, at most UM_CC_MAX_FIELDS qualified
 *   names per list, each a non-empty slice of the parsed value;
 * - um_vary_parse keeps at most UM_VARY_MAX names, each a slice of the value;
 * - for every Vary name, um_vary_normalize gives the same bytes whatever the buffer size
 *   (a short buffer gets a NUL-terminated prefix, the length returned is the full one),
 *   and a request matches the stored normalised value of its own fields
 *   (um_vary_matches);
 * - the freshness lifetime and current age are within 0..UM_DELTA_MAX; a stored response
 *   is never fresh with a lifetime of 0;
 * - um_cache_status_format writes what it says it writes. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/cachepolicy.h"

#define MAX_FIELDS 64

static bool within(um_str inner, const char *base, size_t len)
{
    return inner.len == 0 || (inner.base >= base && inner.base + inner.len <= base + len);
}

static void check_cc(const struct um_cc *cc, const char *base, size_t len)
{
    const int64_t *d[] = {&cc->max_age, &cc->s_maxage, &cc->max_stale, &cc->min_fresh,
                          &cc->stale_while_revalidate, &cc->stale_if_error};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        FUZZ_CHECK(*d[i] >= -1 && *d[i] <= UM_DELTA_MAX);
    FUZZ_CHECK(cc->no_cache_nfields <= UM_CC_MAX_FIELDS);
    FUZZ_CHECK(cc->private_nfields <= UM_CC_MAX_FIELDS);
    for (size_t i = 0; i < cc->no_cache_nfields; i++)
        FUZZ_CHECK(cc->no_cache_fields[i].len > 0 && within(cc->no_cache_fields[i], base, len));
    for (size_t i = 0; i < cc->private_nfields; i++)
        FUZZ_CHECK(cc->private_fields[i].len > 0 && within(cc->private_fields[i], base, len));
}

static void check_vary(const struct um_vary *v, const struct um_header *h, size_t n,
                       const char *base, size_t len)
{
    FUZZ_CHECK(v->n <= UM_VARY_MAX);
    for (size_t i = 0; i < v->n; i++) {
        FUZZ_CHECK(v->names[i].len > 0 && within(v->names[i], base, len));
        bool present = false;
        size_t full = um_vary_normalize(v->names[i], h, n, NULL, 0, &present);
        char *out = fuzz_alloc(full + 1);
        bool present2 = false;
        size_t got = um_vary_normalize(v->names[i], h, n, out, full + 1, &present2);
        FUZZ_CHECK(got == full && present2 == present && out[full] == '\0');
        if (full > 0) {
            /* A buffer one byte short: a NUL-terminated prefix of the same bytes. */
            char *shorter = fuzz_alloc(full);
            size_t got2 = um_vary_normalize(v->names[i], h, n, shorter, full, &present2);
            FUZZ_CHECK(got2 == full && shorter[full - 1] == '\0');
            FUZZ_CHECK(memcmp(shorter, out, full - 1) == 0);
            free(shorter);
        }
        /* The request that filled the entry matches it. */
        struct um_vary_value sv = {v->names[i], {out, full}, present};
        FUZZ_CHECK(um_vary_matches(&sv, 1, h, n));
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int status = 100 + data[0] * 2;
    bool default_ttl = data[0] & 1;
    data++;
    size--;
    char *buf = fuzz_dup(data, size);

    struct um_header h[MAX_FIELDS];
    size_t n = 0;
    size_t pos = 0;
    while (pos < size && n < MAX_FIELDS) {
        size_t end = pos;
        while (end < size && buf[end] != '\n')
            end++;
        size_t colon = pos;
        while (colon < end && buf[colon] != ':')
            colon++;
        um_str name = {buf + pos, colon - pos};
        um_str value = colon < end ? um_str_trim((um_str){buf + colon + 1, end - colon - 1})
                                   : (um_str){buf + end, 0};
        h[n++] = (struct um_header){name, value};
        pos = end + 1;
    }

    struct um_cc cc;
    um_cc_init(&cc);
    struct um_vary vary;
    um_vary_init(&vary);
    for (size_t i = 0; i < n; i++) {
        if (um_str_eq_ci(h[i].name, "cache-control"))
            um_cc_parse(&cc, h[i].value);
        if (um_str_eq_ci(h[i].name, "vary"))
            um_vary_parse(&vary, h[i].value);
    }
    check_cc(&cc, buf, size);
    check_vary(&vary, h, n, buf, size);
    for (size_t i = 0; i < n; i++)
        (void)um_cc_lists_field(&cc, h[i].name);

    struct um_resp_meta rm;
    um_resp_meta_scan(&rm, status, h, n);
    check_cc(&rm.cc, buf, size);
    /* Targeted fields (RFC 9213): a Structured Field Dictionary, all or nothing. */
    struct um_cc tcc;
    if (um_cc_parse_targeted(&tcc, h, n, (um_str){"CDN-Cache-Control", 17}))
        check_cc(&tcc, buf, size);
    else
        FUZZ_CHECK(!tcc.present && tcc.max_age == -1 && tcc.private_nfields == 0);
    static const um_str targeted[2] = {{"Umbra-Cache-Control", 19}, {"CDN-Cache-Control", 17}};
    struct um_cache_policy tpol;
    um_cache_policy_init(&tpol);
    tpol.targeted = targeted;
    tpol.num_targeted = 2;
    if (um_resp_meta_target(&rm, &tpol)) {
        check_cc(&rm.cc, buf, size);
        FUZZ_CHECK(!rm.has_expires);
    }
    FUZZ_CHECK(rm.age_value >= 0 && rm.age_value <= UM_DELTA_MAX);
    FUZZ_CHECK(within(rm.etag, buf, size));
    struct um_req_meta qm;
    um_req_meta_scan(&qm, UM_METHOD_GET, h, n);
    check_cc(&qm.cc, buf, size);

    struct um_cache_policy pol;
    um_cache_policy_init(&pol);
    pol.default_ttl = default_ttl ? 60 : 0;
    const time_t now = 1700000000;
    (void)um_cache_storable(&qm, &rm, &pol, now);
    for (size_t i = 0; i < n; i++)
        (void)um_cache_field_storable(h[i].name, &rm);
    enum um_fresh_source src;
    int64_t life = um_freshness_lifetime(&rm, &pol, now, &src);
    FUZZ_CHECK(life >= 0 && life <= UM_DELTA_MAX);
    struct um_age_times t;
    um_age_times_init(&t, &rm, now - 1, now);
    int64_t age = um_current_age(&t, now + 10);
    FUZZ_CHECK(age >= 0 && age <= UM_DELTA_MAX);
    FUZZ_CHECK(!(life == 0 && um_is_fresh(life, age)));
    struct um_stored_view view = {&rm.cc, life, age, rm.etag.len > 0 || rm.has_last_modified};
    (void)um_cache_decide(&view, &qm);
    (void)um_cache_decide(NULL, &qm);
    (void)um_cache_stale_if_error_ok(&view, &qm, &pol, 503);

    struct um_cache_status cs = {.cache_name = "umbra", .fwd = UM_FWD_URI_MISS,
                                 .fwd_status = status, .stored = true, .has_ttl = true,
                                 .ttl = life - age, .detail = "fuzz"};
    char line[256];
    size_t want = um_cache_status_format(line, sizeof line, &cs);
    FUZZ_CHECK(want < sizeof line && strlen(line) == want);

    free(buf);
    return 0;
}
