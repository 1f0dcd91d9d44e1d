/* SPDX-License-Identifier: BSD-2-Clause */
/* Choosing a content coding (RFC 9110 sections 12.5.3 and 12.4.2).
 *
 *   Accept-Encoding = #( codings [ weight ] )
 *   codings = content-coding / "identity" / "*"
 *   weight  = OWS ";" OWS "q=" qvalue
 *   qvalue  = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )
 *
 * A field that does not parse is treated as absent: the client gets identity, which every
 * client can take. q-values are kept in thousandths. */
#include <string.h>
#include <strings.h>

#include "umbra/compress.h"
#include "umbra/httpfield.h"

static const char *const names[UM_CODING_COUNT] = {"identity", "gzip", "br", "zstd"};

const char *um_coding_name(enum um_coding c)
{
    return (unsigned)c < UM_CODING_COUNT ? names[c] : "identity";
}

/* "q=" qvalue, after the ';' (with OWS around it). Returns -1 when malformed. */
static int parse_weight(um_str p)
{
    p = um_str_trim(p);
    if (p.len < 3 || (p.base[0] != 'q' && p.base[0] != 'Q') || p.base[1] != '=')
        return -1;
    const char *s = p.base + 2;
    size_t n = p.len - 2;
    if (s[0] != '0' && s[0] != '1')
        return -1;
    int q = (s[0] - '0') * 1000;
    if (n == 1)
        return q;
    if (s[1] != '.' || n > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        q += (s[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

/* The weights the field gives: q[c] for each coding (-1: not named), *star for "*".
 * Returns false when a member is malformed. */
static bool parse_field(um_str v, int q[UM_CODING_COUNT], int *star)
{
    size_t pos = 0;
    um_str m;
    while (um_http_list_next(v, &pos, &m)) {
        if (m.len == 0)
            continue;
        const char *semi = memchr(m.base, ';', m.len);
        um_str coding = um_str_trim((um_str){m.base, semi ? (size_t)(semi - m.base) : m.len});
        int w = 1000;
        if (semi) {
            um_str rest = {semi + 1, m.len - (size_t)(semi - m.base) - 1};
            /* Only the weight is defined; another parameter, or two, is malformed. */
            if (memchr(rest.base, ';', rest.len))
                return false;
            w = parse_weight(rest);
            if (w < 0)
                return false;
        }
        if (um_str_eq(coding, "*")) {
            *star = w;
            continue;
        }
        if (!um_http_is_token(coding))
            return false;
        /* "x-gzip" is gzip (RFC 9110 8.4.1.3). */
        for (int c = 0; c < UM_CODING_COUNT; c++)
            if (um_str_eq_ci(coding, names[c]) || (c == UM_CODING_GZIP && um_str_eq_ci(coding, "x-gzip")))
                if (q[c] < 0 || w > q[c])
                    q[c] = w;
    }
    return true;
}

enum um_coding um_compress_negotiate(const struct um_header *h, size_t n,
                                     const unsigned char *order, size_t norder)
{
    int q[UM_CODING_COUNT] = {-1, -1, -1, -1}, star = -1;
    bool present = false;
    for (size_t i = 0; i < n; i++) {
        if (h[i].name.len != 15 || !um_str_eq_ci(h[i].name, "accept-encoding"))
            continue;
        present = true;
        if (!parse_field(h[i].value, q, &star))
            return UM_CODING_IDENTITY;
    }
    if (!present)
        return UM_CODING_IDENTITY;
    enum um_coding best = UM_CODING_IDENTITY;
    int best_q = 0;
    for (size_t i = 0; i < norder; i++) {
        enum um_coding c = (enum um_coding)order[i];
        if (c <= UM_CODING_IDENTITY || c >= UM_CODING_COUNT)
            continue;
        int w = q[c] >= 0 ? q[c] : star >= 0 ? star : 0;
        if (w > best_q) {
            best = c;
            best_q = w;
        }
    }
    /* identity named with a higher weight than every coding wins; not named, it is the
     * last resort (RFC 9110 12.5.3: it is acceptable unless refused). */
    int idq = q[UM_CODING_IDENTITY] >= 0 ? q[UM_CODING_IDENTITY] : 0;
    if (best != UM_CODING_IDENTITY && idq > best_q)
        return UM_CODING_IDENTITY;
    return best;
}

bool um_compress_type_ok(const struct um_compress_conf *cc, um_str type)
{
    const char *semi = memchr(type.base, ';', type.len);
    um_str t = um_str_trim((um_str){type.base, semi ? (size_t)(semi - type.base) : type.len});
    const char *slash = memchr(t.base, '/', t.len);
    if (slash == NULL)
        return false;
    size_t major = (size_t)(slash - t.base);
    for (size_t i = 0; i < cc->num_types; i++) {
        const char *want = cc->types[i];
        size_t wl = strlen(want);
        if (wl >= 2 && want[wl - 1] == '*' && want[wl - 2] == '/') {
            if (major == wl - 2 && strncasecmp(t.base, want, major) == 0)
                return true;
            continue;
        }
        if (t.len == wl && strncasecmp(t.base, want, wl) == 0)
            return true;
    }
    return false;
}
