/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP caching rules for a shared cache (RFC 9111, RFC 5861, RFC 8246): Cache-Control,
 * what a message says about caching, storability, freshness and age, the reuse decision,
 * stale-if-error, 304 freshening and invalidation. Vary is in policy_vary.c; conditional
 * requests and Cache-Status are in policy_cond.c.
 *
 * Where the RFCs leave a choice, the more restrictive reading is taken: a cache that serves
 * too little costs the origin a request, one that serves too much gives a client the wrong
 * answer or another user's data. The choices are listed at the end of cachepolicy.h. */
#include "umbra/cachepolicy.h"

#include <stddef.h>
#include <string.h>

#include "umbra/httpfield.h"

/* ---- small helpers -------------------------------------------------------------------- */

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r) || r > UM_DELTA_MAX) return UM_DELTA_MAX;
    return r;
}

/* a - b for times; saturates instead of overflowing. */
static int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) return a > b ? INT64_MAX : INT64_MIN;
    return r;
}

static int64_t clamp_delta(int64_t v)
{
    return v < 0 ? 0 : v > UM_DELTA_MAX ? UM_DELTA_MAX : v;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* delta-seconds = 1*DIGIT, saturating at 2^31 (RFC 9111 1.2.2). */
static bool parse_delta(um_str s, int64_t *v)
{
    if (s.len == 0) return false;
    int64_t r = 0;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.base[i];
        if (c < '0' || c > '9') return false;
        if (r < UM_DELTA_MAX) r = r * 10 + (c - '0');
    }
    *v = r > UM_DELTA_MAX ? UM_DELTA_MAX : r;
    return true;
}

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
    while (p < end && (is_ows(*p) || *p == ','))
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
    while (q < end && is_ows(*q))
        q++;
    if (!d->malformed && q < end && *q == '=') {
        p = q + 1;
        while (p < end && is_ows(*p))
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
        while (q < end && is_ows(*q))
            q++;
    }
    p = q;
    if (p < end && *p != ',') {
        d->malformed = true;
        bool inq = false;
        for (; p < end; p++) {
            if (inq) {
                if (*p == '\\' && p + 1 < end)
                    p++;
                else if (*p == '"')
                    inq = false;
            } else if (*p == ',') {
                break;
            } else if (*p == '"') {
                inq = true;
            }
        }
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

/* ---- storability --------------------------------------------------------------------- */

bool um_status_heuristically_cacheable(int status)
{
    switch (status) {
    case 200:
    case 203:
    case 204:
    case 206:
    case 300:
    case 301:
    case 308:
    case 404:
    case 405:
    case 410:
    case 414:
    case 501:
    case 451: /* RFC 7725 section 3 */
        return true;
    default:
        return false;
    }
}

/* The statuses whose caching requirements we implement (for must-understand, RFC 9111
 * 5.2.2.3): those RFC 9110 defines, less 206 (we do not store partial content) and 304 (never
 * stored), plus 451 (RFC 7725) and the RFC 6585 codes, whose requirement is "not stored". */
static bool status_understood(int s)
{
    return (s >= 200 && s <= 205) || (s >= 300 && s <= 305) || s == 307 || s == 308 ||
           (s >= 400 && s <= 417) || s == 421 || s == 422 || s == 426 || s == 428 || s == 429 ||
           s == 431 || s == 451 || (s >= 500 && s <= 505) || s == 511;
}

/* RFC 6585 sections 3-6: 428, 429, 431 and 511 "MUST NOT be stored by a cache". 407 asks
 * for credentials of the proxy chain between us and the origin; it means nothing to the next
 * client (and Proxy-Authenticate is never stored, RFC 9111 3.1). */
static bool status_never_stored(int s)
{
    return s == 407 || s == 428 || s == 429 || s == 431 || s == 511;
}

static bool s_maxage_valid(const struct um_cc *cc)
{
    return cc->s_maxage >= 0 && !(cc->invalid & UM_CC_INVALID_S_MAXAGE);
}

/* RFC 9111 4.2.4: no stale response when no-cache, must-revalidate, or (for a shared cache)
 * proxy-revalidate or s-maxage is present. */
static bool stale_forbidden(const struct um_cc *cc)
{
    return cc->no_cache || cc->must_revalidate || cc->proxy_revalidate || cc->s_maxage >= 0;
}

const char *um_cache_nostore_str(enum um_nostore r)
{
    switch (r) {
    case UM_STORABLE:
        return "storable";
    case UM_NOSTORE_METHOD:
        return "method";
    case UM_NOSTORE_STATUS:
        return "status";
    case UM_NOSTORE_PARTIAL:
        return "partial";
    case UM_NOSTORE_REQUEST_NO_STORE:
        return "request-no-store";
    case UM_NOSTORE_NO_STORE:
        return "no-store";
    case UM_NOSTORE_MUST_UNDERSTAND:
        return "must-understand";
    case UM_NOSTORE_PRIVATE:
        return "private";
    case UM_NOSTORE_AUTHORIZATION:
        return "authorization";
    case UM_NOSTORE_SET_COOKIE:
        return "set-cookie";
    case UM_NOSTORE_VARY:
        return "vary";
    case UM_NOSTORE_UNCACHEABLE:
        return "uncacheable";
    case UM_NOSTORE_HOOK:
        return "hook";
    case UM_NOSTORE_USELESS:
        return "no-validator";
    }
    return "unknown";
}

enum um_nostore um_cache_storable(const struct um_req_meta *req, const struct um_resp_meta *resp,
                                  const struct um_cache_policy *pol, time_t response_time)
{
    const struct um_cc *cc = &resp->cc;
    int s = resp->status;

    /* RFC 9111 section 3, in its order. The method must be understood: we store GET only. */
    if (req->method != UM_METHOD_GET) return UM_NOSTORE_METHOD;
    /* The status must be final (and a real one). */
    if (s < 200 || s > 599) return UM_NOSTORE_STATUS;
    /* 206 and 304 need a cache that understands them; we do not store partial content. */
    if (s == 206) return UM_NOSTORE_PARTIAL;
    if (s == 304 || status_never_stored(s)) return UM_NOSTORE_STATUS;
    /* 5.2.1.5: a request no-store forbids storing the response to it. */
    if (req->cc.no_store) return UM_NOSTORE_REQUEST_NO_STORE;
    /* 5.2.2.3: must-understand limits storing to caches that implement the status, and
     * those SHOULD then ignore the no-store sent along for the others. */
    if (cc->must_understand && !status_understood(s)) return UM_NOSTORE_MUST_UNDERSTAND;
    if (cc->no_store && !cc->must_understand) return UM_NOSTORE_NO_STORE;
    /* 5.2.2.7: unqualified private; a qualified one only removes the listed fields. */
    if (cc->private_) return UM_NOSTORE_PRIVATE;
    /* 3.5: a response to a request with Authorization is shared only when a directive
     * allows it. */
    if (req->has_authorization && !cc->must_revalidate && !cc->public_ && !s_maxage_valid(cc))
        return UM_NOSTORE_AUTHORIZATION;
    /* Our choice (see cachepolicy.h): Set-Cookie only with an explicit opt-in to shared
     * caching, or when the cookie itself is excluded from storage. */
    if (resp->has_set_cookie && !cc->public_ && !s_maxage_valid(cc) &&
        !um_cc_lists_field(cc, UM_STR("set-cookie")))
        return UM_NOSTORE_SET_COOKIE;
    /* 4.1: a Vary of "*" never matches; one we cannot represent cannot be matched. */
    if (!um_vary_usable(&resp->vary)) return UM_NOSTORE_VARY;
    /* Section 3, last item: explicit freshness, public, or a heuristically cacheable status
     * (s-maxage/max-age present, even malformed, count as explicit: they mean "stale"). */
    bool explicit_fresh = cc->s_maxage >= 0 || cc->max_age >= 0 || resp->has_expires;
    if (!explicit_fresh && !cc->public_ && !um_status_heuristically_cacheable(s))
        return UM_NOSTORE_UNCACHEABLE;
    /* Not required by the RFC ("caches are not prohibited from storing such responses"),
     * but a response that can never be sent without asking the origin (stale at once, or
     * no-cache), and can neither be validated nor served stale, is only ever a miss. */
    int64_t lifetime = um_freshness_lifetime(resp, pol, response_time, NULL);
    bool reusable = lifetime > 0 && !cc->no_cache;
    bool validator = resp->etag.base != NULL || resp->has_last_modified;
    bool stale_window = !stale_forbidden(cc) && (cc->stale_while_revalidate > 0 ||
                                                 cc->stale_if_error > 0 || pol->stale_if_error > 0);
    if (!reusable && !validator && !stale_window) return UM_NOSTORE_USELESS;
    return UM_STORABLE;
}

bool um_cache_field_storable(um_str name, const struct um_resp_meta *resp)
{
    return um_cache_field_storable_id(name, um_http_field_id(name), resp);
}

bool um_cache_field_storable_id(um_str name, enum um_field_id id, const struct um_resp_meta *resp)
{
    switch (id) {
    case UM_FIELD_CONNECTION:
    case UM_FIELD_KEEP_ALIVE:
    case UM_FIELD_PROXY_CONNECTION:
    case UM_FIELD_TE:
    case UM_FIELD_TRANSFER_ENCODING:
    case UM_FIELD_UPGRADE:
    case UM_FIELD_PROXY_AUTHENTICATE:
    case UM_FIELD_PROXY_AUTHORIZATION:
    case UM_FIELD_PROXY_AUTHENTICATION_INFO:
    case UM_FIELD_AGE:
        return false;
    default:
        break;
    }
    if (resp->has_connection && um_http_conn_names(&resp->conn, name)) return false;
    return !um_cc_lists_field(&resp->cc, name);
}

/* ---- freshness and age --------------------------------------------------------------- */

int64_t um_freshness_lifetime(const struct um_resp_meta *resp, const struct um_cache_policy *pol,
                              time_t response_time, enum um_fresh_source *src)
{
    const struct um_cc *cc = &resp->cc;
    enum um_fresh_source dummy;
    if (src == NULL) src = &dummy;

    /* RFC 9111 4.2.1, first match. */
    if (cc->s_maxage >= 0) {
        *src = UM_FRESH_S_MAXAGE;
        return cc->s_maxage;
    }
    if (cc->max_age >= 0) {
        *src = UM_FRESH_MAX_AGE;
        return cc->max_age;
    }
    int64_t date = resp->has_date ? (int64_t)resp->date : (int64_t)response_time;
    if (resp->has_expires) {
        /* Both times come from the origin's clock, so skew does not matter; without Date,
         * the time of receipt stands in for it (RFC 9110 6.6.1). */
        *src = UM_FRESH_EXPIRES;
        return resp->expires_valid ? clamp_delta(sat_sub(resp->expires, date)) : 0;
    }
    /* 4.2.2: heuristics only without explicit expiry, for heuristically cacheable statuses
     * or responses marked public. */
    if (!um_status_heuristically_cacheable(resp->status) && !cc->public_) {
        *src = UM_FRESH_NONE;
        return 0;
    }
    /* The operator's default for this route, when set, comes before the Last-Modified
     * heuristic: both are guesses, and the configured one is the operator's decision (as
     * nginx's proxy_cache_valid is). */
    int64_t ttl = resp->status >= 400 ? pol->negative_ttl : pol->default_ttl;
    if (ttl > 0) {
        *src = UM_FRESH_DEFAULT;
        return clamp_delta(ttl);
    }
    if (resp->has_last_modified && pol->heuristic_max > 0) {
        /* "no more than some fraction of the interval since that time ... 10%". A
         * Last-Modified after Date says nothing useful: no heuristic lifetime. */
        *src = UM_FRESH_HEURISTIC;
        int64_t since = sat_sub(date, resp->last_modified);
        return since <= 0 ? 0 : min64(clamp_delta(since / 10), pol->heuristic_max);
    }
    *src = UM_FRESH_NONE;
    return 0;
}

void um_age_times_init(struct um_age_times *t, const struct um_resp_meta *resp, time_t request_time,
                       time_t response_time)
{
    t->request_time = request_time;
    t->response_time = response_time;
    t->date_value = resp->has_date ? resp->date : response_time;
    t->age_value = resp->age_value;
}

int64_t um_current_age(const struct um_age_times *t, time_t now)
{
    /* RFC 9111 4.2.3. */
    int64_t apparent_age = clamp_delta(sat_sub(t->response_time, t->date_value));
    int64_t response_delay = clamp_delta(sat_sub(t->response_time, t->request_time));
    int64_t corrected_age_value = sat_add(clamp_delta(t->age_value), response_delay);
    int64_t corrected_initial_age = max64(apparent_age, corrected_age_value);
    int64_t resident_time = clamp_delta(sat_sub(now, t->response_time));
    return sat_add(corrected_initial_age, resident_time);
}

bool um_is_fresh(int64_t lifetime, int64_t current_age)
{
    return lifetime > current_age;
}

/* ---- reuse --------------------------------------------------------------------------- */

const char *um_cache_use_str(enum um_cache_use u)
{
    switch (u) {
    case UM_USE_FRESH:
        return "fresh";
    case UM_USE_STALE:
        return "stale";
    case UM_USE_STALE_WHILE_REVALIDATE:
        return "stale-while-revalidate";
    case UM_USE_REVALIDATE:
        return "revalidate";
    case UM_USE_MISS:
        return "miss";
    case UM_USE_GATEWAY_TIMEOUT:
        return "gateway-timeout";
    }
    return "unknown";
}

static enum um_cache_use decide(const struct um_stored_view *st, const struct um_cc *rc)
{
    const struct um_cc *sc = st->cc;
    enum um_cache_use validate = st->has_validator ? UM_USE_REVALIDATE : UM_USE_MISS;
    int64_t lifetime = st->lifetime, age = st->age;

    /* 5.2.1.4, 5.4 (Pragma folded in by the scan) and 5.2.2.4: validation first. */
    if (rc->no_cache || sc->no_cache) return validate;

    if (um_is_fresh(lifetime, age)) {
        /* 5.2.1.1. RFC 8246: an immutable response does not change while fresh, so a reload
         * (max-age=0) need not reach the origin; a forced reload sends no-cache, above. */
        if (rc->max_age >= 0 && age > rc->max_age && !sc->immutable) return validate;
        /* 5.2.1.3: lifetime >= age + min-fresh. */
        if (rc->min_fresh >= 0 && lifetime - age < rc->min_fresh) return validate;
        return UM_USE_FRESH;
    }

    /* Stale. 4.2.4: never when a directive forbids it, whatever the client allows. */
    if (stale_forbidden(sc)) return validate;
    /* A stale response has no freshness left for min-fresh, and max-age bounds the age. */
    if (rc->min_fresh >= 0) return validate;
    if (rc->max_age >= 0 && age > rc->max_age) return validate;
    int64_t staleness = age - lifetime;
    bool swr = sc->stale_while_revalidate >= 0 && staleness <= sc->stale_while_revalidate;
    /* 5.2.1.2: the client accepts this much staleness; if the origin also allows serving
     * it while revalidating, refresh it in the background. */
    if (rc->max_stale >= 0) {
        if (staleness > rc->max_stale) return validate;
        return swr ? UM_USE_STALE_WHILE_REVALIDATE : UM_USE_STALE;
    }
    /* 5.2.1.1: with max-age and no max-stale, "the client does not wish to receive a stale
     * response". */
    if (rc->max_age >= 0) return validate;
    /* RFC 5861 section 3. */
    if (swr) return UM_USE_STALE_WHILE_REVALIDATE;
    return validate;
}

enum um_cache_use um_cache_decide(const struct um_stored_view *stored,
                                  const struct um_req_meta *req)
{
    enum um_cache_use u = stored != NULL ? decide(stored, &req->cc) : UM_USE_MISS;
    /* 5.2.1.7: a stored response consistent with the request, or 504. */
    if (req->cc.only_if_cached && (u == UM_USE_REVALIDATE || u == UM_USE_MISS))
        return UM_USE_GATEWAY_TIMEOUT;
    return u;
}

bool um_cache_stale_if_error_ok(const struct um_stored_view *stored, const struct um_req_meta *req,
                                const struct um_cache_policy *pol, int origin_status)
{
    if (stored == NULL) return false;
    /* RFC 5861 section 4: "an error is any situation that would result in a 500, 502, 503,
     * or 504 HTTP response status code being returned". */
    if (origin_status != 0 && origin_status != 500 && origin_status != 502 &&
        origin_status != 503 && origin_status != 504)
        return false;
    const struct um_cc *sc = stored->cc, *rc = &req->cc;
    /* no-cache: never without successful validation, fresh or not (5.2.2.4). */
    if (sc->no_cache) return false;
    if (um_is_fresh(stored->lifetime, stored->age)) return true;
    /* 5.2.2.2: "if a cache is disconnected, the cache MUST generate a 504 response rather
     * than reuse the stale response"; the same for proxy-revalidate and s-maxage. */
    if (stale_forbidden(sc)) return false;

    int64_t staleness = stored->age - stored->lifetime;
    int64_t resp_w = sc->stale_if_error, req_w = rc->stale_if_error, w;
    bool wants_validation =
        rc->no_cache || rc->min_fresh >= 0 || (rc->max_age >= 0 && stored->age > rc->max_age);
    if (wants_validation) {
        /* The client asked for an answer from the origin: only its own consent to a stale
         * one on error counts. */
        if (req_w < 0) return false;
        w = resp_w >= 0 ? min64(resp_w, req_w) : req_w;
    } else if (resp_w >= 0 || req_w >= 0) {
        w = resp_w < 0 ? req_w : req_w < 0 ? resp_w : min64(resp_w, req_w);
    } else {
        w = pol->stale_if_error > 0 ? pol->stale_if_error : -1;
    }
    /* A client bound on staleness holds too, unless it gave its own stale-if-error. */
    if (rc->max_stale >= 0 && req_w < 0) w = min64(w, rc->max_stale);
    return w >= 0 && staleness <= w;
}

/* ---- 304 ------------------------------------------------------------------------------ */

size_t um_cache_304_select(const struct um_resp_meta *r304, const struct um_stored_validators *s,
                           size_t n, size_t *out)
{
    um_str e = r304->etag;
    size_t k = 0;
    if (e.base != NULL) {
        bool weak = e.len >= 2 && e.base[0] == 'W' && e.base[1] == '/';
        if (!weak) {
            /* All stored responses with that strong validator, or none at all. */
            for (size_t i = 0; i < n; i++)
                if (s[i].etag.base != NULL && um_etag_match_strong(s[i].etag, e)) out[k++] = i;
            return k;
        }
        /* A weak validator: the most recent stored response it corresponds to. */
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (s[i].etag.base != NULL && um_etag_match_weak(s[i].etag, e) &&
                (best == n || s[i].response_time > s[best].response_time))
                best = i;
        if (best == n) return 0;
        out[0] = best;
        return 1;
    }
    if (r304->has_last_modified) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (s[i].has_last_modified && s[i].last_modified == r304->last_modified &&
                (best == n || s[i].response_time > s[best].response_time))
                best = i;
        if (best == n) return 0;
        out[0] = best;
        return 1;
    }
    /* No validator in the 304: only a lone stored response without one either. */
    if (n == 1 && s[0].etag.base == NULL && !s[0].has_last_modified) {
        out[0] = 0;
        return 1;
    }
    return 0;
}

