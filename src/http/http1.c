/* SPDX-License-Identifier: BSD-2-Clause */
/* Strict HTTP/1.1 request head parser (RFC 9112).
 *
 * Parsing runs in two phases. The scan phase looks for the CRLFCRLF that ends
 * the head, resuming where the previous call stopped, and rejects bare LF and
 * overlong lines early. Once the head is complete, the parse phase walks it
 * once. Because the head is known to end in CRLFCRLF and every LF in it is
 * known to follow a CR, the parse loops stop at a CR without bounds checks: no
 * character class (um_http_cls, httpfield.h) contains CR, and a CR is never the
 * last byte. */
#include "umbra/http1.h"

#include <string.h>

#include "umbra/httpfield.h"
#include "umbra/ascii.h"

#define IS(c, k) (um_http_cls[(uint8_t)(c)] & (k))

/* s[0..n) equals the lowercase literal lit (of length n), ignoring ASCII case.
 */
static bool eq_ci(const char *s, const char *lit, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (um_ascii_lower((uint8_t)s[i]) != lit[i]) return false;
    return true;
}

static bool str_is(um_str s, const char *lower_lit)
{
    size_t n = strlen(lower_lit);
    return s.len == n && eq_ci(s.base, lower_lit, n);
}

void um_http1_parser_init(struct um_http1_parser *p)
{
    p->_scanned = 0;
}

static const struct {
    char name[8];
    size_t len;
    enum um_method id;
} methods[] = {
    {"GET", 3, UM_METHOD_GET},       {"HEAD", 4, UM_METHOD_HEAD},
    {"POST", 4, UM_METHOD_POST},     {"PUT", 3, UM_METHOD_PUT},
    {"DELETE", 6, UM_METHOD_DELETE}, {"OPTIONS", 7, UM_METHOD_OPTIONS},
    {"TRACE", 5, UM_METHOD_TRACE},   {"CONNECT", 7, UM_METHOD_CONNECT},
    {"PATCH", 5, UM_METHOD_PATCH},
};

/* Methods are case-sensitive (RFC 9110 9.1): "get" is some other method. */
enum um_method um_http1_method_id(const char *m, size_t n)
{
    for (size_t i = 0; i < UM_NELEMS(methods); i++)
        if (methods[i].len == n && memcmp(methods[i].name, m, n) == 0) return methods[i].id;
    return UM_METHOD_OTHER;
}

/* authority = host [ ":" port ] (RFC 3986 3.2 without userinfo, which RFC
 * 9110 4.2.4 tells recipients to treat as an error). The host is an IP-literal
 * in brackets or a reg-name / IPv4 address; it must not be empty. The port is
 * at most 5 digits, required for CONNECT. */
