/* SPDX-License-Identifier: BSD-2-Clause */
/* Conditional requests answered from a stored response (RFC 9110 section 13, RFC 9111
 * 4.3.2), the URIs an unsafe request invalidates (RFC 9111 4.4, RFC 3986 section 5) and the
 * Cache-Status field (RFC 9211). */
#include "umbra/cachepolicy.h"

#include <string.h>

#include "umbra/buf.h"
#include "umbra/httpfield.h"
#include "umbra/ascii.h"

static bool str_eq_ci_n(const char *a, size_t n, um_str b)
{
    if (n != b.len) return false;
    for (size_t i = 0; i < n; i++)
        if (um_ascii_lower(a[i]) != um_ascii_lower(b.base[i])) return false;
    return true;
}

/* ---- conditional requests ------------------------------------------------------------ */

/* The lines of one request field: how many, and the first. */
struct field {
    size_t count;
    um_str first;
};

/* The six fields um_cache_conditional looks at. */
struct cond_fields {
    struct field im, ius, inm, ims, ir, range;
};

static void count_line(struct field *f, um_str value)
{
    if (f->count++ == 0) f->first = um_str_trim(value);
}

/* Finds the six fields in one pass over the request's fields: each name is compared only
 * with those of its length, so a request without any of them (most) costs a length test
 * per field. */
static void find_all(const struct um_req_meta *req, struct cond_fields *cf)
{
    memset(cf, 0, sizeof(*cf));
    for (size_t i = 0; i < req->num_headers; i++) {
        um_str name = req->headers[i].name, v = req->headers[i].value;
        switch (name.len) {
        case 5:
            if (um_str_eq_ci(name, "range")) count_line(&cf->range, v);
            break;
        case 8:
            if (um_str_eq_ci(name, "if-match"))
                count_line(&cf->im, v);
            else if (um_str_eq_ci(name, "if-range"))
                count_line(&cf->ir, v);
            break;
        case 13:
            if (um_str_eq_ci(name, "if-none-match")) count_line(&cf->inm, v);
            break;
        case 17:
            if (um_str_eq_ci(name, "if-modified-since")) count_line(&cf->ims, v);
            break;
        case 19:
            if (um_str_eq_ci(name, "if-unmodified-since")) count_line(&cf->ius, v);
            break;
        default:
            break;
        }
    }
}

/* True when any line of field name, a list of entity tags or "*", matches etag (weakly or
 * strongly). Several lines are one list (RFC 9110 5.3). */
static bool any_line_matches(const struct um_req_meta *req, const char *name, um_str etag,
                             bool strong)
{
    for (size_t i = 0; i < req->num_headers; i++) {
        if (!um_str_eq_ci(req->headers[i].name, name)) continue;
        um_str v = req->headers[i].value;
        if (strong ? um_etag_match_strong(v, etag) : um_etag_match_weak(v, etag)) return true;
    }
    return false;
}

/* A singleton date field: ignored when repeated, a list, or not a valid HTTP-date (RFC 9110
 * 13.1.3, 13.1.4). */
static bool single_date(struct field f, time_t *t)
{
    return f.count == 1 && um_http_date_parse(f.first, t);
}

/* RFC 9110 13.1.5 with 8.8.2.2 for dates. */
static bool if_range_true(um_str v, const struct um_cond_stored *s)
{
    if (v.len > 0 && (v.base[0] == '"' || (v.len > 1 && v.base[0] == 'W' && v.base[1] == '/'))) {
        /* One entity tag, compared strongly (a weak one never matches). A list is not an
         * If-Range value: its first tag must end the field. */
        const char *q = v.base[0] == 'W' ? v.base + 2 : v.base;
        const char *close =
            q < v.base + v.len - 1 ? memchr(q + 1, '"', (size_t)(v.base + v.len - q - 1)) : NULL;
        if (close == NULL || close != v.base + v.len - 1) return false;
        return s->etag.base != NULL && um_etag_match_strong(v, s->etag);
    }
    time_t t;
    if (!um_http_date_parse(v, &t)) return false;
    /* A date is a strong validator only if Last-Modified is at least 60 s before Date:
     * otherwise two changes within that second could share it. */
    if (!s->has_last_modified || !s->has_date || s->date - s->last_modified < 60) return false;
    return t == s->last_modified;
}

