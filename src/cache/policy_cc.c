/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP caching rules (see policy.c): Cache-Control parsed (RFC 9111 5.2, with the
 * restrictive readings listed in cachepolicy.h) and what a request or a response says
 * about caching, summarised once per message. */
#include "umbra/cachepolicy.h"

#include <stddef.h>
#include <string.h>

#include "umbra/httpfield.h"
#include "policy_internal.h"

/* ---- list items: token [ OWS "=" OWS ( token / quoted-string ) ] ---------------------- */

struct directive {
    um_str name;
    bool has_arg;
    um_str arg; /* inside the quotes for a quoted-string, escapes not removed */
    bool quoted;
    bool escaped;   /* the quoted-string held a backslash escape */
    bool malformed; /* something other than OWS before the next comma, or no name */
};

/* Reads the next non-empty list member from *pp. Returns false at the end. Always makes
 * progress: a malformed member is skipped up to the next comma outside a quoted-string. */
static bool next_directive(const char **pp, const char *end, struct directive *d)
{
    const char *p = *pp;
    while (p < end && (um_is_ows(*p) || *p == ','))
        p++;
    if (p == end) {
        *pp = p;
        return false;
    }
    memset(d, 0, sizeof(*d));
    const char *s = p;
    while (p < end && um_http_tchar((unsigned char)*p))
        p++;
    d->name = (um_str){s, (size_t)(p - s)};
    d->malformed = d->name.len == 0;
    const char *q = p;
    while (q < end && um_is_ows(*q))
        q++;
    if (!d->malformed && q < end && *q == '=') {
        p = q + 1;
        while (p < end && um_is_ows(*p))
            p++;
        d->has_arg = true;
        if (p < end && *p == '"') {
            d->quoted = true;
            s = ++p;
            while (p < end && *p != '"') {
                if (*p == '\\') {
                    d->escaped = true;
                    p++;
                }
                if (p < end) p++;
            }
            d->arg = (um_str){s, (size_t)(p - s)};
            if (p == end)
                d->malformed = true; /* unterminated */
            else
                p++;
        } else {
            s = p;
            while (p < end && um_http_tchar((unsigned char)*p))
                p++;
            d->arg = (um_str){s, (size_t)(p - s)};
        }
        q = p;
        while (q < end && um_is_ows(*q))
            q++;
    }
    p = q;
    if (p < end && *p != ',') {
        d->malformed = true;
        p = um_http_find_unquoted(p, end, ',');
    }
    *pp = p;
    return true;
}

/* ---- Cache-Control ------------------------------------------------------------------- */

void um_cc_init(struct um_cc *cc)
{
    /* All but the two lists of names, which their counts guard: zeroing them cost more
     * than the rest, and this runs twice for every hit. */
    memset(cc, 0, offsetof(struct um_cc, no_cache_fields));
    cc->max_age = cc->s_maxage = cc->max_stale = cc->min_fresh = -1;
    cc->stale_while_revalidate = cc->stale_if_error = -1;
    cc->no_cache_nfields = cc->private_nfields = 0;
    cc->invalid = 0;
}

/* Adds the field names of a qualified no-cache / private argument ("#field-name") to
 * names[*n..]. Returns false, adding nothing, when the argument is not a clean non-empty
 * list of field names or does not fit: the caller then applies the unqualified form. */
static bool add_field_names(const struct directive *d, um_str *names, size_t *n)
{
    if (d->malformed || d->escaped) return false;
    size_t k = *n, added = 0;
    const char *p = d->arg.base, *end = d->arg.base + d->arg.len;
    while (p < end) {
        const char *s = p;
        while (p < end && *p != ',')
            p++;
        um_str f = um_str_trim((um_str){s, (size_t)(p - s)});
        if (p < end) p++;
        if (f.len == 0) continue;
        if (!um_http_is_token(f) || k == UM_CC_MAX_FIELDS) return false;
        bool dup = false;
        for (size_t i = 0; i < k && !dup; i++)
            dup = um_str_ieq(names[i], f);
        if (!dup) names[k++] = f;
        added++;
    }
    if (added == 0) return false;
    *n = k;
    return true;
}

/* For max-age and s-maxage: a malformed or missing argument means 0, and so does a repeat
 * that disagrees (RFC 9111 4.2.1: "either the first occurrence should be used, or the
 * response should be considered stale"). */
static void merge_strict(int64_t *slot, const struct directive *d, unsigned *invalid, unsigned bit)
{
    int64_t v;
    if (!d->has_arg || d->malformed || d->escaped || !parse_delta(d->arg, &v)) {
        v = 0;
        *invalid |= bit;
    }
    if (*slot >= 0 && *slot != v) v = 0;
    *slot = v;
}

