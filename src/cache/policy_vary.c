/* SPDX-License-Identifier: BSD-2-Clause */
/* Vary (RFC 9111 section 4.1): the names a response varies on, and the normalised request
 * values that decide whether a later request matches.
 *
 * The normaliser writes into an "emitter" that either copies into a buffer (to store the
 * values of the request that filled an object) or compares with a stored value as it goes
 * (to match a later request without a buffer or a length limit). */
#include "umbra/cachepolicy.h"
#include "umbra/httpfield.h"

#include <string.h>
#include "umbra/ascii.h"

void um_vary_init(struct um_vary *v)
{
    memset(v, 0, sizeof(*v));
}

void um_vary_parse(struct um_vary *v, um_str value)
{
    /* Vary = #( "*" / field-name ) */
    size_t pos = 0;
    um_str m;
    while (um_http_list_next(value, &pos, &m)) {
        if (m.len == 0) continue;
        if (um_str_eq(m, "*")) {
            v->star = true;
            continue;
        }
        bool token = true;
        for (size_t i = 0; i < m.len && token; i++)
            token = um_http_tchar((unsigned char)m.base[i]);
        if (!token) {
            /* Not a field name: no request can carry it, so it would always "match" as
             * absent. We cannot tell what the origin meant; refuse to match at all. */
            v->bad = true;
            continue;
        }
        bool dup = false;
        for (size_t i = 0; i < v->n && !dup; i++)
            dup = um_str_ieq(v->names[i], m);
        if (dup) continue;
        if (v->n == UM_VARY_MAX)
            v->bad = true;
        else
            v->names[v->n++] = m;
    }
}

bool um_vary_usable(const struct um_vary *v)
{
    return !v->star && !v->bad;
}

/* ---- normalisation ------------------------------------------------------------------- */

struct emit {
    char *out; /* copy mode */
    size_t cap;
    const char *cmp; /* compare mode */
    size_t cmplen;
    size_t len;
    bool diff;
};

static void put(struct emit *e, char c)
{
    if (e->out != NULL && e->len < e->cap) e->out[e->len] = c;
    if (e->cmp != NULL && !e->diff && (e->len >= e->cmplen || e->cmp[e->len] != c)) e->diff = true;
    e->len++;
}

enum kind {
    K_GENERIC, /* unknown grammar: combine lines, collapse whitespace runs */
    K_LIST_CI, /* a list whose members are case-insensitive throughout */
    K_ACCEPT,  /* media ranges: type/subtype and parameter names are case-insensitive */
    K_COOKIE,  /* cookie-pairs joined by "; " (RFC 6265 5.4) */
};

static enum kind kind_of(um_str name)
{
    /* Accept-Encoding: content codings are case-insensitive (RFC 9110 8.4.1);
     * Accept-Charset: so are charset names (8.3.2); Accept-Language: so are language ranges
     * (RFC 4647 2.1). Their members carry no other parameter than the weight, whose name
     * is case-insensitive and value numeric (RFC 9110 12.4.2). */
    if (um_str_eq_ci(name, "accept-encoding") || um_str_eq_ci(name, "accept-charset") ||
        um_str_eq_ci(name, "accept-language"))
        return K_LIST_CI;
    /* Accept: type, subtype and parameter names are case-insensitive (8.3.1, 5.6.6), but
     * parameter values may not be. */
    if (um_str_eq_ci(name, "accept")) return K_ACCEPT;
    if (um_str_eq_ci(name, "cookie")) return K_COOKIE;
    return K_GENERIC;
}

/* Writes s: runs of SP/HTAB outside quoted strings become one SP; quoted strings are copied
 * as they are; outside them, characters are lower-cased when fold says so, and for
 * K_ACCEPT parameters only up to the "=". */
