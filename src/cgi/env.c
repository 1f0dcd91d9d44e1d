/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin's environment: the RFC 3875 meta-variables a script gets. */
#include "internal.h"

static void env_add(struct env *e, const char *name, const char *value, size_t vlen)
{
    if (e->n + 2 > e->cap) {
        e->cap = e->cap ? e->cap * 2 : 48;
        e->v = um_realloc(e->v, e->cap * sizeof(*e->v));
    }
    size_t nlen = strlen(name);
    char *s = um_malloc(nlen + 1 + vlen + 1);
    memcpy(s, name, nlen);
    s[nlen] = '=';
    if (vlen)
        memcpy(s + nlen + 1, value, vlen);
    s[nlen + 1 + vlen] = '\0';
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
}

static void env_adds(struct env *e, const char *name, const char *value)
{
    env_add(e, name, value, strlen(value));
}

/* Removes name from e (every occurrence). */
void um__cgi_env_del(struct env *e, const char *name)
{
    size_t nlen = strlen(name), w = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (strncmp(e->v[i], name, nlen) == 0 && e->v[i][nlen] == '=') {
            free(e->v[i]);
            continue;
        }
        e->v[w++] = e->v[i];
    }
    e->n = w;
    if (e->v)
        e->v[w] = NULL;
}

void um__cgi_env_set(struct env *e, const char *name, const char *value, size_t vlen)
{
    um__cgi_env_del(e, name);
    env_add(e, name, value, vlen);
}

void um__cgi_env_free(struct env *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
    memset(e, 0, sizeof(*e));
}

/* ---------------------------------------------------------------- the request's variables */

static void add_http_vars(struct env *e, const struct um_request *req)
{
    char name[128];
    for (size_t i = 0; i < req->num_headers; i++) {
        um_str n = req->headers[i].name;
        if (n.len + 6 > sizeof(name) || memchr(n.base, '_', n.len) ||
            um_str_eq_ci(n, "authorization") || um_str_eq_ci(n, "content-type") ||
            um_str_eq_ci(n, "content-length") || um_str_eq_ci(n, "proxy") ||
            (n.len >= 6 && um_str_eq_ci((um_str){n.base, 6}, "proxy-")))
            continue;
        bool seen = false; /* joined into the first one's variable */
        for (size_t j = 0; j < i && !seen; j++)
            seen = req->headers[j].name.len == n.len &&
                   strncasecmp(req->headers[j].name.base, n.base, n.len) == 0;
        if (seen)
            continue;
        memcpy(name, "HTTP_", 5);
        for (size_t k = 0; k < n.len; k++) {
            char c = n.base[k];
            name[5 + k] = c == '-' ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : c;
        }
        name[5 + n.len] = '\0';
        struct um_buf v;
        um_buf_init(&v);
        for (size_t j = i; j < req->num_headers; j++) {
            if (req->headers[j].name.len != n.len ||
                strncasecmp(req->headers[j].name.base, n.base, n.len) != 0)
                continue;
            if (v.len)
                um_buf_append(&v, ", ", 2);
            um_buf_append(&v, req->headers[j].value.base, req->headers[j].value.len);
        }
        env_add(e, name, v.base ? v.base : "", v.len);
        um_buf_dispose(&v);
    }
}

void um__cgi_build_env(struct cgi_fetch *f, const struct um_fetch *uf)
{
    const struct um_request *req = uf->req;
    struct env *e = &f->env;
    char num[32];
    env_adds(e, "GATEWAY_INTERFACE", "CGI/1.1");
    env_adds(e, "SERVER_SOFTWARE", "umbra/" UMBRA_VERSION);
    env_adds(e, "PATH", "/usr/local/bin:/usr/bin:/bin");
    bool https = uf->scheme && strcmp(uf->scheme, "https") == 0;
    /* SERVER_NAME and SERVER_PORT from the Host the client used (section 4.1.14). */
    um_str host = req->authority, port = {NULL, 0};
    if (host.len && host.base[0] == '[') {
        const char *rb = memchr(host.base, ']', host.len);
        if (rb) {
            size_t hl = (size_t)(rb - host.base) + 1;
            if (hl < host.len && host.base[hl] == ':')
                port = (um_str){host.base + hl + 1, host.len - hl - 1};
            host.len = hl;
        }
    } else if (host.len) {
        const char *colon = memchr(host.base, ':', host.len);
        if (colon) {
            port = (um_str){colon + 1, host.len - (size_t)(colon - host.base) - 1};
            host.len = (size_t)(colon - host.base);
        }
    }
    if (host.len)
        env_add(e, "SERVER_NAME", host.base, host.len);
    else
        env_adds(e, "SERVER_NAME", uf->server_name ? uf->server_name : "localhost");
    if (port.len)
        env_add(e, "SERVER_PORT", port.base, port.len);
    else
        env_adds(e, "SERVER_PORT", https ? "443" : "80");
    snprintf(num, sizeof(num), "HTTP/1.%d", req->minor_version);
    env_adds(e, "SERVER_PROTOCOL", num);
    env_add(e, "REQUEST_METHOD", req->method.base, req->method.len);
    env_add(e, "REQUEST_URI", req->target.base, req->target.len);
    env_adds(e, "REMOTE_ADDR", uf->client_ip ? uf->client_ip : "");
    env_adds(e, "REMOTE_HOST", uf->client_ip ? uf->client_ip : "");
    snprintf(num, sizeof(num), "%d", uf->client_port);
    env_adds(e, "REMOTE_PORT", num);
    if (https)
        env_adds(e, "HTTPS", "on");
    const um_str *v = um_http1_find_header(req, "content-type");
    if (v)
        env_add(e, "CONTENT_TYPE", v->base, v->len);
    if ((req->flags & UM_REQ_F_CONTENT_LENGTH) && !(req->flags & UM_REQ_F_CHUNKED)) {
        snprintf(num, sizeof(num), "%llu", (unsigned long long)req->content_length);
        env_adds(e, "CONTENT_LENGTH", num);
    }
    v = um_http1_find_header(req, "authorization");
    if (v && v->len) {
        size_t n = 0;
        while (n < v->len && v->base[n] != ' ' && v->base[n] != '\t')
            n++;
        env_add(e, "AUTH_TYPE", v->base, n);
    }
    add_http_vars(e, req);
}