/* For directives that only relax (max-stale, stale-*): an unusable argument is ignored and
 * the smaller of several values is kept. */
static void merge_min(int64_t *slot, const struct directive *d, unsigned *invalid)
{
    int64_t v;
    if (!d->has_arg || d->malformed || d->escaped || !parse_delta(d->arg, &v)) {
        *invalid |= UM_CC_INVALID_OTHER;
        return;
    }
    *slot = *slot < 0 ? v : min64(*slot, v);
}

static bool name_is(const struct directive *d, const char *lit)
{
    return um_str_eq_ci(d->name, lit);
}

void um_cc_parse(struct um_cc *cc, um_str value)
{
    cc->present = true;
    if (value.len == 0) return;
    const char *p = value.base, *end = value.base + value.len;
    struct directive d;
    while (next_directive(&p, end, &d)) {
        bool bare = !d.has_arg && !d.malformed;
        if (d.name.len == 0) continue;
        if (name_is(&d, "no-store")) {
            cc->no_store = true; /* an argument cannot make it less restrictive */
        } else if (name_is(&d, "no-cache")) {
            if (!d.has_arg || !add_field_names(&d, cc->no_cache_fields, &cc->no_cache_nfields))
                cc->no_cache = true;
        } else if (name_is(&d, "private")) {
            if (!d.has_arg || !add_field_names(&d, cc->private_fields, &cc->private_nfields))
                cc->private_ = true;
        } else if (name_is(&d, "must-revalidate")) {
            cc->must_revalidate = true;
        } else if (name_is(&d, "proxy-revalidate")) {
            cc->proxy_revalidate = true;
        } else if (name_is(&d, "no-transform")) {
            cc->no_transform = true;
        } else if (name_is(&d, "only-if-cached")) {
            cc->only_if_cached = true;
        } else if (name_is(&d, "public")) {
            /* Directives that widen what may be cached count only when well-formed: an
             * argument (not allowed by RFC 9111 5.2) makes the intent unclear. */
            if (bare)
                cc->public_ = true;
            else
                cc->invalid |= UM_CC_INVALID_OTHER;
        } else if (name_is(&d, "immutable")) {
            if (bare)
                cc->immutable = true;
            else
                cc->invalid |= UM_CC_INVALID_OTHER;
        } else if (name_is(&d, "must-understand")) {
            if (bare)
                cc->must_understand = true;
            else
                cc->invalid |= UM_CC_INVALID_OTHER;
        } else if (name_is(&d, "max-age")) {
            merge_strict(&cc->max_age, &d, &cc->invalid, UM_CC_INVALID_MAX_AGE);
        } else if (name_is(&d, "s-maxage")) {
            merge_strict(&cc->s_maxage, &d, &cc->invalid, UM_CC_INVALID_S_MAXAGE);
        } else if (name_is(&d, "max-stale")) {
            if (bare)
                cc->max_stale = cc->max_stale < 0 ? UM_DELTA_MAX : cc->max_stale;
            else
                merge_min(&cc->max_stale, &d, &cc->invalid);
        } else if (name_is(&d, "min-fresh")) {
            int64_t v;
            if (d.has_arg && !d.malformed && !d.escaped && parse_delta(d.arg, &v))
                cc->min_fresh = max64(cc->min_fresh, v);
            else
                cc->invalid |= UM_CC_INVALID_OTHER;
        } else if (name_is(&d, "stale-while-revalidate")) {
            merge_min(&cc->stale_while_revalidate, &d, &cc->invalid);
        } else if (name_is(&d, "stale-if-error")) {
            merge_min(&cc->stale_if_error, &d, &cc->invalid);
        }
        /* Anything else is an extension we do not implement: ignored (RFC 9111 5.2.3). */
    }
}

bool um_cc_lists_field(const struct um_cc *cc, um_str name)
{
    for (size_t i = 0; i < cc->no_cache_nfields; i++)
        if (um_str_ieq(cc->no_cache_fields[i], name)) return true;
    for (size_t i = 0; i < cc->private_nfields; i++)
        if (um_str_ieq(cc->private_fields[i], name)) return true;
    return false;
}

/* ---- message summaries --------------------------------------------------------------- */

/* entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE (RFC 9110 8.8.3). */
static bool etag_valid(um_str e)
{
    size_t i = 0;
    if (e.len >= 2 && e.base[0] == 'W' && e.base[1] == '/') i = 2;
    if (e.len - i < 2 || e.base[i] != '"' || e.base[e.len - 1] != '"') return false;
    for (size_t k = i + 1; k < e.len - 1; k++) {
        unsigned char c = (unsigned char)e.base[k];
        if (c < 0x21 || c == 0x7f || c == '"') return false;
    }
    return true;
}

