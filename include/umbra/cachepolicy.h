/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP caching rules for a shared cache: RFC 9111 (HTTP Caching), RFC 5861
 * (stale-while-revalidate, stale-if-error), RFC 8246 (immutable), conditional requests
 * answered from a stored response (RFC 9110 section 13) and the Cache-Status field
 * (RFC 9211).
 *
 * Everything here is a pure function of its arguments: nothing allocates, nothing reads a
 * clock (every time is a parameter, in seconds since the epoch), there is no global state,
 * and every function is safe from any thread. An um_str that a function stores or returns
 * is a slice of bytes the caller passed in and lives as long as those bytes do.
 *
 * Durations are int64_t seconds. Per RFC 9111 section 1.2.2 a delta-seconds value too large
 * to hold, and any calculation that overflows, becomes UM_DELTA_MAX (2^31, "infinity"); no
 * duration computed here is ever negative unless a comment says so.
 *
 * How the cache uses this module, in order:
 *   1. request arrives: um_req_meta_scan; um_cache_decide (with the stored response found by
 *      key and um_vary_matches, or NULL when there is none) says fresh / stale / revalidate /
 *      miss / 504; a hit is answered through um_cache_conditional.
 *   2. response from the origin: um_resp_meta_scan; um_cache_storable says whether to keep it
 *      (or why not), um_cache_field_storable which fields to keep, um_freshness_lifetime and
 *      struct um_age_times give the expiry; um_cache_invalidates / um_cache_same_origin_target
 *      say what an unsafe method invalidates.
 *   3. a 304 to a revalidation: um_cache_304_select picks the stored response(s),
 *      um_cache_field_updatable which of the 304's fields replace the stored ones.
 *   4. the origin failed: um_cache_stale_if_error_ok.
 *   5. every response: um_cache_status_format.
 *
 * Choices made where the RFCs leave one are listed at the end of this file. */
#ifndef UMBRA_CACHEPOLICY_H
#define UMBRA_CACHEPOLICY_H

#include <time.h>

#include "umbra/cachestatus.h"
#include "umbra/common.h"
#include "umbra/http1.h"
#include "umbra/httpfield.h"

/* 2^31 seconds: what an oversized or overflowing delta-seconds becomes (RFC 9111 1.2.2). */
#define UM_DELTA_MAX INT64_C(2147483648)

/* ---- Cache-Control (RFC 9111 section 5.2) ----------------------------------------------- */

/* Field names kept per qualified no-cache="..." or private="..." directive. A longer list
 * is treated as the unqualified directive, which is always the more restrictive reading. */
#define UM_CC_MAX_FIELDS 8

/* Directives whose argument was missing or malformed (bits of um_cc.invalid). */
#define UM_CC_INVALID_MAX_AGE 0x01  /* max_age was set to 0 */
#define UM_CC_INVALID_S_MAXAGE 0x02 /* s_maxage was set to 0 */
#define UM_CC_INVALID_OTHER 0x04    /* another directive's argument was ignored */

struct um_cc {
    bool present; /* at least one field line was parsed */
    bool no_store;
    bool no_cache; /* unqualified no-cache: never reuse without validation */
    bool private_; /* unqualified private: a shared cache must not store */
    bool public_;
    bool must_revalidate;
    bool proxy_revalidate;
    bool must_understand;
    bool no_transform;
    bool immutable;
    bool only_if_cached;
    /* Seconds, or -1 when absent. max_stale without a value is UM_DELTA_MAX. */
    int64_t max_age;
    int64_t s_maxage;
    int64_t max_stale;
    int64_t min_fresh;
    int64_t stale_while_revalidate;
    int64_t stale_if_error;
    /* Qualified forms: the listed field names, slices of the parsed value(s). */
    um_str no_cache_fields[UM_CC_MAX_FIELDS];
    size_t no_cache_nfields;
    um_str private_fields[UM_CC_MAX_FIELDS];
    size_t private_nfields;
    unsigned invalid; /* UM_CC_INVALID_* */
};

/* Resets cc to "no Cache-Control field". */
void um_cc_init(struct um_cc *cc);