static void put_span(struct emit *e, um_str s, bool fold, bool fold_until_eq)
{
    bool inq = false, space = false;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.base[i];
        if (inq) {
            put(e, c);
            if (c == '\\' && i + 1 < s.len)
                put(e, s.base[++i]);
            else if (c == '"')
                inq = false;
            continue;
        }
        if (um_is_ows(c)) {
            space = true;
            continue;
        }
        if (space) put(e, ' ');
        space = false;
        if (c == '"') {
            inq = true;
            put(e, c);
            continue;
        }
        if (fold_until_eq && c == '=') fold = false;
        put(e, fold ? um_ascii_lower(c) : c);
    }
}

/* Splits s at sep outside quoted strings: returns the first piece and advances *rest. */
static um_str split(um_str *rest, char sep)
{
    const char *end = rest->base + rest->len;
    const char *p = um_http_find_unquoted(rest->base, end, sep);
    um_str piece = {rest->base, (size_t)(p - rest->base)};
    if (p < end) p++;
    *rest = (um_str){p, (size_t)(end - p)};
    return piece;
}

/* One list member: parameters split at ";", trimmed, empty ones dropped (RFC 9110 5.6.6
 * allows "OWS ; OWS" and empty parameters). */
static void put_member(struct emit *e, um_str m, enum kind k)
{
    bool first = true;
    while (m.len > 0) {
        um_str part = um_str_trim(split(&m, ';'));
        if (part.len == 0) continue;
        if (!first) put(e, ';');
        if (k == K_LIST_CI)
            put_span(e, part, true, false);
        else if (first)
            put_span(e, part, true, false); /* the media range */
        else
            put_span(e, part, true, true); /* name=value: only the name folds */
        first = false;
    }
}

/* Emits the normalised value of field name from h; returns whether it is present. */
static bool normalize(um_str name, const struct um_header *h, size_t n, struct emit *e)
{
    enum kind k = kind_of(name);
    bool present = false, any = false;
    for (size_t i = 0; i < n; i++) {
        if (!um_str_ieq(h[i].name, name)) continue;
        present = true;
        um_str v = um_str_trim(h[i].value);
        switch (k) {
        case K_GENERIC:
            /* Combining lines (RFC 9110 5.3) with ", "; empty lines add nothing. */
            if (v.len == 0) break;
            if (any) {
                put(e, ',');
                put(e, ' ');
            }
            put_span(e, v, false, false);
            any = true;
            break;
        case K_LIST_CI:
        case K_ACCEPT:
            /* Empty members are ignored (RFC 9110 5.6.1); OWS around "," removed. */
            while (v.len > 0) {
                um_str m = um_str_trim(split(&v, ','));
                if (m.len == 0) continue;
                if (any) put(e, ',');
                put_member(e, m, k);
                any = true;
            }
            break;
        case K_COOKIE:
            while (v.len > 0) {
                const char *semi = memchr(v.base, ';', v.len);
                size_t l = semi != NULL ? (size_t)(semi - v.base) : v.len;
                um_str pair = um_str_trim((um_str){v.base, l});
                v = semi != NULL ? (um_str){semi + 1, v.len - l - 1} : (um_str){v.base + l, 0};
                if (pair.len == 0) continue;
                if (any) {
                    put(e, ';');
                    put(e, ' ');
                }
                for (size_t j = 0; j < pair.len; j++)
                    put(e, pair.base[j]);
                any = true;
            }
            break;
        }
    }
    return present;
}

size_t um_vary_normalize(um_str name, const struct um_header *h, size_t n, char *out, size_t outsz,
                         bool *present)
{
    struct emit e = {.out = out, .cap = outsz > 0 ? outsz - 1 : 0};
    *present = normalize(name, h, n, &e);
    if (outsz > 0) out[e.len < outsz ? e.len : outsz - 1] = '\0';
    return e.len;
}

bool um_vary_matches(const struct um_vary_value *stored, size_t n_stored, const struct um_header *h,
                     size_t n)
{
    for (size_t i = 0; i < n_stored; i++) {
        struct emit e = {.cmp = stored[i].value.base, .cmplen = stored[i].value.len};
        bool present = normalize(stored[i].name, h, n, &e);
        if (present != stored[i].present) return false;
        if (present && (e.diff || e.len != e.cmplen)) return false;
    }
    return true;
}
