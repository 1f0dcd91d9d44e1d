/* SPDX-License-Identifier: BSD-2-Clause */
/* upstreams = { NAME = { servers = { "http://HOST:PORT", ... }, ... }, ... }: the servers
 * that routes proxy to, with their balancing, timeouts, retries and TLS. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* Upstream names are short identifiers; this also keeps every path below them in PATH_LEN. */
#define MAX_UPSTREAM_NAME 64
#define MAX_RETRIES 10
#define MAX_FAILS 100

const char *const um__cfg_upstream_keys[] = {
    "servers",   "balance",      "connect_timeout", "timeout",    "retries", "host", "tls",
    "max_fails", "fail_timeout", "client",          "send_proxy", "health",  "protocol", NULL};
const char *const um__cfg_upstream_tls_keys[] = {"verify", "ca", NULL};
const char *const um__cfg_upstream_health_keys[] = {"path",   "interval", "timeout", "fails",
                                                    "passes", "status",   NULL};
/* In the order of enum um_balance. */
static const char *const BALANCE_NAMES[] = {"round_robin", "least_conn", "hash", NULL};

#define URL_HINT "expected \"http://HOST[:PORT]\" or \"https://HOST[:PORT]\""

/* Parses an upstream server URL, "http[s]://HOST[:PORT]" with an optional final "/", into
 * out->url = "scheme://host:port": scheme and host lower-cased, IPv6 in its canonical
 * form, the default port (80, 443) written out. */
static bool parse_server(struct um_settings_load *ld, lua_State *L, const char *path,
                         const char *text, struct um_upstream_server *out)
{
    char host[INET6_ADDRSTRLEN + 256];
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return um_settings_fail(
                ld, L, path, "%s: bad URL '%s': contains a space or control character", path, text);
    const char *sep = strstr(text, "://");
    if (sep == NULL)
        return um_settings_fail(ld, L, path, "%s: bad URL '%s' (" URL_HINT ")", path, text);
    size_t sl = (size_t)(sep - text);
    bool https;
    if (sl == 4 && strncasecmp(text, "http", 4) == 0)
        https = false;
    else if (sl == 5 && strncasecmp(text, "https", 5) == 0)
        https = true;
    else
        return um_settings_fail(
            ld, L, path, "%s: bad scheme in '%s' (expected http:// or https://)", path, text);

    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *rest = auth + alen, *end = auth + alen;
    if (rest[0] != '\0' && strcmp(rest, "/") != 0) {
        const char *q = rest[0] == '/' ? rest + 1 : rest;
        const char *what = *q == '?' ? "a query" : *q == '#' ? "a fragment" : "a path";
        return um_settings_fail(ld, L, path,
                                "%s: bad URL '%s': %s is not allowed (" URL_HINT
                                "; the request's path is passed on as it is)",
                                path, text, what);
    }
    if (memchr(auth, '@', alen) != NULL)
        return um_settings_fail(
            ld, L, path, "%s: bad URL '%s': user info (\"user@\") is not allowed (" URL_HINT ")",
            path, text);

    const char *after; /* end of the host */
    struct in6_addr a6;
    struct in_addr a4;
    int family = 0; /* AF_INET/AF_INET6 when the host is an address */
    if (alen > 0 && auth[0] == '[') {
        const char *close = memchr(auth, ']', alen);
        char v6[INET6_ADDRSTRLEN];
        size_t hl = close != NULL ? (size_t)(close - auth - 1) : 0;
        if (close == NULL || hl == 0 || hl >= sizeof v6)
            return um_settings_fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        memcpy(v6, auth + 1, hl);
        v6[hl] = '\0';
        if (inet_pton(AF_INET6, v6, &a6) != 1 || inet_ntop(AF_INET6, &a6, v6, sizeof v6) == NULL)
            return um_settings_fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        snprintf(host, sizeof host, "[%s]", v6);
        family = AF_INET6;
        after = close + 1;
        if (after != end && *after != ':')
            return um_settings_fail(ld, L, path, "%s: bad URL '%s' (" URL_HINT ")", path, text);
    } else {
        const char *colon = memchr(auth, ':', alen);
        after = colon != NULL ? colon : end;
        size_t hl = (size_t)(after - auth);
        if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL)
            return um_settings_fail(ld, L, path,
                                    "%s: bad URL '%s' (IPv6 addresses need brackets: "
                                    "\"http://[::1]:9000\")",
                                    path, text);
        if (hl == 0)
            return um_settings_fail(ld, L, path, "%s: bad URL '%s': missing host (" URL_HINT ")",
                                    path, text);
        if (hl >= sizeof host || !um_settings_is_host_name(auth, hl))
            return um_settings_fail(ld, L, path,
                                    "%s: bad host in '%s' (expected a host name, an IPv4 "
                                    "address or an [IPv6 address])",
                                    path, text);
        memcpy(host, auth, hl);
        host[hl] = '\0';
        um_settings_lower(host);
        /* All digits and dots: it can only mean an IPv4 address, so it must be one. */
        if (strspn(host, "0123456789.") == hl) {
            if (inet_pton(AF_INET, host, &a4) != 1)
                return um_settings_fail(ld, L, path, "%s: bad IPv4 address in '%s'", path, text);
            family = AF_INET;
        }
    }

    unsigned long port = https ? 443 : 80;
    if (after != end) {
        const char *p = after + 1;
        size_t digits = 0;
        port = 0;
        for (; p < end && *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
            port = port * 10 + (unsigned long)(*p - '0');
        if (digits == 0 || p != end || port < 1 || port > 65535)
            return um_settings_fail(ld, L, path, "%s: bad port in '%s' (expected 1 to 65535)", path,
                                    text);
    }

    size_t n = strlen(host) + 32;
    out->url = um_malloc(n);
    snprintf(out->url, n, "%s://%s:%lu", https ? "https" : "http", host, port);
    out->https = https;
    memset(&out->addr, 0, sizeof out->addr);
    out->addrlen = 0;
    if (family == AF_INET) {
        struct sockaddr_in *sa = (struct sockaddr_in *)&out->addr;
        sa->sin_family = AF_INET;
        sa->sin_addr = a4;
        sa->sin_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    } else if (family == AF_INET6) {
        struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->addr;
        sa->sin6_family = AF_INET6;
        sa->sin6_addr = a6;
        sa->sin6_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    }
    return true;
}