/* Adds the directives of one Cache-Control field line. Call once per line, after um_cc_init.
 * Never fails: directive names are case-insensitive; arguments may be tokens or quoted
 * strings; unknown directives, garbage and empty list elements are ignored; numbers
 * saturate at UM_DELTA_MAX. When a directive repeats, the more restrictive value wins:
 * differing max-age or s-maxage values, or a malformed one, mean 0 (stale, RFC 9111 4.2.1);
 * the smaller max-stale, stale-while-revalidate and stale-if-error, the larger min-fresh; an
 * unqualified no-cache/private overrides a qualified one, qualified lists are merged.
 * Permissive directives (public, immutable, must-understand) count only without an argument.
 * cc keeps slices of value: the bytes must outlive cc. */
void um_cc_parse(struct um_cc *cc, um_str value);

/* True when name (case-insensitive) is listed by a qualified no-cache / private. */
bool um_cc_lists_field(const struct um_cc *cc, um_str name);

/* ---- Vary (RFC 9111 section 4.1) ---------------------------------------------------------- */

#define UM_VARY_MAX 16 /* distinct field names kept; more makes the response unusable */

struct um_vary {
    um_str names[UM_VARY_MAX]; /* slices of the Vary value(s); distinct, case-insensitive */
    size_t n;
    bool star; /* "*": the response never matches a later request */
    bool bad;  /* too many names, or a member that is not a field name */
};

void um_vary_init(struct um_vary *v);
/* Adds the members of one Vary field line; keeps slices of value. */
void um_vary_parse(struct um_vary *v, um_str value);
/* False when a response with this Vary can never be reused (star or bad). */
bool um_vary_usable(const struct um_vary *v);

/* Writes into out the normalised value of the request field name (all its lines) for Vary
 * matching, NUL-terminated when outsz > 0, and returns its length; a return >= outsz means
 * out was too small and holds a truncated prefix (do not store that). *present says whether
 * the field occurs at all: an absent field only matches an absent one.
 *
 * Normalisation only does what RFC 9111 4.1 allows: lines are combined (with "," for lists,
 * "; " for Cookie), leading and trailing whitespace removed, runs of SP/HTAB outside quoted
 * strings collapsed to one SP. For the list fields Accept, Accept-Charset, Accept-Encoding,
 * Accept-Language, whitespace around "," and ";" and empty elements are removed too, and
 * tokens are lower-cased where their grammar is case-insensitive (the whole value for
 * Accept-Charset/-Encoding/-Language; media types and parameter names, not parameter values,
 * for Accept). Cookie pairs are trimmed and empty pairs dropped. Nothing is reordered. */
size_t um_vary_normalize(um_str name, const struct um_header *h, size_t n, char *out, size_t outsz,
                         bool *present);

/* What the cache keeps per stored response for each Vary name: the name and the normalised
 * value of the request that filled it (owned by the cache object). */
struct um_vary_value {
    um_str name;
    um_str value;
    bool present;
};

/* True when every stored field matches the request's h[0..n) after normalisation. Compares
 * while normalising: no buffer, no length limit. n_stored == 0 matches anything. */
bool um_vary_matches(const struct um_vary_value *stored, size_t n_stored, const struct um_header *h,
                     size_t n);

/* ---- What a message says about caching ---------------------------------------------------- */

/* A response head, summarised once. Slices point into the headers passed to the scan; the
 * struct is ~1 KiB, meant for the stack. */
struct um_resp_meta {
    int status;
    struct um_cc cc;
    struct um_vary vary;
    bool has_date;
    time_t date;
    bool has_expires;   /* an Expires line was present, valid or not */
    bool expires_valid; /* false: unparseable ("0"), or lines that disagree: already expired */
    time_t expires;
    bool has_last_modified; /* a valid Last-Modified */
    time_t last_modified;
    um_str etag;       /* a well-formed ETag (first line), or {NULL, 0} */
    int64_t age_value; /* Age: 0 when absent or invalid (ignored, RFC 9111 5.1) */
    bool has_set_cookie;
    bool has_connection; /* a Connection line is among headers */
    struct um_http_conn_tokens conn; /* its members, when has_connection */
    const struct um_header *headers; /* the scanned fields (for Connection and the like) */
    size_t num_headers;
    um_str targeted; /* the targeted field whose directives cc holds (um_resp_meta_target),
                        or {NULL, 0}: cc is Cache-Control's */
};

/* Summarises a response head. h must outlive m. */
void um_resp_meta_scan(struct um_resp_meta *m, int status, const struct um_header *h, size_t n);

