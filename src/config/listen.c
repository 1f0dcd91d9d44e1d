/* SPDX-License-Identifier: BSD-2-Clause */
/* listen = { "HOST:PORT", { "HOST:PORT", tls = true }, ... } and the certificates those
 * TLS listeners serve: tls = { { hosts = {...}, cert = "F", key = "F" }, ... }. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* The server's tls = { ENTRY, ..., protocols = ..., ... }: the named keys, and an entry's. */
const char *const um__cfg_tls_keys[] = {"protocols", "ciphers", "ciphersuites", "default",
                                              NULL};
const char *const um__cfg_cert_keys[] = {"hosts", "cert", "key", NULL};
/* A listen entry's named keys, beside its address at [1]. */
const char *const um__cfg_listen_keys[] = {"tls", "http2", NULL};
/* In the order of the UM_TLS_PROTO_* bits. */
static const char *const TLS_PROTOCOLS[] = {"TLSv1.2", "TLSv1.3", NULL};

/* The command line's -a: listen addresses that replace the file's. */
static const char *const *listen_override;
static size_t num_listen_override;

void um_config_listen_override(const char *const *addrs, size_t n)
{
    listen_override = addrs;
    num_listen_override = n;
}

/* Parses "host:port": host is an IPv4 literal, a bracketed IPv6 literal, "localhost"
 * (127.0.0.1) or "*" (0.0.0.0); port is 0 to 65535. */
bool um__cfg_parse_listen(struct um_settings_load *ld, lua_State *L, const char *path,
                          const char *text, struct um_listen *out)
{
    static const char hint[] =
        "expected \"HOST:PORT\" with HOST an IPv4 address, [IPv6 address], localhost or *";
    char host[64];
    const char *colon;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return um_settings_fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        colon = close + 1;
        if ((size_t)(close - text - 1) >= sizeof host)
            return um_settings_fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof host)
            return um_settings_fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        if (strchr(host, ':') != NULL)
            return um_settings_fail(ld, L, path,
                                    "%s: bad address '%s' (IPv6 addresses need brackets: "
                                    "\"[::1]:8080\")",
                                    path, text);
    }

    const char *p = colon + 1;
    unsigned long port = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
        port = port * 10 + (unsigned long)(*p - '0');
    if (digits == 0 || *p != '\0' || port > 65535)
        return um_settings_fail(ld, L, path, "%s: bad port in '%s' (expected 0 to 65535)", path,
                                text);

    memset(&out->addr, 0, sizeof out->addr);
    if (text[0] == '[') {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
            return um_settings_fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        out->addrlen = sizeof *sin6;
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->addr;
        if (strcmp(host, "*") == 0)
            sin->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (strcmp(host, "localhost") == 0)
            sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
            return um_settings_fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        out->addrlen = sizeof *sin;
    }
    out->text = um_strndup(text, strlen(text));
    return true;
}

#define LISTEN_HINT "a \"HOST:PORT\" string or { \"HOST:PORT\", tls = true, http2 = false }"

/* The listen entry at idx, at path: "HOST:PORT" or { "HOST:PORT", tls = true }. */
static bool load_listen_entry(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                              struct um_listen *out)
{
    char key[128], sub[PATH_LEN];
    const char *s;
    if (lua_type(L, idx) != LUA_TTABLE)
        return um_settings_get_string(ld, L, idx, path, LISTEN_HINT, &s) &&
               um__cfg_parse_listen(ld, L, path, s, out);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if ((lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) == 1) ||
            (lua_type(L, -1) == LUA_TSTRING &&
             um_settings_in_list(um__cfg_listen_keys, lua_tostring(L, -1))))
            continue;
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, path, key);
        return um_settings_fail(ld, L, sub, "%s: unexpected key '%s' (expected %s)", path, key,
                                LISTEN_HINT);
    }
    um_settings_subpath(sub, sizeof sub, path, "tls");
    if (!um_settings_opt_bool(ld, L, idx, sub, "tls", &out->tls, NULL)) return false;
    um_settings_subpath(sub, sizeof sub, path, "http2");
    bool http2 = !out->no_http2;
    if (!um_settings_opt_bool(ld, L, idx, sub, "http2", &http2, NULL)) return false;
    out->no_http2 = !http2;
    lua_rawgeti(L, idx, 1);
    if (lua_isnil(L, -1))
        return um_settings_fail(ld, L, path, "%s: missing the address (expected %s)", path,
                                LISTEN_HINT);
    if (!um_settings_get_string(ld, L, -1, path, "a \"HOST:PORT\" string", &s) ||
        !um__cfg_parse_listen(ld, L, path, s, out))
        return false;
    lua_pop(L, 1);
    return true;
}