/* servers = "URL" or { "URL", ... } of the upstream table at idx. */
static bool load_servers(struct um_settings_load *ld, lua_State *L, int idx, const char *upath,
                         struct um_upstream_conf *u)
{
    char sub[PATH_LEN], el[PATH_LEN];
    const char *s;
    size_t n = 1;
    um_settings_subpath(sub, sizeof sub, upath, "servers");
    int t = um_settings_get_field(L, idx, "servers");
    if (t == LUA_TNIL)
        return um_settings_fail(ld, L, sub,
                                "%s: missing (every upstream needs at least one server, e.g. "
                                "servers = { \"http://127.0.0.1:9000\" })",
                                sub);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, sub, "%s: expected a URL or a list of URLs, got %s", sub,
                                lua_typename(L, t));
    int sidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, sidx, sub, &n)) return false;
        if (n == 0) return um_settings_fail(ld, L, sub, "%s: expected at least one server", sub);
    }
    u->servers = um_calloc(n, sizeof *u->servers);
    for (size_t i = 0; i < n; i++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, sub, i + 1);
            lua_rawgeti(L, sidx, (int)i + 1);
        } else {
            snprintf(el, sizeof el, "%s", sub);
            lua_pushvalue(L, sidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "a URL such as \"http://127.0.0.1:9000\"", &s) ||
            !parse_server(ld, L, el, s, &u->servers[i]))
            return false;
        u->num_servers++;
        for (size_t j = 0; j < i; j++)
            if (strcmp(u->servers[j].url, u->servers[i].url) == 0)
                return um_settings_fail(ld, L, el, "%s: '%s' is listed twice (as %s)", el, s,
                                        u->servers[i].url);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* tls = { verify = BOOL, ca = "FILE" } of the upstream table at idx. */