static bool valid_authority(const char *s, size_t n, bool need_port)
{
    size_t i = 0;
    if (n == 0) return false;
    if (s[0] == '[') {
        for (i = 1; i < n && s[i] != ']'; i++)
            if (!IS(s[i], UM_HTTP_C_AUTH) || s[i] == '[') return false;
        if (i == n || i == 1) return false;
        i++;
    } else {
        for (; i < n && s[i] != ':'; i++)
            if (!IS(s[i], UM_HTTP_C_AUTH) || s[i] == '[' || s[i] == ']') return false;
        if (i == 0) return false;
    }
    if (i == n) return !need_port;
    if (s[i] != ':') return false;
    size_t digits = n - i - 1;
    if (digits > 5 || (need_port && digits == 0)) return false;
    for (i++; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static void split_query(struct um_request *req, const char *s, size_t n)
{
    const char *q = memchr(s, '?', n);
    if (q == NULL) {
        req->path = (um_str){s, n};
        req->query = (um_str){s + n, 0};
        return;
    }
    req->path = (um_str){s, (size_t)(q - s)};
    req->query = (um_str){q + 1, n - (size_t)(q - s) - 1};
    req->flags |= UM_REQ_F_HAS_QUERY;
}

/* RFC 9112 3.2: origin-form, absolute-form, authority-form (CONNECT only) and
 * asterisk-form (OPTIONS only). */
static int parse_target(struct um_request *req)
{
    const char *t = req->target.base;
    size_t n = req->target.len;
    bool connect = req->method_id == UM_METHOD_CONNECT;

    if (t[0] == '/') {
        if (connect) return 400;
        split_query(req, t, n);
        return 0;
    }
    if (n == 1 && t[0] == '*') {
        if (req->method_id != UM_METHOD_OPTIONS) return 400;
        req->path = req->target;
        req->query = (um_str){t + 1, 0};
        return 0;
    }
    if (connect) {
        if (!valid_authority(t, n, true)) return 400;
        req->authority = req->target;
        req->path = (um_str){t + n, 0};
        req->query = (um_str){t + n, 0};
        return 0;
    }

    size_t skip;
    if (n >= 7 && eq_ci(t, "http://", 7))
        skip = 7;
    else if (n >= 8 && eq_ci(t, "https://", 8))
        skip = 8;
    else
        return 400;
    const char *a = t + skip, *end = t + n, *ae = a;
    while (ae < end && *ae != '/' && *ae != '?')
        ae++;
    if (!valid_authority(a, (size_t)(ae - a), false)) return 400;
    req->authority = (um_str){a, (size_t)(ae - a)};
    req->flags |= UM_REQ_F_ABSOLUTE_FORM;
    split_query(req, ae, (size_t)(end - ae));
    if (req->path.len == 0) req->path = UM_STR("/");
    return 0;
}

/* request-line = method SP request-target SP HTTP-version, in [s, e) where *e
 * is the CR. */
static int parse_request_line(const char *s, const char *e, struct um_request *req)
{
    const char *q = s;
    while (IS(*q, UM_HTTP_C_TCHAR))
        q++;
    if (q == s || *q != ' ') return 400;
    req->method = (um_str){s, (size_t)(q - s)};
    req->method_id = um_http1_method_id(s, (size_t)(q - s));

    const char *t = ++q;
    while (IS(*q, UM_HTTP_C_TARGET))
        q++;
    if (q == t || *q != ' ') return 400;
    req->target = (um_str){t, (size_t)(q - t)};

    q++;
    if (e - q != 8 || memcmp(q, "HTTP/", 5) != 0 || q[6] != '.' || q[5] < '0' || q[5] > '9' ||
        q[7] < '0' || q[7] > '9')
        return 400;
    if (q[5] != '1' || q[7] > '1') return 505;
    req->minor_version = q[7] - '0';
    return parse_target(req);
}

/* What the framing and connection fields said, checked once all fields are
 * seen. */
struct fields {
    unsigned n_host;
    unsigned n_cl;
    bool te_seen;
    bool te_bad;   /* syntax error in a Transfer-Encoding list -> 400 */
    bool te_other; /* a coding other than chunked -> 501 */
    unsigned n_chunked;
    bool chunked_last;
    bool conn_close;
    bool conn_keepalive;
    bool conn_upgrade;
    bool has_upgrade;
    bool expect_continue;
    um_str host;
};

/* Iterates over the elements of a comma-separated list (RFC 9110 5.6.1),
 * trimmed. */
struct list_iter {
    const char *p, *end;
    bool done;
};

static struct list_iter list_begin(um_str v)
{
    return (struct list_iter){v.base, v.base + v.len, false};
}

static bool list_next(struct list_iter *it, um_str *el)
{
    if (it->done) return false;
    const char *c = memchr(it->p, ',', (size_t)(it->end - it->p));
    const char *e = c ? c : it->end;
    *el = um_str_trim((um_str){it->p, (size_t)(e - it->p)});
    if (c)
        it->p = c + 1;
    else
        it->done = true;
    return true;
}

static bool is_token(um_str s)
{
    if (s.len == 0) return false;
    for (size_t i = 0; i < s.len; i++)
        if (!IS(s.base[i], UM_HTTP_C_TCHAR)) return false;
    return true;
}

/* Transfer-Encoding lines are combined into one list. Empty elements are
 * rejected rather than ignored: this field decides the framing, so anything
 * unusual is refused. */
static void on_transfer_encoding(struct fields *f, um_str v)
{
    struct list_iter it = list_begin(v);
    um_str el;
    f->te_seen = true;
    while (list_next(&it, &el)) {
        if (!is_token(el)) {
            f->te_bad = true;
        } else if (str_is(el, "chunked")) {
            f->n_chunked++;
            f->chunked_last = true;
        } else {
            f->te_other = true;
            f->chunked_last = false;
        }
    }
}

static int on_content_length(struct fields *f, um_str v, struct um_request *req)
{
    if (++f->n_cl > 1 || v.len == 0 || v.len > 19) return 400;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.base[i] < '0' || v.base[i] > '9') return 400;
        n = n * 10 + (uint64_t)(v.base[i] - '0'); /* 19 digits cannot overflow */
    }
    req->content_length = n;
    return 0;
}