/* A request, summarised once. */
struct um_req_meta {
    enum um_method method;
    struct um_cc cc; /* with "Pragma: no-cache" as no_cache when there is no Cache-Control
                        (RFC 9111 5.4) */
    bool has_authorization;
    const struct um_header *headers; /* for conditionals and Vary */
    size_t num_headers;
};

/* ---- Targeted cache-control fields (RFC 9213) ------------------------------------------ */

/* Parses the lines of field name in h[0..n) as a targeted cache-control field: a Structured
 * Field Dictionary (RFC 8941) of Cache-Control directives. Returns true and fills cc when
 * the field is present, parses and is not empty; otherwise returns false with cc reset (a
 * field that fails to parse is ignored as a whole). Members repeat by replacing (RFC 8941:
 * the last wins); a directive whose value has the wrong type (max-age=1.5, max-age="1",
 * max-age=-1) counts as absent; booleans false (no-store=?0) are absent; parameters are
 * ignored. no-cache and private take a string or an inner list of strings as the
 * qualified form. cc keeps slices of h's values. */
bool um_cc_parse_targeted(struct um_cc *cc, const struct um_header *h, size_t n, um_str name);

/* Applies pol's targeted fields to a scanned response: the first one that
 * um_cc_parse_targeted accepts replaces m->cc, and Expires is then ignored (RFC 9213 2.2);
 * m->targeted names it. Returns whether one did. Call right after um_resp_meta_scan, with
 * the same headers. */
struct um_cache_policy;
bool um_resp_meta_target(struct um_resp_meta *m, const struct um_cache_policy *pol);

/* Summarises a request head. h must outlive m. */
void um_req_meta_scan(struct um_req_meta *m, enum um_method method, const struct um_header *h,
                      size_t n);

/* ---- Per-route options ------------------------------------------------------------------- */

#define UM_CACHE_HEURISTIC_MAX_DEFAULT 86400

struct um_cache_policy {
    /* Lifetime for a heuristically cacheable 2xx/3xx response (or one marked public) with no
     * explicit freshness and no Last-Modified. <= 0: none. */
    int64_t default_ttl;
    /* The same for the heuristically cacheable errors (404, 405, 410, 414, 451, 501), kept
     * apart so that a long default_ttl does not pin a transient 404. <= 0: none. */
    int64_t negative_ttl;
    /* Cap of the Last-Modified heuristic (10% of Date - Last-Modified). 0: no heuristic. */
    int64_t heuristic_max;
    /* stale-if-error window when neither the response nor the request gives one (an
     * "out-of-band contract", RFC 9111 4.2.4). 0: none. */
    int64_t stale_if_error;
    /* Targeted cache-control fields (RFC 9213) in order of precedence, e.g.
     * "Umbra-Cache-Control", "CDN-Cache-Control"; the array is borrowed. NULL/0: none. */
    const um_str *targeted;
    size_t num_targeted;
};

/* Defaults: no default_ttl/negative_ttl, heuristic capped at 24 h, no stale-if-error, no
 * targeted fields. */
void um_cache_policy_init(struct um_cache_policy *p);

/* ---- Storing (RFC 9111 section 3) -------------------------------------------------------- */

enum um_nostore {
    UM_STORABLE = 0,
    UM_NOSTORE_METHOD,           /* only responses to GET are stored */
    UM_NOSTORE_STATUS,           /* 1xx, 304, 407, 428, 429, 431, 511, or out of range */
    UM_NOSTORE_PARTIAL,          /* 206: ranges are not stored (answered from full ones) */
    UM_NOSTORE_REQUEST_NO_STORE, /* no-store in the request */
    UM_NOSTORE_NO_STORE,         /* no-store in the response */
    UM_NOSTORE_MUST_UNDERSTAND,  /* must-understand with a status we do not implement */
    UM_NOSTORE_PRIVATE,          /* unqualified private */
    UM_NOSTORE_AUTHORIZATION,    /* request had Authorization; no public/s-maxage/must-revalidate */
    UM_NOSTORE_SET_COOKIE,       /* Set-Cookie not cleared for sharing, see the notes */
    UM_NOSTORE_VARY,             /* Vary: *, or a Vary we cannot match */
    UM_NOSTORE_UNCACHEABLE,      /* no explicit freshness, status not heuristically cacheable */
    UM_NOSTORE_USELESS,          /* never reusable as is (zero lifetime or no-cache), no
                                    validator, no stale window */
    UM_NOSTORE_HOOK,             /* a Lua hook said so (res.cacheable = false, ttl 0) */
};