static bool load_upstream_tls(struct um_settings_load *ld, lua_State *L, int idx, const char *upath,
                              struct um_upstream_conf *u)
{
    char tpath[PATH_LEN], sub[PATH_LEN];
    const char *s;
    um_settings_subpath(tpath, sizeof tpath, upath, "tls");
    int t = um_settings_get_field(L, idx, "tls");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, tpath,
                                "%s: expected a table such as { verify = true, ca = "
                                "\"ca.pem\" }, got %s",
                                tpath, lua_typename(L, t));
    int tidx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, tidx, tpath, um__cfg_upstream_tls_keys)) return false;
    um_settings_subpath(sub, sizeof sub, tpath, "verify");
    if (!um_settings_opt_bool(ld, L, tidx, sub, "verify", &u->tls_verify, NULL)) return false;
    um_settings_subpath(sub, sizeof sub, tpath, "ca");
    if (um_settings_get_field(L, tidx, "ca") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, sub, "the path of a CA certificate file", &s) ||
            !um_settings_resolve_path(ld, L, sub, s, false, &u->tls_ca))
            return false;
    }
    lua_pop(L, 2);
    return true;
}

/* status = "LO-HI" or a single status N, each from 100 to 599. */
static bool parse_status_range(const char *s, int *lo, int *hi)
{
    int v[2] = {0, 0}, k = 0;
    const char *p = s;
    for (;;) {
        int digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
            v[k] = v[k] * 10 + (*p - '0');
        if (digits != 3 || v[k] < 100 || v[k] > 599) return false;
        if (*p == '\0') break;
        if (*p != '-' || k == 1) return false;
        p++;
        k++;
    }
    *lo = v[0];
    *hi = k == 1 ? v[1] : v[0];
    return *lo <= *hi;
}

/* health = { path = "/healthz", interval = 2, timeout = 1, fails = 3, passes = 2,
 * status = "200-399" } of the upstream table at idx: active health checks. */
static bool load_upstream_health(struct um_settings_load *ld, lua_State *L, int idx,
                                 const char *upath, struct um_upstream_conf *u)
{
    char hpath[PATH_LEN], sub[PATH_LEN];
    const char *s;
    long long n;
    um_settings_subpath(hpath, sizeof hpath, upath, "health");
    int t = um_settings_get_field(L, idx, "health");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, hpath,
                                "%s: expected a table such as { path = \"/healthz\", interval = "
                                "2 }, got %s",
                                hpath, lua_typename(L, t));
    int hidx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, hidx, hpath, um__cfg_upstream_health_keys)) return false;
    u->health_interval = 2;
    u->health_timeout = 1;
    u->health_fails = 3;
    u->health_passes = 2;
    u->health_status_lo = 200;
    u->health_status_hi = 399;

    um_settings_subpath(sub, sizeof sub, hpath, "path");
    if (um_settings_get_field(L, hidx, "path") == LUA_TNIL)
        return um_settings_fail(ld, L, sub, "%s: missing (the path to probe, e.g. \"/healthz\")",
                                sub);
    if (!um_settings_get_string(ld, L, -1, sub, "a path such as \"/healthz\"", &s)) return false;
    if (s[0] != '/')
        return um_settings_fail(ld, L, sub, "%s: bad path '%s' (expected one starting with '/')",
                                sub, s);
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '#')
            return um_settings_fail(ld, L, sub,
                                    "%s: bad path '%s' (ASCII without spaces, control "
                                    "characters or '#')",
                                    sub, s);
    u->health_path = um_strndup(s, strlen(s));
    lua_pop(L, 1);

    static const char *const seconds[] = {"interval", "timeout"};
    double *fields[] = {&u->health_interval, &u->health_timeout};
    for (size_t i = 0; i < UM_NELEMS(fields); i++) {
        um_settings_subpath(sub, sizeof sub, hpath, seconds[i]);
        if (um_settings_get_field(L, hidx, seconds[i]) != LUA_TNIL &&
            !um_settings_get_seconds(ld, L, -1, sub, fields[i]))
            return false;
        lua_pop(L, 1);
    }
    if (u->health_interval < 0.05)
        return um_settings_fail(ld, L, hpath, "%s.interval: expected at least 0.05 seconds", hpath);

    static const char *const counts[] = {"fails", "passes"};
    int *cfields[] = {&u->health_fails, &u->health_passes};
    for (size_t i = 0; i < UM_NELEMS(cfields); i++) {
        um_settings_subpath(sub, sizeof sub, hpath, counts[i]);
        if (um_settings_get_field(L, hidx, counts[i]) != LUA_TNIL) {
            if (!um_settings_get_integer(L, -1, 1, MAX_FAILS, &n))
                return um_settings_fail(ld, L, sub, "%s: expected an integer from 1 to %d", sub,
                                        MAX_FAILS);
            *cfields[i] = (int)n;
        }
        lua_pop(L, 1);
    }

    um_settings_subpath(sub, sizeof sub, hpath, "status");
    if ((t = um_settings_get_field(L, hidx, "status")) != LUA_TNIL) {
        char text[32];
        if (t == LUA_TNUMBER)
            snprintf(text, sizeof text, "%g", lua_tonumber(L, -1));
        else
            snprintf(text, sizeof text, "%s", t == LUA_TSTRING ? lua_tostring(L, -1) : "");
        if (!parse_status_range(text, &u->health_status_lo, &u->health_status_hi))
            return um_settings_fail(ld, L, sub,
                                    "%s: expected a status or a range of statuses from 100 to "
                                    "599, such as \"200-399\"",
                                    sub);
    }
    lua_pop(L, 2);
    return true;
}

