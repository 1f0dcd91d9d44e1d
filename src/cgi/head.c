/* SPDX-License-Identifier: BSD-2-Clause */
/* What a CGI script writes before its body (RFC 3875 section 6), and the arguments of a
 * search-string query (section 4.4): pure functions over the caller's bytes. */
#include <stdlib.h>
#include <string.h>

#include "umbra/cgi.h"
#include "umbra/ascii.h"

static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Fields that describe the connection to the script's server, not the answer. */
static bool hop_by_hop(um_str name)
{
    return um_str_eq_ci(name, "connection") || um_str_eq_ci(name, "keep-alive") ||
           um_str_eq_ci(name, "transfer-encoding") || um_str_eq_ci(name, "upgrade") ||
           um_str_eq_ci(name, "proxy-connection") || um_str_eq_ci(name, "te") ||
           um_str_eq_ci(name, "trailer");
}

static bool parse_status(um_str v, struct um_cgi_head *h)
{
    if (v.len < 3)
        return false;
    int s = 0;
    for (int i = 0; i < 3; i++) {
        if (v.base[i] < '0' || v.base[i] > '9')
            return false;
        s = s * 10 + (v.base[i] - '0');
    }
    if (s < 200 || s > 599 || (v.len > 3 && v.base[3] != ' ' && v.base[3] != '\t'))
        return false;
    h->status = s;
    h->reason = v.len > 3 ? um_str_trim((um_str){v.base + 4, v.len - 4}) : (um_str){NULL, 0};
    h->has_status = true;
    return true;
}

static bool parse_length(um_str v, int64_t *out)
{
    if (v.len == 0 || v.len > 18)
        return false;
    int64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.base[i] < '0' || v.base[i] > '9')
            return false;
        n = n * 10 + (v.base[i] - '0');
    }
    *out = n;
    return true;
}

int um_cgi_parse_head(const char *buf, size_t len, struct um_cgi_head *h)
{
    memset(h, 0, sizeof(*h));
    h->content_length = -1;
    size_t pos = 0;
    for (;;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (nl == NULL) {
            /* A head line cannot begin with bytes no field name has. */
            if (pos < len && !is_tchar((unsigned char)buf[pos]) && buf[pos] != '\r')
                return UM_ERR;
            return UM_AGAIN;
        }
        size_t end = (size_t)(nl - buf), next = end + 1;
        if (end > pos && buf[end - 1] == '\r')
            end--;
        if (end == pos) {
            h->head_len = next;
            break;
        }
        const char *line = buf + pos;
        size_t n = end - pos, i = 0;
        while (i < n && is_tchar((unsigned char)line[i]))
            i++;
        if (i == 0 || i == n || line[i] != ':')
            return UM_ERR;
        um_str name = {line, i};
        um_str value = um_str_trim((um_str){line + i + 1, n - i - 1});
        for (size_t k = 0; k < value.len; k++) {
            unsigned char c = (unsigned char)value.base[k];
            if ((c < ' ' && c != '\t') || c == 0x7f)
                return UM_ERR;
        }
        if (um_str_eq_ci(name, "status")) {
            if (h->has_status || !parse_status(value, h))
                return UM_ERR;
        } else if (um_str_eq_ci(name, "content-length")) {
            int64_t cl;
            if (!parse_length(value, &cl) || (h->content_length >= 0 && h->content_length != cl))
                return UM_ERR;
            h->content_length = cl;
        } else if (!hop_by_hop(name)) {
            if (um_str_eq_ci(name, "location")) {
                if (value.len == 0 || h->location.len)
                    return UM_ERR;
                h->location = value;
            }
            if (um_str_eq_ci(name, "content-type"))
                h->has_type = true;
            if (h->num_headers == UM_NELEMS(h->headers))
                return UM_ERR;
            h->headers[h->num_headers++] = (struct um_header){name, value};
        }
        pos = next;
    }
    if (!h->has_type && !h->location.len && !h->has_status)
        return UM_ERR;
    if (!h->has_status)
        h->status = h->location.len ? 302 : 200;
    return UM_OK;
}

void um_cgi_free_args(char **args)
{
    if (args == NULL)
        return;
    for (char **a = args; *a; a++)
        free(*a);
    free(args);
}

char **um_cgi_query_args(um_str q, size_t max)
{
    if (q.len == 0 || memchr(q.base, '=', q.len) != NULL)
        return NULL;
    size_t words = 1;
    for (size_t i = 0; i < q.len; i++)
        words += q.base[i] == '+';
    if (words > max)
        return NULL;
    char **args = um_calloc(words + 1, sizeof(*args));
    size_t w = 0, i = 0;
    while (w < words) {
        size_t start = i;
        while (i < q.len && q.base[i] != '+')
            i++;
        char *s = um_malloc(i - start + 1);
        size_t o = 0;
        for (size_t k = start; k < i; k++) {
            if (q.base[k] != '%') {
                s[o++] = q.base[k];
                continue;
            }
            int hi = k + 2 < i ? um_hexval(q.base[k + 1]) : -1;
            int lo = k + 2 < i ? um_hexval(q.base[k + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                free(s);
                um_cgi_free_args(args);
                return NULL;
            }
            s[o++] = (char)(hi * 16 + lo);
            k += 2;
        }
        s[o] = '\0';
        args[w++] = s;
        i++; /* the '+' */
    }
    return args;
}