bool um_cache_field_updatable(um_str name, const struct um_resp_meta *r304)
{
    /* RFC 9111 3.2: not Content-Length, nor the fields the stored response depends upon; the
     * httpbis cache draft names Content-Encoding, Content-Length, Content-MD5, Content-Range
     * and ETag. The stored bytes are encoded as they were received: a 304 that names another
     * coding (an origin with weak ETags shared by its gzip and identity variants sends one)
     * must not relabel them. */
    static const char *const fixed[] = {"content-length", "content-range", "content-encoding",
                                        "content-md5", "etag"};
    for (size_t i = 0; i < UM_NELEMS(fixed); i++)
        if (um_str_eq_ci(name, fixed[i])) return false;
    return um_cache_field_storable(name, r304);
}

/* ---- invalidation --------------------------------------------------------------------- */

bool um_cache_invalidates(enum um_method method, int status)
{
    /* RFC 9111 4.4, RFC 9110 9.2.1: the safe methods are GET, HEAD, OPTIONS and TRACE;
     * everything else, unknown methods included, invalidates on 2xx/3xx. */
    switch (method) {
    case UM_METHOD_GET:
    case UM_METHOD_HEAD:
    case UM_METHOD_OPTIONS:
    case UM_METHOD_TRACE:
        return false;
    default:
        return status >= 200 && status <= 399;
    }
}