int um_cache_conditional(const struct um_req_meta *req, const struct um_cond_stored *s,
                         bool as_origin, uint64_t *first, uint64_t *last)
{
    bool get_head = req->method == UM_METHOD_GET || req->method == UM_METHOD_HEAD;
    /* RFC 9110 13.2.1: preconditions are ignored when the response without them would not
     * be 2xx; RFC 9111 4.3.2: a cache evaluates them against a stored 200. */
    if (as_origin ? (s->status < 200 || s->status > 299) : s->status != 200) return s->status;

    struct cond_fields cf;
    find_all(req, &cf);
    struct field im = cf.im, ius = cf.ius, inm = cf.inm, ims = cf.ims, ir = cf.ir,
                 range = cf.range;
    time_t t;

    /* RFC 9111 4.3.2: "The If-Match and If-Unmodified-Since conditional header fields are
     * not applicable to a cache": the origin answers them. */
    if (!as_origin && (im.count > 0 || ius.count > 0)) return 0;

    /* RFC 9110 13.2.2 step 1. "*" is true: there is a current representation. */
    if (im.count > 0) {
        if (!(um_str_eq(im.first, "*") && im.count == 1) &&
            !(s->etag.base != NULL && any_line_matches(req, "if-match", s->etag, true)))
            return 412;
    } else if (ius.count > 0 && s->has_last_modified && single_date(ius, &t)) {
        /* Step 2: true when last modified at or before the date. */
        if (s->last_modified > t) return 412;
    }

    /* Step 3: weak comparison; "*" matches any current representation. */
    if (inm.count > 0) {
        um_str etag = s->etag.base != NULL ? s->etag : (um_str){"", 0};
        if (any_line_matches(req, "if-none-match", etag, false)) return get_head ? 304 : 412;
    } else if (get_head && ims.count > 0 && single_date(ims, &t)) {
        /* Step 4. A cache without a stored Last-Modified uses Date, then the time it
         * received the response (RFC 9111 4.3.2); an origin without one ignores the field. */
        bool have = s->has_last_modified || !as_origin;
        time_t lm = s->has_last_modified ? s->last_modified
                    : s->has_date        ? s->date
                                         : s->response_time;
        if (have && lm <= t) return 304;
    }

    /* Step 5: Range, for GET only (RFC 9110 14.2), on a full 200; If-Range decides whether
     * the range or the whole representation is sent. */
    if (req->method != UM_METHOD_GET || range.count != 1 || s->status != 200) return s->status;
    if (ir.count > 0 && (ir.count > 1 || !if_range_true(ir.first, s))) return s->status;
    uint64_t a, b;
    switch (um_range_parse(range.first, s->size, &a, &b)) {
    case UM_OK:
        if (first != NULL) *first = a;
        if (last != NULL) *last = b;
        return 206;
    case UM_ERR:
        return 416;
    default:
        return s->status;
    }
}

/* ---- same-origin targets --------------------------------------------------------------- */

