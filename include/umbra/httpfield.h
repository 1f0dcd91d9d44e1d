/* SPDX-License-Identifier: BSD-2-Clause */
/* Parsing and formatting of individual HTTP fields: dates, ranges, entity tags. Pure
 * functions, no allocation, safe from any thread. */
#ifndef UMBRA_HTTPFIELD_H
#define UMBRA_HTTPFIELD_H

#include <time.h>

#include "umbra/common.h"

/* Character classes, one bit each in um_http_cls[byte]. No class contains NUL, CR or LF
 * (the request parser relies on it to stop at a CR without a bounds check). */
#define UM_HTTP_C_TCHAR 0x01  /* tchar (RFC 9110 5.6.2): ALPHA, DIGIT and !#$%&'*+-.^_`|~ */
#define UM_HTTP_C_VALUE 0x02  /* field-vchar, SP, HTAB, obs-text (RFC 9110 5.5); the same
                                 set is what a quoted-pair's backslash may escape */
#define UM_HTTP_C_TARGET 0x04 /* request-target byte: VCHAR except '#' */
#define UM_HTTP_C_AUTH 0x08   /* authority byte: unreserved, sub-delims, '%', ':', '[', ']' */
#define UM_HTTP_C_QDTEXT 0x10 /* qdtext (RFC 9110 5.6.4) */

/* Immutable (src/http/chars.c); safe from any thread. */
extern const uint8_t um_http_cls[256];

/* tchar (RFC 9110 section 5.6.2): ALPHA, DIGIT and !#$%&'*+-.^_`|~ */
static inline bool um_http_tchar(unsigned char c)
{
    return um_http_cls[c] & UM_HTTP_C_TCHAR;
}

/* Steps through a comma-separated list (RFC 9110 section 5.6.1): the next member of v at
 * or after *pos, trimmed of whitespace, into *item, with *pos moved past it. Members may be
 * empty (",a,,b"). Returns false at the end of v. Start with *pos = 0. */
static inline bool um_http_list_next(um_str v, size_t *pos, um_str *item)
{
    size_t p = *pos;
    if (p >= v.len)
        return false;
    size_t q = p;
    while (q < v.len && v.base[q] != ',')
        q++;
    *item = um_str_trim((um_str){v.base + p, q - p});
    *pos = q + 1;
    return true;
}

/* The first sep in [p, end) outside a quoted-string (RFC 9110 5.6.4: DQUOTE, with
 * backslash escapes), or end. An unterminated quoted-string runs to end. */
static inline const char *um_http_find_unquoted(const char *p, const char *end, char sep)
{
    bool inq = false;
    for (; p < end; p++) {
        if (inq) {
            if (*p == '\\' && p + 1 < end)
                p++;
            else if (*p == '"')
                inq = false;
        } else if (*p == sep) {
            break;
        } else if (*p == '"') {
            inq = true;
        }
    }
    return p;
}

/* A token: one or more tchar. */
static inline bool um_http_is_token(um_str s)
{
    if (s.len == 0)
        return false;
    for (size_t i = 0; i < s.len; i++)
        if (!um_http_tchar((unsigned char)s.base[i]))
            return false;
    return true;
}

/* The field names that more than one layer tests for. A field is classified once, by its
 * name's length and bytes, instead of being compared with every name of every list. */
enum um_field_id {
    UM_FIELD_OTHER = 0,
    UM_FIELD_AGE,
    UM_FIELD_AUTHORIZATION,
    UM_FIELD_CACHE_CONTROL,
    UM_FIELD_CACHE_STATUS,
    UM_FIELD_CACHE_TAG,
    UM_FIELD_CONNECTION,
    UM_FIELD_CONTENT_ENCODING,
    UM_FIELD_CONTENT_LENGTH,
    UM_FIELD_DATE,
    UM_FIELD_ETAG,
    UM_FIELD_EXPECT,
    UM_FIELD_EXPIRES,
    UM_FIELD_HOST,
    UM_FIELD_KEEP_ALIVE,
    UM_FIELD_LAST_MODIFIED,
    UM_FIELD_PRAGMA,
    UM_FIELD_PROXY_AUTHENTICATE,
    UM_FIELD_PROXY_AUTHENTICATION_INFO,
    UM_FIELD_PROXY_AUTHORIZATION,
    UM_FIELD_PROXY_CONNECTION,
    UM_FIELD_SERVER,
    UM_FIELD_SET_COOKIE,
    UM_FIELD_SURROGATE_KEY,
    UM_FIELD_TE,
    UM_FIELD_TRAILER,
    UM_FIELD_TRANSFER_ENCODING,
    UM_FIELD_UPGRADE,
    UM_FIELD_VARY,
    UM_FIELD_VIA,
    UM_FIELD_X_FORWARDED_FOR,
    UM_FIELD_X_FORWARDED_HOST,
    UM_FIELD_X_FORWARDED_PORT,
    UM_FIELD_X_FORWARDED_PREFIX,
    UM_FIELD_X_FORWARDED_PROTO,
    UM_FIELD_X_FORWARDED_SCHEME,
    UM_FIELD_X_FORWARDED_SERVER,
    UM_FIELD_X_HOST,
    UM_FIELD_X_ORIGINAL_HOST,
    UM_FIELD_X_ORIGINAL_URL,
    UM_FIELD_X_REWRITE_URL,
    UM_FIELD_XKEY,
};

