/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP field values that need more than a split on commas: dates (RFC 9110 section
 * 5.6.7), byte ranges (section 14) and entity tags (section 8.8.3); the field names that
 * several layers test for, and the members of Connection.
 *
 * Nothing here reads the locale or the TZ variable: the day and month names are our own
 * tables and the calendar arithmetic is Howard Hinnant's proleptic Gregorian
 * days_from_civil / civil_from_days, valid for any year a time_t can hold. */
#include "umbra/httpfield.h"

#include "umbra/http1.h"

#include <string.h>
#include "umbra/ascii.h"

static const char wkday_names[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *const weekday_names[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                             "Thursday", "Friday", "Saturday"};
static const char month_names[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

#define SECS_PER_DAY 86400
/* 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the years a four-digit field can carry. */
#define DATE_MIN INT64_C(-62135596800)
#define DATE_MAX INT64_C(253402300799)

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Days since 1970-01-01 of the civil date y-m-d (m in 1..12, d in 1..31). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static unsigned days_in_month(int64_t y, unsigned m)
{
    static const unsigned char dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

static char *put2(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

void um_http_date_format(time_t t, char out[UM_HTTP_DATE_LEN + 1])
{
    /* Outside the four-digit years the format has no spelling; clamp rather than write a
     * field a recipient would reject. */
    int64_t s = (int64_t)t;
    if (s < DATE_MIN) s = DATE_MIN;
    if (s > DATE_MAX) s = DATE_MAX;

    int64_t days = floor_div(s, SECS_PER_DAY);
    unsigned sod = (unsigned)(s - days * SECS_PER_DAY);
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    /* 1970-01-01 was a Thursday. */
    unsigned wd = (unsigned)((days % 7 + 7 + 4) % 7);

    char *p = out;
    memcpy(p, wkday_names[wd], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = put2(p, d);
    *p++ = ' ';
    memcpy(p, month_names[m - 1], 3);
    p += 3;
    *p++ = ' ';
    p = put2(p, (unsigned)(y / 100));
    p = put2(p, (unsigned)(y % 100));
    *p++ = ' ';
    p = put2(p, sod / 3600);
    *p++ = ':';
    p = put2(p, sod / 60 % 60);
    *p++ = ':';
    p = put2(p, sod % 60);
    memcpy(p, " GMT", 5); /* with the NUL */
}

/* Reads exactly n decimal digits. */
static bool get_digits(const char *p, unsigned n, unsigned *v)
{
    unsigned r = 0;
    for (unsigned i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        r = r * 10 + (unsigned)(p[i] - '0');
    }
    *v = r;
    return true;
}

static bool get_month(const char *p, unsigned *m)
{
    for (unsigned i = 0; i < 12; i++) {
        if (memcmp(p, month_names[i], 3) == 0) {
            *m = i + 1;
            return true;
        }
    }
    return false;
}

static bool is_wkday(const char *p)
{
    for (unsigned i = 0; i < 7; i++)
        if (memcmp(p, wkday_names[i], 3) == 0) return true;
    return false;
}

/* "hh:mm:ss"; a second of 60 is a leap second (RFC 9110 section 5.6.7 allows it) and is
 * counted as the first second of the next minute, as POSIX time does. */
static bool get_time(const char *p, unsigned *sod)
{
    unsigned h, mi, se;
    if (!get_digits(p, 2, &h) || p[2] != ':' || !get_digits(p + 3, 2, &mi) || p[5] != ':' ||
        !get_digits(p + 6, 2, &se))
        return false;
    if (h > 23 || mi > 59 || se > 60) return false;
    *sod = h * 3600 + mi * 60 + se;
    return true;
}

static bool make_time(int64_t y, unsigned m, unsigned d, unsigned sod, int64_t *out)
{
    if (y < 1 || y > 9999 || d < 1 || d > days_in_month(y, m)) return false;
    *out = days_from_civil(y, m, d) * SECS_PER_DAY + sod;
    return true;
}

/* "Sun, 06 Nov 1994 08:49:37 GMT" */
static bool parse_imf(const char *p, size_t len, int64_t *t)
{
    unsigned d, m, y, sod;
    if (len != 29 || !is_wkday(p) || memcmp(p + 3, ", ", 2) != 0 || !get_digits(p + 5, 2, &d) ||
        p[7] != ' ' || !get_month(p + 8, &m) || p[11] != ' ' || !get_digits(p + 12, 4, &y) ||
        p[16] != ' ' || !get_time(p + 17, &sod) || memcmp(p + 25, " GMT", 4) != 0)
        return false;
    return make_time(y, m, d, sod, t);
}

/* "Sun Nov  6 08:49:37 1994"; the day is "dd" or " d". */
static bool parse_asctime(const char *p, size_t len, int64_t *t)
{
    unsigned d, m, y, sod;
    if (len != 24 || !is_wkday(p) || p[3] != ' ' || !get_month(p + 4, &m) || p[7] != ' ')
        return false;
    if (p[8] == ' ') {
        if (!get_digits(p + 9, 1, &d)) return false;
    } else if (!get_digits(p + 8, 2, &d)) {
        return false;
    }
    if (p[10] != ' ' || !get_time(p + 11, &sod) || p[19] != ' ' || !get_digits(p + 20, 4, &y))
        return false;
    return make_time(y, m, d, sod, t);
}

/* "Sunday, 06-Nov-94 08:49:37 GMT". The two-digit year is resolved against now as RFC 9110
 * section 5.6.7 says: a date that would be more than 50 years in the future means the most
 * recent past year with the same last two digits. So the year chosen is the latest one
 * with those digits whose date is not after now + 50 years. */
static bool parse_rfc850(const char *p, size_t len, int64_t now, int64_t *t)
{
    size_t nl = 0;
    while (nl < len && p[nl] != ',')
        nl++;
    unsigned wd;
    for (wd = 0; wd < 7; wd++)
        if (strlen(weekday_names[wd]) == nl && memcmp(p, weekday_names[wd], nl) == 0) break;
    if (wd == 7 || len - nl != 24) return false;
    p += nl;
    unsigned d, m, yy, sod;
    if (memcmp(p, ", ", 2) != 0 || !get_digits(p + 2, 2, &d) || p[4] != '-' ||
        !get_month(p + 5, &m) || p[8] != '-' || !get_digits(p + 9, 2, &yy) || p[11] != ' ' ||
        !get_time(p + 12, &sod) || memcmp(p + 20, " GMT", 4) != 0)
        return false;

    int64_t nowdays = floor_div(now, SECS_PER_DAY);
    int64_t ny;
    unsigned nm, nd;
    civil_from_days(nowdays, &ny, &nm, &nd);
    int64_t limit =
        days_from_civil(ny + 50, nm, nd) * SECS_PER_DAY + (now - nowdays * SECS_PER_DAY);
    int64_t top = ny + 50;
    int64_t y = top - ((top - (int64_t)yy) % 100 + 100) % 100;
    /* The day is checked against the resolved year: "29-Feb-00" may be 2000 but not 1900. */
    if (d >= 1 && d <= 31 && days_from_civil(y, m, d) * SECS_PER_DAY + sod > limit) y -= 100;
    return make_time(y, m, d, sod, t);
}

/* The parser behind um_http_date_parse, with the clock as a parameter so that the RFC 850
 * century rule can be tested. */
static bool date_parse_at(um_str s, time_t now, time_t *t)
{
    s = um_str_trim(s);
    if (s.len < 4) return false;
    int64_t v;
    bool ok;
    if (s.base[3] == ',')
        ok = parse_imf(s.base, s.len, &v);
    else if (s.base[3] == ' ')
        ok = parse_asctime(s.base, s.len, &v);
    else
        ok = parse_rfc850(s.base, s.len, (int64_t)now, &v);
    /* Guards a 32-bit time_t; a no-op where time_t has 64 bits. */
    if (!ok || (int64_t)(time_t)v != v) return false;
    *t = (time_t)v;
    return true;
}

bool um_http_date_parse(um_str s, time_t *t)
{
    return date_parse_at(s, time(NULL), t);
}

/* Reads 1*DIGIT from [p, end), saturating at UINT64_MAX: a position too large to
 * represent is still a position past any representation we hold. Returns the end of the
 * digits, or NULL when there are none. */
static const char *get_u64(const char *p, const char *end, uint64_t *v)
{
    const char *s = p;
    uint64_t r = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        unsigned dg = (unsigned)(*p - '0');
        r = r > (UINT64_MAX - dg) / 10 ? UINT64_MAX : r * 10 + dg;
    }
    *v = r;
    return p == s ? NULL : p;
}

int um_range_parse(um_str value, uint64_t size, uint64_t *first, uint64_t *last)
{
    um_str v = um_str_trim(value);
    const char *eq = v.len > 0 ? memchr(v.base, '=', v.len) : NULL;
    if (eq == NULL || !um_str_eq_ci((um_str){v.base, (size_t)(eq - v.base)}, "bytes"))
        return UM_DONE;

    /* range-set = 1#range-spec: OWS is allowed around the commas only, and empty list
     * elements are skipped (RFC 9110 section 5.6.1.2). */
    const char *p = eq + 1, *end = v.base + v.len;
    if (p < end && um_is_ows(*p)) return UM_DONE;
    um_str spec = {NULL, 0};
    unsigned n = 0;
    for (;;) {
        const char *s = p;
        while (p < end && *p != ',')
            p++;
        um_str el = um_str_trim((um_str){s, (size_t)(p - s)});
        if (el.len > 0) {
            /* Only one range is served; the others are answered with the whole thing. */
            if (++n > 1) return UM_DONE;
            spec = el;
        }
        if (p == end) break;
        p++;
    }
    if (n == 0) return UM_DONE;

    const char *q = spec.base, *qend = spec.base + spec.len;
    uint64_t a, b;
    if (*q == '-') {
        if ((q = get_u64(q + 1, qend, &b)) == NULL || q != qend) return UM_DONE;
        if (b == 0 || size == 0) return UM_ERR;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return UM_OK;
    }
    if ((q = get_u64(q, qend, &a)) == NULL || q == qend || *q != '-') return UM_DONE;
    q++;
    bool has_last = q < qend;
    if (has_last && ((q = get_u64(q, qend, &b)) == NULL || q != qend)) return UM_DONE;
    if (has_last && a > b) return UM_DONE;
    if (a >= size) return UM_ERR;
    *first = a;
    *last = has_last && b < size - 1 ? b : size - 1;
    return UM_OK;
}

/* entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE, etagc = %x21 / %x23-7E / obs-text.
 * On success advances *pp and sets *opaque to the quoted part, quotes included. */
static bool get_etag(const char **pp, const char *end, bool *weak, um_str *opaque)
{
    const char *p = *pp;
    *weak = false;
    if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
        *weak = true;
        p += 2;
    }
    if (p == end || *p != '"') return false;
    const char *s = p++;
    for (; p < end && *p != '"'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x21 || c == 0x7f) return false;
    }
    if (p == end) return false;
    p++;
    *opaque = (um_str){s, (size_t)(p - s)};
    *pp = p;
    return true;
}

static const char *skip_ows(const char *p, const char *end)
{
    while (p < end && um_is_ows(*p))
        p++;
    return p;
}

/* The whole list is checked before it can match: a malformed list matches nothing, even
 * when a well-formed tag in it would have. Note that an opaque tag may contain commas, so
 * the list is walked tag by tag, not split. */
static bool etag_match(um_str list, um_str etag, bool strong)
{
    list = um_str_trim(list);
    if (um_str_eq(list, "*")) return true;

    etag = um_str_trim(etag);
    if (etag.len == 0 || list.len == 0) return false;
    const char *e = etag.base, *eend = etag.base + etag.len;
    bool eweak;
    um_str eop;
    if (!get_etag(&e, eend, &eweak, &eop) || e != eend) return false;
    if (strong && eweak) return false;

    const char *p = list.base, *end = list.base + list.len;
    bool matched = false;
    while (p < end) {
        if (*p == ',') {
            p = skip_ows(p + 1, end);
            continue;
        }
        bool weak;
        um_str op;
        if (!get_etag(&p, end, &weak, &op)) return false;
        if ((!strong || !weak) && op.len == eop.len && memcmp(op.base, eop.base, op.len) == 0)
            matched = true;
        p = skip_ows(p, end);
        if (p < end) {
            if (*p != ',') return false;
            p = skip_ows(p + 1, end);
        }
    }
    return matched;
}

bool um_etag_match_weak(um_str if_none_match, um_str etag)
{
    return etag_match(if_none_match, etag, false);
}

bool um_etag_match_strong(um_str list, um_str etag)
{
    return etag_match(list, etag, true);
}

/* ---------------------------------------------------------------- known field names */

struct known {
    char name[26]; /* lower case */
    enum um_field_id id;
};

#define K(s, id) {s, UM_FIELD_##id}
static const struct known k2[] = {K("te", TE)};
static const struct known k3[] = {K("age", AGE), K("via", VIA)};
static const struct known k4[] = {K("date", DATE), K("etag", ETAG), K("vary", VARY),
                                  K("xkey", XKEY), K("host", HOST)};
static const struct known k6[] = {K("server", SERVER), K("expect", EXPECT), K("pragma", PRAGMA),
                                  K("x-host", X_HOST)};
static const struct known k7[] = {K("expires", EXPIRES), K("trailer", TRAILER),
                                  K("upgrade", UPGRADE)};
static const struct known k9[] = {K("cache-tag", CACHE_TAG)};
static const struct known k10[] = {K("connection", CONNECTION), K("keep-alive", KEEP_ALIVE),
                                   K("set-cookie", SET_COOKIE)};
static const struct known k12[] = {K("cache-status", CACHE_STATUS)};
static const struct known k13[] = {K("cache-control", CACHE_CONTROL),
                                   K("last-modified", LAST_MODIFIED),
                                   K("authorization", AUTHORIZATION),
                                   K("surrogate-key", SURROGATE_KEY),
                                   K("x-rewrite-url", X_REWRITE_URL)};
static const struct known k14[] = {K("content-length", CONTENT_LENGTH),
                                   K("x-original-url", X_ORIGINAL_URL)};
static const struct known k15[] = {K("x-forwarded-for", X_FORWARDED_FOR),
                                   K("x-original-host", X_ORIGINAL_HOST)};
static const struct known k16[] = {K("content-encoding", CONTENT_ENCODING),
                                   K("proxy-connection", PROXY_CONNECTION),
                                   K("x-forwarded-host", X_FORWARDED_HOST),
                                   K("x-forwarded-port", X_FORWARDED_PORT)};
static const struct known k17[] = {K("transfer-encoding", TRANSFER_ENCODING),
                                   K("x-forwarded-proto", X_FORWARDED_PROTO)};
static const struct known k18[] = {K("proxy-authenticate", PROXY_AUTHENTICATE),
                                   K("x-forwarded-scheme", X_FORWARDED_SCHEME),
                                   K("x-forwarded-prefix", X_FORWARDED_PREFIX),
                                   K("x-forwarded-server", X_FORWARDED_SERVER)};
static const struct known k19[] = {K("proxy-authorization", PROXY_AUTHORIZATION)};
static const struct known k25[] = {K("proxy-authentication-info", PROXY_AUTHENTICATION_INFO)};
#undef K

static inline unsigned char fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* The entry of tab[0..k) (all of name's length) that name spells, or UM_FIELD_OTHER. The
 * last byte tells most candidates apart before the loop. */
static enum um_field_id pick(um_str name, const struct known *tab, size_t k)
{
    unsigned char first = fold((unsigned char)name.base[0]);
    unsigned char last = fold((unsigned char)name.base[name.len - 1]);
    for (size_t i = 0; i < k; i++) {
        const char *lit = tab[i].name;
        if ((unsigned char)lit[0] != first || (unsigned char)lit[name.len - 1] != last)
            continue;
        size_t j = 1;
        while (j < name.len - 1 && fold((unsigned char)name.base[j]) == (unsigned char)lit[j])
            j++;
        if (j >= name.len - 1)
            return tab[i].id;
    }
    return UM_FIELD_OTHER;
}

enum um_field_id um_http_field_id(um_str name)
{
#define PICK(tab) pick(name, tab, UM_NELEMS(tab))
    switch (name.len) {
    case 2: return PICK(k2);
    case 3: return PICK(k3);
    case 4: return PICK(k4);
    case 6: return PICK(k6);
    case 7: return PICK(k7);
    case 9: return PICK(k9);
    case 10: return PICK(k10);
    case 12: return PICK(k12);
    case 13: return PICK(k13);
    case 14: return PICK(k14);
    case 15: return PICK(k15);
    case 16: return PICK(k16);
    case 17: return PICK(k17);
    case 18: return PICK(k18);
    case 19: return PICK(k19);
    case 25: return PICK(k25);
    default: return UM_FIELD_OTHER;
    }
#undef PICK
}

/* ---------------------------------------------------------------- trailers */

bool um_http_trailer_allowed(um_str name)
{
    if (name.len == 0 || name.base[0] == ':') return false; /* pseudo-fields belong to a head */
    switch (um_http_field_id(name)) {
    case UM_FIELD_OTHER:
        break;
    case UM_FIELD_ETAG: /* a validator computed as the body went (RFC 9110 section 6.5.2) */
    case UM_FIELD_LAST_MODIFIED:
    case UM_FIELD_SERVER:
    case UM_FIELD_VIA:
        return true;
    default:
        return false; /* framing, hop-by-hop, routing, caching, authentication */
    }
    static const char *const refused[] = {
        "content-type",        "content-range",    "location", "range",         "retry-after",
        "proxy-authenticate",  "www-authenticate", "if-match", "if-none-match", "if-modified-since",
        "if-unmodified-since", "max-forwards",     "cookie",
    };
    for (size_t i = 0; i < UM_NELEMS(refused); i++)
        if (name.len == strlen(refused[i]) && um_str_eq_ci(name, refused[i])) return false;
    return true;
}

/* ---------------------------------------------------------------- Connection's members */

void um_http_conn_tokens_init(struct um_http_conn_tokens *t, const struct um_header *h, size_t n)
{
    t->n = 0;
    t->overflow = false;
    t->_h = h;
    t->_nh = n;
    for (size_t i = 0; i < n && !t->overflow; i++) {
        if (um_http_field_id(h[i].name) != UM_FIELD_CONNECTION)
            continue;
        size_t pos = 0;
        um_str tok;
        while (um_http_list_next(h[i].value, &pos, &tok)) {
            if (tok.len == 0)
                continue;
            if (t->n == UM_HTTP_CONN_TOKENS) {
                t->overflow = true;
                break;
            }
            t->tok[t->n++] = tok;
        }
    }
}

bool um_http_conn_names(const struct um_http_conn_tokens *t, um_str name)
{
    if (name.len == 0)
        return false;
    if (!t->overflow) {
        for (size_t i = 0; i < t->n; i++)
            if (um_str_ieq(t->tok[i], name))
                return true;
        return false;
    }
    for (size_t i = 0; i < t->_nh; i++) {
        if (um_http_field_id(t->_h[i].name) != UM_FIELD_CONNECTION)
            continue;
        size_t pos = 0;
        um_str tok;
        while (um_http_list_next(t->_h[i].value, &pos, &tok))
            if (um_str_ieq(tok, name))
                return true;
    }
    return false;
}