/* A short token for logs and the Cache-Status detail ("no-store", "private", ...). */
const char *um_cache_nostore_str(enum um_nostore r);

/* Whether a shared cache may store resp, the response to req. response_time is when the
 * response head arrived (used when Date is absent). Returns UM_STORABLE or the first reason
 * found. A storable response is stored without the fields um_cache_field_storable refuses. */
enum um_nostore um_cache_storable(const struct um_req_meta *req, const struct um_resp_meta *resp,
                                  const struct um_cache_policy *pol, time_t response_time);

/* Whether a field of resp is kept when resp is stored. False for Connection and the fields
 * it lists, the other hop-by-hop fields (Keep-Alive, Proxy-Connection, TE,
 * Transfer-Encoding, Upgrade), Proxy-Authenticate, Proxy-Authentication-Info,
 * Proxy-Authorization (RFC 9111 3.1), fields named by private="..." or no-cache="..."
 * (5.2.2.4, 5.2.2.7) and Age (the cache keeps age_value in its times and generates Age when
 * it serves, RFC 9111 section 4). */
bool um_cache_field_storable(um_str name, const struct um_resp_meta *resp);
/* The same for a field the caller classified already: id is um_http_field_id(name). */
bool um_cache_field_storable_id(um_str name, enum um_field_id id, const struct um_resp_meta *resp);

/* True for the statuses RFC 9110 15.1 (and RFC 7725 for 451) calls heuristically cacheable:
 * 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 451, 501. */
bool um_status_heuristically_cacheable(int status);

/* ---- Freshness and age (RFC 9111 section 4.2) -------------------------------------------- */

enum um_fresh_source {
    UM_FRESH_NONE, /* no lifetime: 0 */
    UM_FRESH_S_MAXAGE,
    UM_FRESH_MAX_AGE,
    UM_FRESH_EXPIRES,   /* Expires - Date (response_time without Date); invalid: 0 */
    UM_FRESH_HEURISTIC, /* 10% of Date - Last-Modified, capped at heuristic_max */
    UM_FRESH_DEFAULT,   /* the route's default_ttl / negative_ttl */
};

/* The freshness lifetime of resp for a shared cache, first match of: s-maxage, max-age,
 * Expires - Date, the route default when set, the Last-Modified heuristic (the last two
 * only for heuristically cacheable statuses or public responses). src may be NULL. */
int64_t um_freshness_lifetime(const struct um_resp_meta *resp, const struct um_cache_policy *pol,
                              time_t response_time, enum um_fresh_source *src);

/* The times the cache keeps with a stored response (RFC 9111 4.2.3). */
struct um_age_times {
    time_t request_time;  /* when the request that produced the response was sent */
    time_t response_time; /* when its head arrived */
    time_t date_value;    /* the response's Date, or response_time without one */
    int64_t age_value;    /* the response's Age (um_resp_meta.age_value) */
};

/* Fills t from a scanned response. */
void um_age_times_init(struct um_age_times *t, const struct um_resp_meta *resp, time_t request_time,
                       time_t response_time);

/* current_age per RFC 9111 4.2.3: apparent_age = max(0, response_time - date_value);
 * corrected_initial_age = max(apparent_age, age_value + (response_time - request_time));
 * + (now - response_time). Clocks that run backwards count as 0 delay / residence. */
int64_t um_current_age(const struct um_age_times *t, time_t now);

/* freshness_lifetime > current_age. */
bool um_is_fresh(int64_t lifetime, int64_t current_age);

/* ---- Reuse (RFC 9111 section 4, 5.2.1, RFC 5861, RFC 8246) ------------------------------ */

/* A stored response as the reuse decision sees it. */
struct um_stored_view {
    const struct um_cc *cc; /* the stored response's Cache-Control */
    int64_t lifetime;       /* um_freshness_lifetime */
    int64_t age;            /* um_current_age now */
    bool has_validator;     /* a stored ETag or Last-Modified */
};

enum um_cache_use {
    UM_USE_FRESH,                  /* send the stored response */
    UM_USE_STALE,                  /* send it stale: the client allowed it with max-stale */
    UM_USE_STALE_WHILE_REVALIDATE, /* send it stale and refresh it in the background */
    UM_USE_REVALIDATE,             /* conditional request first (it has validators) */
    UM_USE_MISS,                   /* fetch in full (the stored one may serve stale-if-error) */
    UM_USE_GATEWAY_TIMEOUT,        /* only-if-cached and nothing usable: answer 504 */
};