bool um__cfg_load_listen(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN];
    const char *s;
    if (num_listen_override > 0) {
        c->listen = um_calloc(num_listen_override, sizeof *c->listen);
        c->num_listen = num_listen_override;
        for (size_t i = 0; i < num_listen_override; i++)
            if (!um__cfg_parse_listen(ld, L, "-a", listen_override[i], &c->listen[i]))
                return false;
        return true;
    }
    int t = um_settings_get_global(L, "listen");
    if (t == LUA_TNIL || t == LUA_TSTRING) {
        c->listen = um_calloc(1, sizeof *c->listen);
        c->num_listen = 1;
        if (t == LUA_TNIL)
            return um__cfg_parse_listen(ld, L, "listen", "127.0.0.1:8080", &c->listen[0]);
        return um_settings_get_string(ld, L, -1, "listen", "an address string", &s) &&
               um__cfg_parse_listen(ld, L, "listen", s, &c->listen[0]);
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "listen",
                                "listen: expected a list of \"HOST:PORT\" strings, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n;
    if (um_settings_get_field(L, idx, "tls") != LUA_TNIL)
        return um_settings_fail(ld, L, "listen.tls",
                                "listen: tls = true goes inside an entry of the list: "
                                "listen = { { \"127.0.0.1:8443\", tls = true } }");
    lua_pop(L, 1);
    if (!um_settings_check_list(ld, L, idx, "listen", &n)) return false;
    if (n == 0) return um_settings_fail(ld, L, "listen", "listen: expected at least one address");
    c->listen = um_calloc(n, sizeof *c->listen);
    c->num_listen = n;
    for (size_t i = 0; i < n; i++) {
        um_settings_subpath_i(sub, sizeof sub, "listen", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        if (!load_listen_entry(ld, L, lua_gettop(L), sub, &c->listen[i]))
            return false;
        lua_pop(L, 1);
        /* Port 0 asks for any free port: never a duplicate. */
        const struct sockaddr_storage *a = &c->listen[i].addr;
        in_port_t port = a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                                  : ((const struct sockaddr_in *)a)->sin_port;
        for (size_t j = 0; j < i && port != 0; j++)
            if (c->listen[j].addrlen == c->listen[i].addrlen &&
                memcmp(&c->listen[j].addr, &c->listen[i].addr, c->listen[i].addrlen) == 0)
                return um_settings_fail(ld, L, sub, "%s: '%s' is listed twice", sub,
                                        c->listen[i].text);
    }
    return true;
}

bool um__cfg_any_tls_listener(const struct um_config *c)
{
    for (size_t i = 0; i < c->num_listen; i++)
        if (c->listen[i].tls)
            return true;
    return false;
}

/* --- the server's tls setting ------------------------------------------------------------ */

/* The file name (as written at path) joined to the config's folder. It must be a regular
 * file, following symlinks, but the path is kept as written: a certificate reload re-reads
 * whatever a re-pointed link (certbot's live/) names by then. */
static bool resolve_tls_file(struct um_settings_load *ld, lua_State *L, const char *path,
                             const char *name, char **out)
{
    char *joined = um_settings_dir_join(ld, name);
    struct stat st;
    bool ok = true;
    if (stat(joined, &st) != 0)
        ok = errno == ENOENT
                 ? um_settings_fail(ld, L, path, "%s: no such file '%s' (looked for %s)", path,
                                    name, joined)
                 : um_settings_fail(ld, L, path, "%s: cannot use file '%s' (%s): %s", path, name,
                                    joined, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        ok = um_settings_fail(ld, L, path, "%s: '%s' is not a regular file", path, joined);
    if (!ok) {
        free(joined);
        return false;
    }
    *out = joined;
    return true;
}

/* The host name s of a certificate entry, at path: a DNS name, or "*." and a DNS name. */
static bool check_tls_host(struct um_settings_load *ld, lua_State *L, const char *path,
                           const char *s)
{
    const char *base = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t n = strlen(base);
    if (strchr(base, '*') != NULL)
        return um_settings_fail(ld, L, path,
                                "%s: bad name '%s' (a wildcard is only allowed as the whole "
                                "left-most label, e.g. \"*.example.com\")",
                                path, s);
    if (!um__cfg_is_host_name(base, n))
        return um_settings_fail(ld, L, path, "%s: bad host name '%s'", path, s);
    if (base == s && strspn(s, "0123456789.") == n)
        return um_settings_fail(ld, L, path,
                                "%s: '%s' is an IP address, and clients send no name (SNI) "
                                "for those: tls.default picks the certificate they get",
                                path, s);
    return true;
}

/* The entry that lists host already, or -1. */
static int tls_host_owner(const struct um_tls_conf *tc, size_t upto, const char *host)
{
    for (size_t i = 0; i <= upto && i < tc->num_certs; i++)
        for (size_t j = 0; j < tc->certs[i].num_hosts; j++)
            if (strcmp(tc->certs[i].hosts[j], host) == 0)
                return (int)i;
    return -1;
}

/* hosts = "NAME" or { "NAME", ... } of the entry at idx (entry number i). */
static bool load_tls_hosts(struct um_settings_load *ld, lua_State *L, int idx, const char *cpath,
                           size_t i, struct um_tls_cert_conf *cc)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char sub[PATH_LEN], el[PATH_LEN], other[PATH_LEN];
    const char *s;
    size_t n = 1;
    um_settings_subpath(sub, sizeof sub, cpath, "hosts");
    int t = um_settings_get_field(L, idx, "hosts");
    if (t == LUA_TNIL)
        return um_settings_fail(ld, L, sub,
                                "%s: missing (the names this certificate serves, e.g. hosts = "
                                "{ \"example.com\", \"*.example.com\" })",
                                sub);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, sub, "%s: expected a list of host names, got %s", sub,
                                lua_typename(L, t));
    int hidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, hidx, sub, &n)) return false;
        if (n == 0) return um_settings_fail(ld, L, sub, "%s: expected at least one host name", sub);
    }
    cc->hosts = um_calloc(n, sizeof *cc->hosts);
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, sub, j + 1);
            lua_rawgeti(L, hidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "%s", sub);
            lua_pushvalue(L, hidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "a host name such as \"example.com\"", &s) ||
            !check_tls_host(ld, L, el, s))
            return false;
        char *host = um_strndup(s, strlen(s));
        um_settings_lower(host);
        int owner = tls_host_owner(tc, i, host);
        if (owner >= 0) {
            um_settings_subpath_i(other, sizeof other, "tls", (size_t)owner + 1);
            bool ok =
                (size_t)owner == i
                    ? um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s)
                    : um_settings_fail(ld, L, el, "%s: '%s' is already listed in %s", el, s, other);
            free(host);
            return ok;
        }
        cc->hosts[cc->num_hosts++] = host;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* Entry number i (tls[i + 1]) at idx: { hosts = {...}, cert = "F", key = "F" }. */