static int on_field(struct fields *f, um_str name, um_str v, struct um_request *req)
{
    switch (name.len) {
    case 4:
        if (eq_ci(name.base, "host", 4)) {
            if (++f->n_host > 1 || (v.len > 0 && !valid_authority(v.base, v.len, false)))
                return 400;
            f->host = v;
        }
        break;
    case 6:
        if (eq_ci(name.base, "expect", 6) && str_is(v, "100-continue")) f->expect_continue = true;
        break;
    case 7:
        if (eq_ci(name.base, "upgrade", 7) && v.len > 0) f->has_upgrade = true;
        break;
    case 10:
        if (eq_ci(name.base, "connection", 10)) {
            struct list_iter it = list_begin(v);
            um_str el;
            while (list_next(&it, &el)) {
                if (str_is(el, "close"))
                    f->conn_close = true;
                else if (str_is(el, "keep-alive"))
                    f->conn_keepalive = true;
                else if (str_is(el, "upgrade"))
                    f->conn_upgrade = true;
            }
        }
        break;
    case 14:
        if (eq_ci(name.base, "content-length", 14)) return on_content_length(f, v, req);
        break;
    case 17:
        if (eq_ci(name.base, "transfer-encoding", 17)) on_transfer_encoding(f, v);
        break;
    }
    return 0;
}

/* RFC 9112 6.1 and 6.3: the body length must be unambiguous. */
static int check_framing(const struct fields *f, struct um_request *req)
{
    if (f->te_seen) {
        if (req->minor_version == 0 || f->n_cl > 0 || f->te_bad || f->n_chunked > 1 ||
            (f->n_chunked == 1 && !f->chunked_last))
            return 400;
        if (f->te_other) return 501;
        req->flags |= UM_REQ_F_CHUNKED;
    } else if (f->n_cl > 0) {
        req->flags |= UM_REQ_F_CONTENT_LENGTH;
    }
    return 0;
}

/* Parses the complete head buf[0..head_len); rl is where the request line
 * starts. Returns 0 or the error status. */
static int parse_head(const char *buf, size_t head_len, size_t rl, size_t max_line,
                      struct um_request *req)
{
    const char *end = buf + head_len;
    const char *p = buf + rl;
    struct fields f = {0};
    int st;

    req->method_id = UM_METHOD_OTHER;
    req->path = req->query = req->authority = (um_str){p, 0};
    req->num_headers = 0;
    req->content_length = 0;
    req->flags = 0;

    const char *cr = memchr(p, '\r', (size_t)(end - p));
    if (cr == NULL || cr[1] != '\n') return 400;
    if ((size_t)(cr - p) > max_line) return 414;
    if ((st = parse_request_line(p, cr, req)) != 0) return st;

    for (p = cr + 2; *p != '\r'; p += 2) {
        /* A line starting with SP or HTAB (obs-fold, or whitespace before the first
         * field) fails here as an empty name, as does whitespace before the colon.
         */
        const char *name = p;
        while (IS(*p, UM_HTTP_C_TCHAR))
            p++;
        if (p == name || *p != ':') return 400;
        um_str n = {name, (size_t)(p - name)};
        p++;
        while (um_is_ows(*p))
            p++;
        const char *v = p;
        while (IS(*p, UM_HTTP_C_VALUE))
            p++;
        if (*p != '\r' || p[1] != '\n') return 400;
        const char *ve = p;
        while (ve > v && um_is_ows(ve[-1]))
            ve--;
        if (req->num_headers == UM_HTTP1_MAX_HEADERS) return 431;
        struct um_header *h = &req->headers[req->num_headers++];
        h->name = n;
        h->value = (um_str){v, (size_t)(ve - v)};
        if ((st = on_field(&f, n, h->value, req)) != 0) return st;
    }
    /* The scan phase found the first CRLFCRLF, so a CRLF here is the end of the
     * head; a CR without LF is a bare CR at the start of a line. */
    if (p + 2 != end) return 400;