const char *um_cache_use_str(enum um_cache_use u);

/* Decides how to answer req from stored (NULL: nothing stored matches). Order: request
 * no-cache (or Pragma) and response no-cache force validation; a fresh response is sent
 * unless the request's max-age (ignored for a fresh immutable response, RFC 8246) or
 * min-fresh rule it out; a stale one is sent only if neither must-revalidate,
 * proxy-revalidate nor s-maxage forbid it and the client's max-stale, or else the
 * response's stale-while-revalidate, covers its staleness (and the client set no max-age or
 * min-fresh it fails). only-if-cached turns revalidate/miss into 504. */
enum um_cache_use um_cache_decide(const struct um_stored_view *stored,
                                  const struct um_req_meta *req);

/* After the origin failed (origin_status 500, 502, 503 or 504, or 0 for no answer at all):
 * true when the stored response may be sent instead (RFC 5861 section 4). Never with
 * no-cache, must-revalidate, proxy-revalidate or s-maxage (RFC 9111 4.2.4, 5.2.2.2), which
 * make the cache answer 504. A fresh stored response is always allowed otherwise. The window
 * is the smaller of the response's and the request's stale-if-error, either one alone, or
 * the route's default; when the request asked for validation (no-cache, a max-age it
 * fails, min-fresh), only its own stale-if-error allows a stale answer. */
bool um_cache_stale_if_error_ok(const struct um_stored_view *stored, const struct um_req_meta *req,
                                const struct um_cache_policy *pol, int origin_status);

/* ---- Validation responses (RFC 9111 4.3.4, 4.3.5) ---------------------------------------- */

/* The validators of one stored response under the same cache key. */
struct um_stored_validators {
    um_str etag; /* {NULL, 0}: none */
    bool has_last_modified;
    time_t last_modified;
    time_t response_time; /* to pick the most recent one */
};

/* Which stored responses a 304 updates (RFC 9111 4.3.4): all with the 304's strong ETag; else
 * the most recent one whose ETag weakly matches the 304's weak ETag, or whose Last-Modified
 * equals the 304's; else, when the 304 has no validator, the only stored response if it has
 * none either. Writes the indices into out (room for n) and returns how many; 0: the 304
 * must not update anything (the cache then refetches in full). */
size_t um_cache_304_select(const struct um_resp_meta *r304, const struct um_stored_validators *s,
                           size_t n, size_t *out);

/* Whether a field line of a 304 (or of a 200 to a HEAD, 4.3.5) replaces all stored lines of
 * that name. False for what um_cache_field_storable refuses and for the fields the stored
 * body depends upon: Content-Length, Content-Range, Content-Encoding, Content-MD5, ETag.
 * Recipe: new = the stored lines whose name has no updatable line in the 304, then the 304's
 * updatable lines; drop from new what um_cache_field_storable refuses under the updated
 * Cache-Control; recompute the lifetime and the times from the 304. If the 304 changes Vary,
 * the stored Vary values must be recomputed from the request that revalidated. */
bool um_cache_field_updatable(um_str name, const struct um_resp_meta *r304);

/* ---- Invalidation (RFC 9111 section 4.4) ------------------------------------------------- */

/* True when a response with status to method invalidates the target URI: an unsafe (or
 * unknown) method and a 2xx or 3xx status. */
bool um_cache_invalidates(enum um_method method, int status);

/* Resolves a Location or Content-Location value against the request (scheme "http" or
 * "https", authority as in Host, base = the request's path[?query]) and, when the result
 * has the same origin (scheme, host, port; host case-insensitive, default ports), writes its
 * path[?query] (dot segments removed, fragment dropped, NUL-terminated) to out. Returns false
 * for another origin, a malformed value, userinfo, or out too small. */
bool um_cache_same_origin_target(um_str scheme, um_str authority, um_str base, um_str value,
                                 char *out, size_t outsz, size_t *outlen);

/* ---- Conditional requests against a stored response (RFC 9110 13.2.2) -------------------- */

struct um_cond_stored {
    int status;  /* the stored (or, for an origin, the would-be) status */
    um_str etag; /* {NULL, 0}: none */
    bool has_last_modified;
    time_t last_modified;
    bool has_date; /* Date of the stored response (an origin passes now) */
    time_t date;
    time_t response_time;
    uint64_t size; /* representation length, for Range */
};