/* The known field that name is (ASCII case-insensitively, the whole name), or
 * UM_FIELD_OTHER. */
enum um_field_id um_http_field_id(um_str name);

struct um_header;

/* Whether a field named name may travel in a trailer section (RFC 9110 section 6.5.1):
 * false for pseudo-fields and empty names, for framing (Content-Length,
 * Transfer-Encoding, Trailer), hop-by-hop and connection fields (Connection, Keep-Alive,
 * TE, Upgrade, Proxy-*), routing (Host), and the fields a recipient must have before the
 * body to handle it (Content-Type, Content-Encoding, Content-Range, Cache-Control,
 * Expires, Date, Age, Vary, Location, Set-Cookie, Authorization, Expect, Range). */
bool um_http_trailer_allowed(um_str name);

/* What a content type says of gRPC (src/http/grpc.c): UM_GRPC for application/grpc and
 * application/grpc+FORMAT (or with parameters), UM_GRPC_WEB and UM_GRPC_WEB_TEXT for
 * application/grpc-web[+FORMAT] and application/grpc-web-text[+FORMAT], else
 * UM_GRPC_NONE. */
enum { UM_GRPC_NONE, UM_GRPC, UM_GRPC_WEB, UM_GRPC_WEB_TEXT };
int um_grpc_type(um_str content_type);
/* The grpc-status that stands for an HTTP answer of status that is not gRPC's. */
int um_grpc_status_of_http(int status);

#define UM_HTTP_CONN_TOKENS 16

/* The members of a head's Connection lines, collected once so that testing whether a
 * field is named there does not scan them again for every field. */
struct um_http_conn_tokens {
    size_t n;
    bool overflow; /* more than UM_HTTP_CONN_TOKENS: lookups scan the lines instead */
    const struct um_header *_h;
    size_t _nh;
    um_str tok[UM_HTTP_CONN_TOKENS];
};

/* Collects the non-empty members of the Connection lines of h[0..n), which must outlive
 * t. Cheap when there is no Connection line. */
void um_http_conn_tokens_init(struct um_http_conn_tokens *t, const struct um_header *h, size_t n);

/* Whether a Connection line names name (ASCII case-insensitively). An empty name never
 * matches. */
bool um_http_conn_names(const struct um_http_conn_tokens *t, um_str name);

#define UM_HTTP_DATE_LEN 29 /* "Sun, 06 Nov 1994 08:49:37 GMT" */

/* Writes t as an IMF-fixdate plus a NUL into out. */
void um_http_date_format(time_t t, char out[UM_HTTP_DATE_LEN + 1]);

/* Parses IMF-fixdate, RFC 850 and asctime dates (RFC 9110 section 5.6.7).
 * Returns true and sets *t on success. */
bool um_http_date_parse(um_str s, time_t *t);

/* Evaluates a Range header against a representation of size bytes. Only one byte range
 * is served: "bytes=a-b", "bytes=a-", "bytes=-n".
 * Returns UM_OK with [*first, *last] (inclusive) for a satisfiable single range;
 * UM_DONE when the header must be ignored (other unit, several ranges, bad syntax): the
 * whole representation is sent with 200; UM_ERR when no range is satisfiable: 416. */
int um_range_parse(um_str value, uint64_t size, uint64_t *first, uint64_t *last);

/* Weak comparison of If-None-Match (a list, or "*") against an entity tag such as
 * "\"abc\"" or "W/\"abc\"". Returns true when any listed tag matches. */
bool um_etag_match_weak(um_str if_none_match, um_str etag);

/* Strong comparison for If-Match / If-Range: false for weak tags. */
bool um_etag_match_strong(um_str list, um_str etag);

/* Canonical form of an origin-form request path, for matching routes (RFC 3986 6.2.2):
 * percent-encoded unreserved characters are decoded (other escapes are kept, with upper
 * case hex digits), "." and ".." segments are resolved and repeated slashes merged. path
 * must start with '/'; the result does too and is never longer. Returns false for a
 * malformed escape, a ".." above the root, or when outsz is too small. out is
 * NUL-terminated. */
bool um_url_path_canon(um_str path, char *out, size_t outsz, size_t *outlen);

/* The host of an authority ("host[:port]") without the port; an IPv6 literal keeps its
 * brackets. An empty authority (base may be NULL) gives an empty host. */
um_str um_url_host(um_str authority);

#endif