static bool load_tls_cert(struct um_settings_load *ld, lua_State *L, int idx, const char *cpath,
                          size_t i, struct um_tls_cert_conf *cc)
{
    char sub[PATH_LEN];
    const char *cert_name, *key_name;
    if (lua_type(L, idx) != LUA_TTABLE)
        return um_settings_fail(
            ld, L, cpath,
            "%s: expected a certificate entry such as { hosts = { "
            "\"example.com\" }, cert = \"example.crt\", key = \"example.key\" }, got %s",
            cpath, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, cpath, um__cfg_cert_keys)) return false;
    cc->line = um_settings_line_of(ld, L, cpath);
    if (!load_tls_hosts(ld, L, idx, cpath, i, cc))
        return false;

    static const char *const files[] = {"cert", "key"};
    static const char *const what[] = {"a PEM certificate chain file", "a PEM key file"};
    char **outs[] = {&cc->cert, &cc->key};
    char **texts[] = {&cc->cert_name, &cc->key_name};
    int *lines[] = {&cc->cert_line, &cc->key_line};
    const char **names[] = {&cert_name, &key_name};
    for (size_t k = 0; k < 2; k++) {
        um_settings_subpath(sub, sizeof sub, cpath, files[k]);
        if (um_settings_get_field(L, idx, files[k]) == LUA_TNIL)
            return um_settings_fail(ld, L, sub, "%s: missing (%s, relative to the config's folder)",
                                    sub, what[k]);
        if (!um_settings_get_string(ld, L, -1, sub, what[k], names[k]) ||
            !resolve_tls_file(ld, L, sub, *names[k], outs[k]))
            return false;
        /* For the TLS module's check of the pair after the load (um_tls_check_config). */
        *texts[k] = um_strndup(*names[k], strlen(*names[k]));
        *lines[k] = um_settings_line_of(ld, L, sub);
        lua_pop(L, 1);
    }
    return true;
}