/* The upstream at idx, whose name is already in u->name. */
static bool load_upstream(struct um_settings_load *ld, lua_State *L, int idx, const char *upath,
                          struct um_upstream_conf *u)
{
    char sub[PATH_LEN];
    const char *s;
    long long n;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, upath,
                                "%s: expected a table such as { servers = { "
                                "\"http://127.0.0.1:9000\" } }, got %s",
                                upath, lua_typename(L, t));
    if (!um_settings_check_keys(ld, L, idx, upath, um__cfg_upstream_keys)) return false;
    u->line = um_settings_line_of(ld, L, upath);
    u->balance = UM_BALANCE_ROUND_ROBIN;
    u->connect_timeout = 2;
    u->timeout = 30;
    u->retries = 1;
    u->tls_verify = true;
    u->max_fails = 3;
    u->fail_timeout = 10;

    if (!load_servers(ld, L, idx, upath, u))
        return false;

    um_settings_subpath(sub, sizeof sub, upath, "balance");
    if ((t = um_settings_get_field(L, idx, "balance")) != LUA_TNIL) {
        size_t i = 0;
        while (t == LUA_TSTRING && BALANCE_NAMES[i] != NULL &&
               strcmp(lua_tostring(L, -1), BALANCE_NAMES[i]) != 0)
            i++;
        if (t != LUA_TSTRING || BALANCE_NAMES[i] == NULL)
            return um_settings_fail(ld, L, sub, "%s: expected one of: %s", sub,
                                    um_settings_join(L, BALANCE_NAMES));
        u->balance = (enum um_balance)i;
    }
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, upath, "client");
    if ((t = um_settings_get_field(L, idx, "client")) != LUA_TNIL) {
        const char *v = t == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(v, "auto") == 0)
            u->curl_only = false;
        else if (strcmp(v, "curl") == 0)
            u->curl_only = true;
        else
            return um_settings_fail(ld, L, sub, "%s: expected \"auto\" or \"curl\"", sub);
    }
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, upath, "protocol");
    if ((t = um_settings_get_field(L, idx, "protocol")) != LUA_TNIL) {
        const char *v = t == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(v, "h1") == 0)
            u->h2 = false;
        else if (strcmp(v, "h2") == 0)
            u->h2 = true;
        else
            return um_settings_fail(ld, L, sub, "%s: expected \"h1\" or \"h2\"", sub);
        /* HTTP/2 is spoken by Umbra's own client only (libcurl's would not share its
         * connections between the workers' requests as this one does). */
        if (u->h2 && u->curl_only)
            return um_settings_fail(ld, L, sub, "%s: \"h2\" is not for client = \"curl\"",
                                    sub);
    }
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, upath, "send_proxy");
    if ((t = um_settings_get_field(L, idx, "send_proxy")) != LUA_TNIL) {
        const char *v = t == LUA_TSTRING ? lua_tostring(L, -1) : "";
        u->send_proxy = strcmp(v, "v1") == 0 ? 1 : strcmp(v, "v2") == 0 ? 2 : -1;
        if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) u->send_proxy = 0;
        if (u->send_proxy < 0)
            return um_settings_fail(ld, L, sub, "%s: expected \"v1\", \"v2\" or false", sub);
        /* One PROXY header names one client; an HTTP/2 connection carries many. */
        if (u->send_proxy && u->h2)
            return um_settings_fail(ld, L, sub, "%s: not with protocol = \"h2\"", sub);
        /* The header is written by Umbra's own client, on connections it does not share
         * between clients: libcurl's cannot carry another client's address. */
        for (size_t i = 0; i < u->num_servers && u->send_proxy; i++)
            if (u->curl_only || u->servers[i].https || u->servers[i].addrlen == 0)
                return um_settings_fail(ld, L, sub,
                                        "%s: needs http:// servers at IP addresses and client = "
                                        "\"auto\" (%s is not)",
                                        sub, u->servers[i].url);
    }
    lua_pop(L, 1);

    static const char *const seconds[] = {"connect_timeout", "timeout", "fail_timeout"};
    double *fields[] = {&u->connect_timeout, &u->timeout, &u->fail_timeout};
    for (size_t i = 0; i < UM_NELEMS(fields); i++) {
        um_settings_subpath(sub, sizeof sub, upath, seconds[i]);
        if (um_settings_get_field(L, idx, seconds[i]) != LUA_TNIL &&
            !um_settings_get_seconds(ld, L, -1, sub, fields[i]))
            return false;
        lua_pop(L, 1);
    }

    um_settings_subpath(sub, sizeof sub, upath, "retries");
    if (um_settings_get_field(L, idx, "retries") != LUA_TNIL) {
        if (!um_settings_get_integer(L, -1, 0, MAX_RETRIES, &n))
            return um_settings_fail(ld, L, sub, "%s: expected an integer from 0 to %d", sub,
                                    MAX_RETRIES);
        u->retries = (int)n;
    }
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, upath, "max_fails");
    if (um_settings_get_field(L, idx, "max_fails") != LUA_TNIL) {
        if (!um_settings_get_integer(L, -1, 1, MAX_FAILS, &n))
            return um_settings_fail(ld, L, sub, "%s: expected an integer from 1 to %d", sub,
                                    MAX_FAILS);
        u->max_fails = (int)n;
    }
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, upath, "host");
    if (um_settings_get_field(L, idx, "host") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, sub, "a Host such as \"example.com\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '/')
                return um_settings_fail(ld, L, sub,
                                        "%s: bad Host '%s' (ASCII without spaces, control "
                                        "characters or '/')",
                                        sub, s);
        u->host = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);

    return load_upstream_tls(ld, L, idx, upath, u) && load_upstream_health(ld, L, idx, upath, u);
}

