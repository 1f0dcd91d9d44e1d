/* SPDX-License-Identifier: BSD-2-Clause */
/* listen = { "HOST:PORT", { "HOST:PORT", tls = true }, ... } (the certificates of TLS
 * listeners are the TLS module's settings: src/tls/settings.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* A listen entry's named keys, beside its address at [1]. */
const char *const um__cfg_listen_keys[] = {"tls", "http2", "proxy_protocol", "proxy_from", NULL};

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

#define LISTEN_HINT                                                                                \
    "a \"HOST:PORT\" string or { \"HOST:PORT\", tls = true, http2 = false, proxy_protocol = "      \
    "true, proxy_from = { \"10.0.0.0/8\" } }"

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
    um_settings_subpath(sub, sizeof sub, path, "proxy_protocol");
    if (!um_settings_opt_bool(ld, L, idx, sub, "proxy_protocol", &out->proxy_protocol, NULL))
        return false;
    um_settings_subpath(sub, sizeof sub, path, "proxy_from");
    if (um_settings_get_field(L, idx, "proxy_from") != LUA_TNIL) {
        if (!out->proxy_protocol)
            return um_settings_fail(ld, L, sub, "%s: proxy_from needs proxy_protocol = true", sub);
        if (!um_settings_netmask_list(ld, L, lua_gettop(L), sub, &out->proxy_from,
                                      &out->num_proxy_from))
            return false;
        if (out->num_proxy_from == 0)
            return um_settings_fail(ld, L, sub,
                                    "%s: expected at least one address or network "
                                    "(leave it out to take the header from any peer)",
                                    sub);
    }
    lua_pop(L, 1);
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