/* protocols = "TLSv1.3" or a list of them, of the tls table at idx. */
static bool load_tls_protocols(struct um_settings_load *ld, lua_State *L, int idx)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = um_settings_get_field(L, idx, "protocols");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return um_settings_fail(ld, L, "tls.protocols",
                                "tls.protocols: expected a list such as { "
                                "\"TLSv1.2\", \"TLSv1.3\" }, got %s",
                                lua_typename(L, t));
    int pidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!um_settings_check_list(ld, L, pidx, "tls.protocols", &n)) return false;
        if (n == 0)
            return um_settings_fail(ld, L, "tls.protocols",
                                    "tls.protocols: expected at least one of: %s",
                                    um_settings_join(L, TLS_PROTOCOLS));
    }
    tc->protocols = 0;
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            um_settings_subpath_i(el, sizeof el, "tls.protocols", j + 1);
            lua_rawgeti(L, pidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "tls.protocols");
            lua_pushvalue(L, pidx);
        }
        if (!um_settings_get_string(ld, L, -1, el, "\"TLSv1.2\" or \"TLSv1.3\"", &s)) return false;
        size_t k = 0;
        while (TLS_PROTOCOLS[k] != NULL && strcmp(TLS_PROTOCOLS[k], s) != 0)
            k++;
        if (TLS_PROTOCOLS[k] == NULL)
            return um_settings_fail(ld, L, el,
                                    "%s: unknown protocol '%s' (expected one of: %s; older "
                                    "versions are not supported)",
                                    el, s, um_settings_join(L, TLS_PROTOCOLS));
        if (tc->protocols & (1u << k))
            return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        tc->protocols |= 1u << k;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* ciphers / ciphersuites of the tls table at idx. */
static bool load_tls_ciphers(struct um_settings_load *ld, lua_State *L, int idx, const char *key,
                             bool tls13, char **out, int *line)
{
    char sub[PATH_LEN];
    const char *s;
    um_settings_subpath(sub, sizeof sub, "tls", key);
    if (um_settings_get_field(L, idx, key) != LUA_TNIL) {
        if (!um_settings_get_string(
                ld, L, -1, sub, tls13 ? "a TLS 1.3 ciphersuite list" : "a TLS 1.2 cipher list", &s))
            return false;
        /* OpenSSL checks the names after the load (um_tls_check_config). */
        *out = um_strndup(s, strlen(s));
        *line = um_settings_line_of(ld, L, sub);
    }
    lua_pop(L, 1);
    return true;
}

