/* SPDX-License-Identifier: BSD-2-Clause */
/* Strict HTTP/1.x response head parser (RFC 9112), for the upstream's two transports: Umbra's
 * own client parses the bytes it read, the libcurl transport the lines curl handed over.
 *
 * As the request parser does, it runs in two phases. The scan phase looks for the empty
 * line that ends the head, resuming where the previous call stopped; the first bytes must
 * begin a status line, so garbage fails before a head's worth of it is buffered. Once the
 * head is complete, the parse phase walks it line by line; every line is known to end in
 * an LF, so each is bounded by memchr and no loop reads past the head. */
#include "umbra/http1.h"

#include <string.h>

#include "umbra/httpfield.h"

#define IS(c, k) (um_http_cls[(uint8_t)(c)] & (k))

void um_http1_resp_parser_init(struct um_http1_resp_parser *p)
{
    p->_scanned = 0;
}

/* Finds the end of the head in buf[0..len): returns its length, or 0 when the empty line
 * has not arrived yet (p->_scanned then says where to look next time). */
static size_t scan(struct um_http1_resp_parser *p, const char *buf, size_t len)
{
    size_t i = p->_scanned;
    while (i < len) {
        const char *lf = memchr(buf + i, '\n', len - i);
        if (lf == NULL) {
            p->_scanned = len;
            return 0;
        }
        i = (size_t)(lf - buf);
        /* The line after this LF is empty when it is LF or CR LF. */
        if (i + 1 < len && buf[i + 1] == '\n') return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
        if (i + 1 == len || (i + 2 == len && buf[i + 1] == '\r')) {
            p->_scanned = i; /* this LF is looked at again with more bytes */
            return 0;
        }
        i++;
    }
    p->_scanned = len;
    return 0;
}

/* The content of the line at p (without its CRLF or LF) ends at *e; returns the start of
 * the next line. The head is known to hold an LF after p. */
static const char *line(const char *p, const char *end, const char **e)
{
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    *e = lf > p && lf[-1] == '\r' ? lf - 1 : lf;
    return lf + 1;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* status-line = HTTP-version SP status-code SP [ reason-phrase ], in [s, e). The SP after
 * the code is optional when the reason is empty (servers leave it out). */
static bool parse_status_line(const char *s, const char *e, struct um_http1_response *r)
{
    size_t n = (size_t)(e - s);
    if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0 || !is_digit(s[7]) || s[8] != ' ' || s[9] < '1' ||
        s[9] > '5' || !is_digit(s[10]) || !is_digit(s[11]))
        return false;
    if (n > 12 && s[12] != ' ') return false;
    for (const char *q = s + 13; q < e; q++)
        if (!IS(*q, UM_HTTP_C_VALUE)) return false;
    r->minor_version = s[7] - '0';
    r->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    r->reason = n > 13 ? (um_str){s + 13, n - 13} : (um_str){NULL, 0};
    return true;
}

/* Content-Length = 1*DIGIT; more than 18 digits could overflow and is refused. */
static bool parse_length(um_str v, uint64_t *out)
{
    if (v.len == 0 || v.len > 18) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (!is_digit(v.base[i])) return false;
        n = n * 10 + (uint64_t)(v.base[i] - '0');
    }
    *out = n;
    return true;
}

/* The Connection field's options, as flags: 1 close, 2 keep-alive. */
static unsigned connection_options(um_str v)
{
    unsigned got = 0;
    size_t pos = 0;
    um_str tok;
    while (um_http_list_next(v, &pos, &tok)) {
        if (um_str_eq_ci(tok, "close"))
            got |= 1;
        else if (um_str_eq_ci(tok, "keep-alive"))
            got |= 2;
    }
    return got;
}

/* The final coding of a Transfer-Encoding list is chunked. */
static bool ends_chunked(um_str v)
{
    size_t k = v.len;
    while (k > 0 && v.base[k - 1] != ',')
        k--;
    return um_str_eq_ci(um_str_trim((um_str){v.base + k, v.len - k}), "chunked");
}

int um_http1_parse_response(struct um_http1_resp_parser *p, const char *buf, size_t len,
                            size_t max_head, struct um_http1_response *resp,
                            enum um_http1_resp_err *err)
{
    static const char prefix[] = "HTTP/1.";
    size_t check = len < sizeof(prefix) - 1 ? len : sizeof(prefix) - 1;
    if (check > 0 && memcmp(buf, prefix, check) != 0) {
        *err = UM_HTTP1_RESP_MALFORMED;
        return UM_ERR;
    }
    size_t head_len = scan(p, buf, len);
    if (head_len == 0) {
        if (len < max_head) return UM_AGAIN;
        *err = UM_HTTP1_RESP_TOO_LARGE;
        return UM_ERR;
    }
    if (head_len > max_head) {
        *err = UM_HTTP1_RESP_TOO_LARGE;
        return UM_ERR;
    }

    const char *end = buf + head_len, *e;
    const char *next = line(buf, end, &e);
    *err = UM_HTTP1_RESP_MALFORMED;
    if (!parse_status_line(buf, e, resp)) return UM_ERR;
    resp->num_headers = 0;
    resp->flags = 0;
    resp->content_length = 0;
    unsigned conn = 0;
    for (const char *s = next; s < end; s = next) {
        next = line(s, end, &e);
        if (e == s) break; /* the empty line: the scan found it last */
        const char *q = s;
        while (q < e && IS(*q, UM_HTTP_C_TCHAR))
            q++;
        if (q == s || q == e || *q != ':')
            return UM_ERR; /* also obs-fold and whitespace before the colon */
        for (const char *v = q + 1; v < e; v++)
            if (!IS(*v, UM_HTTP_C_VALUE)) return UM_ERR;
        if (resp->num_headers == UM_HTTP1_MAX_RESPONSE_FIELDS) {
            *err = UM_HTTP1_RESP_TOO_LARGE;
            return UM_ERR;
        }
        um_str name = {s, (size_t)(q - s)};
        um_str value = um_str_trim((um_str){q + 1, (size_t)(e - q - 1)});
        resp->headers[resp->num_headers++] = (struct um_header){name, value};
        if (name.len == 14 && um_str_eq_ci(name, "content-length")) {
            uint64_t cl;
            if (!parse_length(value, &cl)) return UM_ERR;
            if ((resp->flags & UM_RESP_F_CONTENT_LENGTH) && resp->content_length != cl)
                return UM_ERR;
            resp->content_length = cl;
            resp->flags |= UM_RESP_F_CONTENT_LENGTH;
        } else if (name.len == 17 && um_str_eq_ci(name, "transfer-encoding")) {
            /* The last field's final coding decides (RFC 9112 section 6.3). */
            resp->flags |= UM_RESP_F_TE;
            if (ends_chunked(value))
                resp->flags |= UM_RESP_F_CHUNKED;
            else
                resp->flags &= ~(unsigned)UM_RESP_F_CHUNKED;
        } else if (name.len == 10 && um_str_eq_ci(name, "connection")) {
            conn |= connection_options(value);
        }
    }
    if ((conn & 1) || (resp->minor_version == 0 && !(conn & 2))) resp->flags |= UM_RESP_F_CLOSE;
    resp->head_len = head_len;
    return UM_OK;
}