/* Age (RFC 9111 5.1): the first member of a list; a value that is not a non-negative
 * integer after that ("abc", "-5", "1.5") is ignored, as the RFC says a cache SHOULD do:
 * the response is then stored and served as if it had no Age at all. */
static int64_t parse_age(um_str v)
{
    const char *comma = v.len > 0 ? memchr(v.base, ',', v.len) : NULL;
    if (comma != NULL) v.len = (size_t)(comma - v.base);
    int64_t a;
    return parse_delta(um_str_trim(v), &a) ? a : 0;
}

void um_resp_meta_scan(struct um_resp_meta *m, int status, const struct um_header *h, size_t n)
{
    memset(m, 0, sizeof(*m));
    m->status = status;
    um_cc_init(&m->cc);
    um_vary_init(&m->vary);
    m->headers = h;
    m->num_headers = n;
    bool date_seen = false, lm_seen = false, etag_seen = false, age_seen = false;
    for (size_t i = 0; i < n; i++) {
        enum um_field_id id = um_http_field_id(h[i].name);
        if (id == UM_FIELD_OTHER) continue;
        um_str v = um_str_trim(h[i].value);
        switch (id) {
        case UM_FIELD_CACHE_CONTROL:
            um_cc_parse(&m->cc, v);
            break;
        case UM_FIELD_VARY:
            um_vary_parse(&m->vary, v);
            break;
        case UM_FIELD_DATE:
            if (!date_seen) m->has_date = um_http_date_parse(v, &m->date);
            date_seen = true;
            break;
        case UM_FIELD_EXPIRES: {
            /* Invalid dates, "0" above all, mean "already expired" (RFC 9111 5.3); lines
             * that disagree are treated the same way (4.2.1). */
            time_t t;
            bool ok = um_http_date_parse(v, &t);
            if (!m->has_expires) {
                m->has_expires = true;
                m->expires_valid = ok;
                m->expires = ok ? t : 0;
            } else if (!ok || t != m->expires) {
                m->expires_valid = false;
            }
            break;
        }
        case UM_FIELD_LAST_MODIFIED:
            if (!lm_seen) m->has_last_modified = um_http_date_parse(v, &m->last_modified);
            lm_seen = true;
            break;
        case UM_FIELD_ETAG:
            if (!etag_seen && etag_valid(v)) m->etag = v;
            etag_seen = true;
            break;
        case UM_FIELD_AGE:
            if (!age_seen) m->age_value = parse_age(v);
            age_seen = true;
            break;
        case UM_FIELD_SET_COOKIE:
            m->has_set_cookie = true;
            break;
        case UM_FIELD_CONNECTION:
            m->has_connection = true;
            break;
        default:
            break;
        }
    }
    if (m->has_connection) um_http_conn_tokens_init(&m->conn, h, n);
}

static bool pragma_no_cache(um_str v)
{
    if (v.len == 0) return false;
    const char *p = v.base, *end = v.base + v.len;
    struct directive d;
    while (next_directive(&p, end, &d))
        if (!d.has_arg && name_is(&d, "no-cache")) return true;
    return false;
}

void um_req_meta_scan(struct um_req_meta *m, enum um_method method, const struct um_header *h,
                      size_t n)
{
    m->method = method;
    um_cc_init(&m->cc);
    m->has_authorization = false;
    m->headers = h;
    m->num_headers = n;
    bool pragma = false;
    for (size_t i = 0; i < n; i++) {
        enum um_field_id id = um_http_field_id(h[i].name);
        if (id == UM_FIELD_CACHE_CONTROL)
            um_cc_parse(&m->cc, um_str_trim(h[i].value));
        else if (id == UM_FIELD_PRAGMA)
            pragma = pragma || pragma_no_cache(h[i].value);
        else if (id == UM_FIELD_AUTHORIZATION)
            m->has_authorization = true;
    }
    /* RFC 9111 5.4: only when the request has no Cache-Control at all. */
    if (pragma && !m->cc.present) m->cc.no_cache = true;
}

void um_cache_policy_init(struct um_cache_policy *p)
{
    p->default_ttl = 0;
    p->negative_ttl = 0;
    p->heuristic_max = UM_CACHE_HEURISTIC_MAX_DEFAULT;
    p->stale_if_error = 0;
    p->targeted = NULL;
    p->num_targeted = 0;
}