/* A listener with tls = true needs certificates. */
static bool check_tls_listeners(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN], el[PATH_LEN];
    if (c->tls.num_certs > 0)
        return true;
    for (size_t i = 0; i < c->num_listen; i++) {
        if (!c->listen[i].tls)
            continue;
        um_settings_subpath_i(sub, sizeof sub, "listen", i + 1);
        um_settings_subpath(el, sizeof el, sub, "tls");
        return um_settings_fail(ld, L, el,
                                "%s: tls = true needs certificates: add a setting tls = { { "
                                "hosts = { \"example.com\" }, cert = \"example.crt\", key = "
                                "\"example.key\" } }",
                                sub);
    }
    return true;
}

/* tls = { { hosts = {...}, cert = "F", key = "F" }, ..., protocols = {...}, ciphers = "...",
 * ciphersuites = "...", default = "HOST" }. */
bool um__cfg_load_tls(struct um_settings_load *ld, lua_State *L)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char key[128], sub[PATH_LEN];
    const char *s;
    int t = um_settings_get_global(L, "tls");
    if (t == LUA_TNIL)
        return check_tls_listeners(ld, L);
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "tls",
            "tls: expected a list of certificate entries such as { { "
            "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
            "} }, got %s",
            lua_typename(L, t));
    int idx = lua_gettop(L);
    tc->line = um_settings_line_of(ld, L, "tls");

    /* Entries at 1..n, the options by name. */
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER)
            n++;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING && um_settings_in_list(um__cfg_tls_keys, lua_tostring(L, -1)))
            continue;
        if (kt == LUA_TNUMBER) {
            double d = lua_tonumber(L, -1);
            if (d >= 1 && d <= (double)n && d == floor(d))
                continue;
        }
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, "tls", key);
        if (kt == LUA_TSTRING)
            return um_settings_fail(ld, L, sub,
                                    "tls: unknown key '%s' (expected certificate entries and: "
                                    "%s)",
                                    key, um_settings_join(L, um__cfg_tls_keys));
        return um_settings_fail(ld, L, sub,
                                "tls: expected a list of certificate entries without holes "
                                "(found index %s)",
                                key);
    }
    if (n == 0)
        return um_settings_fail(
            ld, L, "tls",
            "tls: expected at least one certificate entry such as { "
            "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
            "}");
    tc->certs = um_calloc(n, sizeof *tc->certs);
    for (size_t i = 0; i < n; i++) {
        um_settings_subpath_i(sub, sizeof sub, "tls", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        tc->num_certs++; /* so that config_free frees what the entry got so far */
        if (!load_tls_cert(ld, L, lua_gettop(L), sub, i, &tc->certs[i]))
            return false;
        lua_pop(L, 1);
    }

    if (!load_tls_protocols(ld, L, idx) ||
        !load_tls_ciphers(ld, L, idx, "ciphers", false, &tc->ciphers, &tc->ciphers_line) ||
        !load_tls_ciphers(ld, L, idx, "ciphersuites", true, &tc->ciphersuites,
                          &tc->ciphersuites_line))
        return false;

    if (um_settings_get_field(L, idx, "default") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, "tls.default", "one of the hosts of the entries",
                                    &s))
            return false;
        char *host = um_strndup(s, strlen(s));
        um_settings_lower(host);
        int owner = tls_host_owner(tc, tc->num_certs, host);
        free(host);
        if (owner < 0)
            return um_settings_fail(ld, L, "tls.default",
                                    "tls.default: '%s' is not among the hosts of "
                                    "the entries",
                                    s);
        tc->default_cert = (size_t)owner;
    }
    lua_pop(L, 1);
    return check_tls_listeners(ld, L);
}
