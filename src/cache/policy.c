/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP caching rules for a shared cache (RFC 9111, RFC 5861, RFC 8246): storability,
 * freshness and age, the reuse decision, stale-if-error, 304 freshening and invalidation.
 * Cache-Control and what a message says about caching are parsed in policy_cc.c; Vary is
 * in policy_vary.c; conditional requests and Cache-Status are in policy_cond.c.
 *
 * Where the RFCs leave a choice, the more restrictive reading is taken: a cache that serves
 * too little costs the origin a request, one that serves too much gives a client the wrong
 * answer or another user's data. The choices are listed at the end of cachepolicy.h. */
#include "umbra/cachepolicy.h"

#include <stddef.h>
#include <string.h>

#include "umbra/httpfield.h"
#include "policy_internal.h"

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