static int cmp_upstream(const void *a, const void *b)
{
    return strcmp(((const struct um_upstream_conf *)a)->name,
                  ((const struct um_upstream_conf *)b)->name);
}

/* upstreams = { NAME = { ... }, ... }, stored sorted by name so that the indexes routes
 * refer to do not depend on the order of a Lua table. */
bool um__cfg_load_upstreams(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char key[128], sub[PATH_LEN];
    int t = um_settings_get_global(L, "upstreams");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "upstreams",
                                "upstreams: expected a table of NAME = { servers = "
                                "{ ... } }, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    if (n == 0)
        return true;
    c->upstreams = um_calloc(n, sizeof *c->upstreams);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, "upstreams", key);
        if (lua_type(L, -1) != LUA_TSTRING)
            return um_settings_fail(ld, L, sub,
                                    "upstreams: expected upstream names as keys, got [%s] "
                                    "(e.g. upstreams = { app = { servers = { ... } } })",
                                    key);
        const char *name = lua_tostring(L, -1);
        size_t len = strlen(name);
        bool ok = len > 0 && len <= MAX_UPSTREAM_NAME && !(name[0] >= '0' && name[0] <= '9') &&
                  name[0] != '-';
        for (const char *p = name; *p && ok; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || *p == '_' || *p == '-';
        if (!ok)
            return um_settings_fail(ld, L, sub,
                                    "upstreams: bad upstream name '%s' (expected up to %d "
                                    "letters, digits, '_' or '-', starting with a letter or '_')",
                                    key, MAX_UPSTREAM_NAME);
        c->upstreams[c->num_upstreams++].name = um_strndup(name, len);
    }
    qsort(c->upstreams, c->num_upstreams, sizeof *c->upstreams, cmp_upstream);
    for (size_t i = 0; i < c->num_upstreams; i++) {
        struct um_upstream_conf *u = &c->upstreams[i];
        um_settings_subpath(sub, sizeof sub, "upstreams", u->name);
        um_settings_get_field(L, idx, u->name);
        if (!load_upstream(ld, L, lua_gettop(L), sub, u))
            return false;
        lua_pop(L, 1);
    }
    return true;
}