static bool is_scheme_char(char c, bool first)
{
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (first) return alpha;
    return alpha || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

/* host[:port] -> lower-case-insensitive host slice and numeric port (default_port when
 * absent or empty). False when malformed. */
static bool split_authority(um_str a, unsigned default_port, um_str *host, unsigned *port)
{
    if (a.len == 0) return false;
    const char *p = a.base, *end = a.base + a.len, *h_end;
    if (*p == '[') {
        const char *rb = memchr(p, ']', a.len);
        if (rb == NULL) return false;
        h_end = rb + 1;
    } else {
        h_end = p;
        while (h_end < end && *h_end != ':')
            h_end++;
    }
    *host = (um_str){p, (size_t)(h_end - p)};
    if (host->len == 0) return false;
    *port = default_port;
    if (h_end == end) return true;
    if (*h_end != ':') return false;
    unsigned v = 0;
    size_t digits = 0;
    for (const char *q = h_end + 1; q < end; q++, digits++) {
        if (*q < '0' || *q > '9') return false;
        v = v * 10 + (unsigned)(*q - '0');
        if (v > 65535) return false;
    }
    if (digits > 0) *port = v;
    return true;
}

static bool same_authority(um_str scheme, um_str req_auth, um_str auth)
{
    unsigned dflt = um_str_eq_ci(scheme, "https") ? 443 : 80;
    um_str h1, h2;
    unsigned p1, p2;
    if (!split_authority(req_auth, dflt, &h1, &p1) || !split_authority(auth, dflt, &h2, &p2))
        return false;
    if (p1 != p2 || h1.len != h2.len) return false;
    for (size_t i = 0; i < h1.len; i++)
        if (um_ascii_lower(h1.base[i]) != um_ascii_lower(h2.base[i])) return false;
    return true;
}

/* RFC 3986 5.2.4, in place on buf[0..len); returns the new length. Output never outgrows
 * the input read so far, so writing behind the read position is safe. */
static size_t remove_dot_segments(char *buf, size_t len)
{
    size_t r = 0, w = 0;
    while (r < len) {
        const char *in = buf + r;
        size_t rem = len - r;
        if (rem >= 3 && memcmp(in, "../", 3) == 0) {
            r += 3;
        } else if (rem >= 2 && memcmp(in, "./", 2) == 0) {
            r += 2;
        } else if (rem >= 3 && memcmp(in, "/./", 3) == 0) {
            r += 2;
        } else if (rem == 2 && memcmp(in, "/.", 2) == 0) {
            buf[w++] = '/';
            r += 2;
        } else if ((rem >= 4 && memcmp(in, "/../", 4) == 0) ||
                   (rem == 3 && memcmp(in, "/..", 3) == 0)) {
            while (w > 0 && buf[w - 1] != '/')
                w--;
            if (w > 0) w--;
            /* "/../x" continues as "/x"; a final "/.." leaves "/". */
            if (rem == 3) buf[w++] = '/';
            r += 3;
        } else if ((rem == 1 && in[0] == '.') || (rem == 2 && memcmp(in, "..", 2) == 0)) {
            r += rem;
        } else {
            size_t seg = in[0] == '/' ? 1 : 0;
            while (seg < rem && in[seg] != '/')
                seg++;
            memmove(buf + w, in, seg);
            w += seg;
            r += seg;
        }
    }
    return w;
}

bool um_cache_same_origin_target(um_str scheme, um_str authority, um_str base, um_str value,
                                 char *out, size_t outsz, size_t *outlen)
{
    um_str v = um_str_trim(value);
    for (size_t i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.base[i];
        if (c <= 0x20 || c >= 0x7f) return false;
    }
    const char *hash = v.len > 0 ? memchr(v.base, '#', v.len) : NULL;
    if (hash != NULL) v.len = (size_t)(hash - v.base);

    /* scheme ":" */
    size_t i = 0;
    while (i < v.len && is_scheme_char(v.base[i], i == 0))
        i++;
    um_str rest = v;
    bool has_authority = false;
    if (i > 0 && i < v.len && v.base[i] == ':') {
        if (!str_eq_ci_n(v.base, i, scheme)) return false;
        rest = (um_str){v.base + i + 1, v.len - i - 1};
        if (rest.len < 2 || rest.base[0] != '/' || rest.base[1] != '/') return false;
    }
    if (rest.len >= 2 && rest.base[0] == '/' && rest.base[1] == '/') {
        const char *p = rest.base + 2, *end = rest.base + rest.len, *a = p;
        while (p < end && *p != '/' && *p != '?')
            p++;
        um_str auth = {a, (size_t)(p - a)};
        if (memchr(auth.base, '@', auth.len) != NULL) return false;
        if (!same_authority(scheme, authority, auth)) return false;
        rest = (um_str){p, (size_t)(end - p)};
        has_authority = true;
    }

    /* rest is now path [ "?" query ] relative to the request (or an absolute path). */
    const char *q = rest.len > 0 ? memchr(rest.base, '?', rest.len) : NULL;
    um_str rpath = {rest.base, q != NULL ? (size_t)(q - rest.base) : rest.len};
    um_str rquery = q != NULL ? (um_str){q, (size_t)(rest.base + rest.len - q)} : (um_str){NULL, 0};
    const char *bq = base.len > 0 ? memchr(base.base, '?', base.len) : NULL;
    um_str bpath = {base.base, bq != NULL ? (size_t)(bq - base.base) : base.len};
    um_str bquery =
        bq != NULL ? (um_str){bq, (size_t)(base.base + base.len - bq)} : (um_str){NULL, 0};

    /* RFC 3986 5.2.2 and 5.2.3, writing the merged path into out. */
    size_t n = 0;
    um_str query = rquery;
    if (has_authority) {
        if (rpath.len == 0) rpath = (um_str){"/", 1};
    } else if (rpath.len == 0) {
        rpath = bpath;
        if (q == NULL) query = bquery;
    } else if (rpath.base[0] != '/') {
        if (bpath.len == 0 || bpath.base[0] != '/') return false;
        size_t dir = bpath.len;
        while (dir > 0 && bpath.base[dir - 1] != '/')
            dir--;
        if (dir + rpath.len >= outsz) return false;
        memcpy(out, bpath.base, dir);
        n = dir;
    }
    if (n + rpath.len >= outsz) return false;
    memcpy(out + n, rpath.base, rpath.len);
    n = remove_dot_segments(out, n + rpath.len);
    if (n == 0 || out[0] != '/') return false;
    if (n + query.len >= outsz) return false;
    if (query.len > 0) memcpy(out + n, query.base, query.len);
    n += query.len;
    out[n] = '\0';
    *outlen = n;
    return true;
}

/* ---- Cache-Status ---------------------------------------------------------------------- */

/* sf-integer: at most 15 digits (RFC 8941 3.3.1), written at the end of tmp; returns where
 * it starts. */
static char *format_int(char tmp[20], int64_t v)
{
    const int64_t lim = INT64_C(999999999999999);
    if (v > lim) v = lim;
    if (v < -lim) v = -lim;
    char *p = tmp + 20;
    uint64_t u = v < 0 ? (uint64_t)(-v) : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    if (v < 0) *--p = '-';
    return p;
}

static void append_int(struct um_buf *b, int64_t v)
{
    char tmp[20];
    char *p = format_int(tmp, v);
    um_buf_append(b, p, (size_t)(tmp + sizeof(tmp) - p));
}

/* sf-token = ( ALPHA / "*" ) *( tchar / ":" / "/" ) */
static bool is_sf_token(const char *s)
{
    char c = s[0];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '*')) return false;
    for (s++; *s; s++)
        if (!um_http_tchar((unsigned char)*s) && *s != ':' && *s != '/') return false;
    return true;
}