/* Answers req's preconditions and Range from s. as_origin: evaluate If-Match and
 * If-Unmodified-Since too (an origin such as the static files); a cache does not (RFC 9111
 * 4.3.2) and gets 0 when they are present. Returns:
 *   0       forward the request (cache only);
 *   s->status  send the stored response as it is (preconditions passed or do not apply);
 *   206     send [*first, *last] of it;
 *   304     Not Modified (with the stored response's metadata);
 *   412     Precondition Failed;
 *   416     Range Not Satisfiable.
 * Preconditions apply only when s->status is 2xx (RFC 9110 13.2.1), for a cache only 200;
 * Range only to GET and a stored 200. first and last may be NULL when no range is wanted. */
int um_cache_conditional(const struct um_req_meta *req, const struct um_cond_stored *s,
                         bool as_origin, uint64_t *first, uint64_t *last);

/* ---- Cache-Status (RFC 9211) ------------------------------------------------------------- */

/* enum um_cache_fwd and struct um_cache_status: umbra/cachestatus.h. */

/* Writes one Cache-Status list member, e.g. "umbra; fwd=uri-miss; fwd-status=200; stored;
 * ttl=60", NUL-terminated when n > 0. Returns the full length (excluding the NUL), so a
 * return >= n means out was too small and holds a truncated prefix. */
size_t um_cache_status_format(char *out, size_t n, const struct um_cache_status *cs);

/* ---- Choices made where the RFCs leave one --------------------------------------------------
 * - Only GET responses are stored; HEAD is answered from them and its 200s may freshen them.
 *   206 is never stored (a Range request is answered from a stored full 200; a cache that
 *   stored ranges would have to implement combining, RFC 9111 3.3-3.4).
 * - Set-Cookie: RFC 9111 allows storing it, but a shared cache replaying one client's cookie
 *   to everyone is the classic session leak. A response with Set-Cookie is stored only when
 *   the origin opted into shared caching explicitly (public or s-maxage), or named Set-Cookie
 *   in private="..." or no-cache="..." (then the cookie is not stored). The stored cookie is
 *   otherwise kept, since RFC 9111 3.1 requires storing every field.
 * - Qualified no-cache="f" is honoured the way RFC 9111 3.1 describes it: f is not stored, so
 *   a fresh hit can never leak it; the rest is reused without validation.
 * - must-understand (no argument) with a status we implement makes us ignore no-store, as
 *   RFC 9111 5.2.2.3 asks; with any other status the response is not stored.
 * - Never stored, per RFC 6585: 428, 429, 431, 511; and 407, which belongs to the proxy chain.
 * - Conflicting or malformed max-age/s-maxage: 0, i.e. stale (RFC 9111 4.2.1 allows "first"
 *   or "stale"; stale is the safe one); differing Expires lines likewise. An invalid s-maxage
 *   does not let a response to an Authorization request be shared.
 * - Age: a list uses its first member; a value that is then not a non-negative integer is
 *   ignored (RFC 9111 5.1), as if the response had no Age.
 * - Heuristic freshness (Last-Modified) and default TTLs only for heuristically cacheable
 *   statuses or public responses, never with explicit expiry (RFC 9111 4.2.2). A configured
 *   default_ttl/negative_ttl comes before the heuristic: both are guesses, and the
 *   configured one is the operator's decision (as nginx's proxy_cache_valid is).
 * - A response that could never be sent without asking the origin (zero lifetime, or
 *   no-cache) and has no validator and no stale window is not stored: it is only a miss.
 * - immutable: while fresh, a request max-age (a browser reload) does not force validation;
 *   a request no-cache (a forced reload) still does (RFC 8246 section 2).
 * - stale-while-revalidate is not used when the client constrained age (max-age, min-fresh).
 * - A cache does not evaluate If-Match / If-Unmodified-Since (RFC 9111 4.3.2): forwards.
 *   If-Modified-Since without a stored Last-Modified uses Date, then response_time (4.3.2).
 *   If-Range with a date needs it to equal Last-Modified and Last-Modified to be at least 60 s
 *   before Date (a strong validator, RFC 9110 8.8.2.2); several Range lines are ignored.
 * - A 304 never changes Content-Encoding (nor the other body-bound fields above): with weak
 *   ETags an origin can answer a revalidation for a differently encoded variant.
 * - Invalidation through Location/Content-Location refuses URIs with userinfo. */

#endif