    if (req->minor_version == 1 && f.n_host == 0) return 400;
    if ((st = check_framing(&f, req)) != 0) return st;
    if (!(req->flags & UM_REQ_F_ABSOLUTE_FORM) && req->method_id != UM_METHOD_CONNECT)
        req->authority = f.host;
    if (req->minor_version == 1 ? !f.conn_close : (f.conn_keepalive && !f.conn_close))
        req->flags |= UM_REQ_F_KEEPALIVE;
    /* RFC 9110 7.8: Upgrade in an HTTP/1.0 request is ignored. */
    if (f.conn_upgrade && f.has_upgrade && req->minor_version == 1)
        req->flags |= UM_REQ_F_UPGRADE;
    /* RFC 9110 10.1.1: a 100-continue expectation in an HTTP/1.0 request is
     * ignored. */
    if (f.expect_continue && req->minor_version == 1) req->flags |= UM_REQ_F_EXPECT_CONTINUE;
    req->head_len = head_len;
    return 0;
}

int um_http1_parse_request(struct um_http1_parser *p, const char *buf, size_t len, size_t max_line,
                           size_t max_head, struct um_request *req, int *status)
{
    size_t old = p->_scanned, i = old;
    size_t limit = len < max_head ? len : max_head;
    size_t head_len = 0;
    /* RFC 9112 2.2: one empty line before the request line is ignored. */
    size_t rl = len >= 2 && buf[0] == '\r' && buf[1] == '\n' ? 2 : 0;
    int st;

    /* Fail fast on bytes that cannot start a request (TLS on a plain port, binary
     * junk). */
    if (old <= rl && rl < len && !IS(buf[rl], UM_HTTP_C_TCHAR) && buf[rl] != '\r') {
        st = 400;
        goto fail;
    }

    /* Every LF is checked for its CR here, so bare LF fails before the head
     * completes and the parse phase only has to look for bare CR. */
    while (i < limit) {
        const char *lf = memchr(buf + i, '\n', limit - i);
        if (lf == NULL) {
            i = limit;
            break;
        }
        size_t at = (size_t)(lf - buf);
        if (at == 0 || buf[at - 1] != '\r') {
            st = 400;
            goto fail;
        }
        if (at >= 3 && buf[at - 2] == '\n' && buf[at - 3] == '\r') {
            head_len = at + 1;
            break;
        }
        i = at + 1;
    }

    if (head_len == 0) {
        p->_scanned = i;
        /* The request line ends at the first LF after rl. Look for it once, in the
         * call that first holds max_line + CRLF bytes of it; memchr stops at the
         * (usually early) LF. */
        if (len >= rl + 2 && len - rl - 2 >= max_line && old < rl + 2 + max_line &&
            memchr(buf + rl, '\n', max_line + 2) == NULL) {
            st = 414;
            goto fail;
        }
        if (len >= max_head) {
            st = 431;
            goto fail;
        }
        return UM_AGAIN;
    }

    /* Leave the final LF unscanned so that a repeated call finds the same head.
     */
    p->_scanned = head_len - 1;
    if (head_len > max_head) { /* only if max_head shrank between calls */
        st = 431;
        goto fail;
    }
    if ((st = parse_head(buf, head_len, rl, max_line, req)) != 0) goto fail;
    return UM_OK;

fail:
    *status = st;
    return UM_ERR;
}

void um_http1_request_copy(struct um_request *dst, const struct um_request *src)
{
    memcpy(dst, src, offsetof(struct um_request, headers));
    memcpy(dst->headers, src->headers, src->num_headers * sizeof(src->headers[0]));
    memcpy(&dst->num_headers, &src->num_headers,
           sizeof(*src) - offsetof(struct um_request, num_headers));
}

const um_str *um_http1_find_header(const struct um_request *req, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *h = &req->headers[i];
        if (h->name.len == n && um_str_eq_ci(h->name, name)) return &h->value;
    }
    return NULL;
}