/* sf-string: printable ASCII, with '"' and '\\' escaped; anything else becomes '?'. */
static void append_sf_string(struct um_buf *b, const char *s)
{
    um_buf_append_char(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') um_buf_append_char(b, '\\');
        um_buf_append_char(b, c >= 0x20 && c < 0x7f ? (char)c : '?');
    }
    um_buf_append_char(b, '"');
}

static void append_item(struct um_buf *b, const char *s)
{
    if (is_sf_token(s))
        um_buf_append_str(b, s);
    else
        append_sf_string(b, s);
}

static const char *fwd_str(enum um_cache_fwd f)
{
    switch (f) {
    case UM_FWD_BYPASS:
        return "bypass";
    case UM_FWD_METHOD:
        return "method";
    case UM_FWD_URI_MISS:
        return "uri-miss";
    case UM_FWD_VARY_MISS:
        return "vary-miss";
    case UM_FWD_MISS:
        return "miss";
    case UM_FWD_REQUEST:
        return "request";
    case UM_FWD_STALE:
        return "stale";
    case UM_FWD_PARTIAL:
        return "partial";
    case UM_FWD_NONE:
        break;
    }
    return NULL;
}

/* The usual hit, "NAME; hit" and maybe "; ttl=N", NAME a token, into out when it fits
 * (with a NUL); returns its length, or 0 to take the general way. Every hit writes one. */
static size_t format_plain_hit(char *out, size_t n, const char *name,
                               const struct um_cache_status *cs)
{
    char tmp[96], num[20];
    size_t nl = strlen(name);
    if (nl > 48 || !is_sf_token(name)) return 0;
    char *p = tmp;
    memcpy(p, name, nl);
    p += nl;
    memcpy(p, "; hit", 5);
    p += 5;
    if (cs->has_ttl) {
        memcpy(p, "; ttl=", 6);
        p += 6;
        char *d = format_int(num, cs->ttl);
        size_t dl = (size_t)(num + sizeof(num) - d);
        memcpy(p, d, dl);
        p += dl;
    }
    size_t len = (size_t)(p - tmp);
    if (len >= n) return 0;
    memcpy(out, tmp, len);
    out[len] = '\0';
    return len;
}

size_t um_cache_status_format(char *out, size_t n, const struct um_cache_status *cs)
{
    const char *name = cs->cache_name != NULL && cs->cache_name[0] ? cs->cache_name : "umbra";
    if (cs->hit && cs->key == NULL && (cs->detail == NULL || !cs->detail[0])) {
        size_t len = format_plain_hit(out, n, name, cs);
        if (len > 0) return len;
    }
    struct um_buf b;
    um_buf_init_fixed(&b, out, n);
    append_item(&b, name);
    /* RFC 9211 2.1-2.2: hit and fwd exclude each other; stored and collapsed describe a
     * forwarded request. */
    if (cs->hit) {
        um_buf_append_str(&b, "; hit");
    } else if (fwd_str(cs->fwd) != NULL) {
        um_buf_append_str(&b, "; fwd=");
        um_buf_append_str(&b, fwd_str(cs->fwd));
        if (cs->fwd_status > 0) {
            um_buf_append_str(&b, "; fwd-status=");
            append_int(&b, cs->fwd_status);
        }
        if (cs->stored) um_buf_append_str(&b, "; stored");
        if (cs->collapsed) um_buf_append_str(&b, "; collapsed");
    }
    if (cs->has_ttl) {
        um_buf_append_str(&b, "; ttl=");
        append_int(&b, cs->ttl);
    }
    if (cs->key != NULL) {
        um_buf_append_str(&b, "; key=");
        append_sf_string(&b, cs->key);
    }
    if (cs->detail != NULL && cs->detail[0]) {
        um_buf_append_str(&b, "; detail=");
        append_item(&b, cs->detail);
    }
    return b.len;
}
