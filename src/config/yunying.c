/* SPDX-License-Identifier: BSD-2-Clause */
/* Yunying-style config files (https://github.com/chenyuheng/Yunying-HTTP-Server): their
 * settings are checked and rewritten as the Umbra settings that mean the same, which the
 * later steps then read. */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Yunying's settings (https://github.com/chenyuheng/Yunying-HTTP-Server, docs/config.md);
 * upstream_ip is what its examples write for upstream_domain. */
const char *const um__cfg_yunying[] = {"port",          "working_thread_num", "cache_size_bytes",
                                      "cache_default_max_age", "cache_clean_interval",
                                      "origin_type",   "root_dir",           "upstream_host",
                                      "upstream_domain", "upstream_ip",      "upstream_port",
                                      "upstream_protocol", "upstream_set",   NULL};

/* The first (lowest line) of the globals in names that the file set, or NULL. */
static const char *first_set(struct um_settings_load *ld, lua_State *L, const char *const *names,
                             int *line)
{
    const char *first = NULL;
    *line = INT_MAX;
    for (const char *const *n = names; *n; n++) {
        int t = um_settings_get_global(L, *n);
        lua_pop(L, 1);
        if (t == LUA_TNIL)
            continue;
        int l = um_settings_line_of(ld, L, *n);
        if (first == NULL || (l > 0 && l < *line)) {
            first = *n;
            *line = l > 0 ? l : INT_MAX;
        }
    }
    return first;
}

/* Sets global name to the value on top of the stack (raw: no line is recorded). */
static void set_global(lua_State *L, const char *name)
{
    lua_pushstring(L, name);
    lua_insert(L, -2);
    lua_rawset(L, LUA_GLOBALSINDEX);
}

/* port and working_thread_num: Umbra's listen and workers. */
static bool yy_listen_workers(struct um_settings_load *ld, lua_State *L)
{
    long long n;
    char buf[PATH_LEN];

    int t = um_settings_get_global(L, "port");
    n = 8080;
    if (t != LUA_TNIL && !um_settings_get_integer(L, -1, 0, 65535, &n))
        return um_settings_fail(ld, L, "port", "port: expected a port number from 0 to 65535");
    lua_pop(L, 1);
    snprintf(buf, sizeof buf, "*:%lld", n);
    lua_pushstring(L, buf);
    set_global(L, "listen");

    t = um_settings_get_global(L, "working_thread_num");
    n = 4;
    if (t != LUA_TNIL && !um_settings_get_integer(L, -1, 1, MAX_WORKERS, &n))
        return um_settings_fail(ld, L, "working_thread_num",
                                "working_thread_num: expected an integer from "
                                "1 to %d",
                                MAX_WORKERS);
    lua_pop(L, 1);
    lua_pushinteger(L, (lua_Integer)n);
    set_global(L, "workers");
    return true;
}

/* cache_size_bytes, cache_default_max_age, cache_clean_interval: Umbra's cache table. */
static bool yy_cache(struct um_settings_load *ld, lua_State *L)
{
    long long n;
    int t;
    lua_newtable(L);
    int cache = lua_gettop(L);
    t = um_settings_get_global(L, "cache_size_bytes");
    n = 1 << 25;
    if (t != LUA_TNIL &&
        !um_settings_get_integer(L, -1, (double)CACHE_MIN_MEMORY, 9007199254740992.0, &n))
        return um_settings_fail(ld, L, "cache_size_bytes",
                                "cache_size_bytes: expected a number of bytes, "
                                "at least %llu",
                                (unsigned long long)CACHE_MIN_MEMORY);
    lua_pop(L, 1);
    lua_pushnumber(L, (lua_Number)n);
    lua_setfield(L, cache, "memory");
    static const struct { const char *yy, *um; double def; } secs[] = {
        {"cache_default_max_age", "default_ttl", 300},
        {"cache_clean_interval", "clean_interval", 10},
    };
    for (size_t i = 0; i < UM_NELEMS(secs); i++) {
        double d = secs[i].def;
        if (um_settings_get_global(L, secs[i].yy) != LUA_TNIL &&
            !(i == 0 ? um_settings_get_seconds0 : um_settings_get_seconds)(ld, L, -1, secs[i].yy,
                                                                           &d))
            return false;
        lua_pop(L, 1);
        lua_pushnumber(L, d);
        lua_setfield(L, cache, secs[i].um);
    }
    set_global(L, "cache");
    return true;
}

/* A Yunying-style file: checks its settings and writes the Umbra settings that mean the
 * same (listen, workers, cache, upstreams, routes), which the other steps then read. */
bool um__cfg_load_yunying(struct um_settings_load *ld, lua_State *L)
{
    int yl, ul, hl;
    const char *yy = first_set(ld, L, um__cfg_yunying, &yl);
    if (yy == NULL)
        return true;
    const char *um = first_set(ld, L, um__cfg_settings, &ul);
    const char *hook = first_set(ld, L, um__cfg_hooks, &hl);
    if (um == NULL || (hook && hl < ul)) {
        um = hook;
        ul = hl;
    }
    if (um != NULL) {
        bool um_later = ul != INT_MAX && (yl == INT_MAX || ul > yl);
        int line = um_later ? ul : yl;
        return um_settings_fail_at(ld, line == INT_MAX ? 0 : line,
                                   "'%s' is an Umbra setting and '%s' a Yunying one: "
                                   "a config file uses one style or the other, not both",
                                   um, yy);
    }
    struct um_config *c = ld->c;
    c->lua.yunying = true;
    long long n;
    char buf[PATH_LEN];

    if (!yy_listen_workers(ld, L) || !yy_cache(ld, L))
        return false;

    const char *origin = "static_file";
    if (um_settings_get_global(L, "origin_type") != LUA_TNIL &&
        !um_settings_get_string(ld, L, -1, "origin_type", "\"static_file\" or \"upstream\"",
                                &origin))
        return false;
    bool upstream = strcmp(origin, "upstream") == 0;
    if (!upstream && strcmp(origin, "static_file") != 0)
        return um_settings_fail(ld, L, "origin_type",
                                "origin_type: expected \"static_file\" or "
                                "\"upstream\", got '%s'",
                                origin);
    lua_pop(L, 1);
    lua_newtable(L); /* routes */
    lua_newtable(L); /* routes[1] */
    lua_pushliteral(L, "/");
    lua_setfield(L, -2, "path");
    if (!upstream) {
        const char *root = ".";
        if (um_settings_get_global(L, "root_dir") != LUA_TNIL &&
            !um_settings_get_string(ld, L, -1, "root_dir", "a directory", &root))
            return false;
        char *abs;
        if (!um_settings_resolve_path(ld, L, "root_dir", root, true, &abs)) return false;
        lua_pop(L, 1);
        lua_pushstring(L, abs);
        free(abs);
        lua_setfield(L, -2, "root");
        lua_rawseti(L, -2, 1);
        set_global(L, "routes");
        return true;
    }

    const char *proto = "http", *domain = NULL, *host = NULL;
    if (um_settings_get_global(L, "upstream_protocol") != LUA_TNIL &&
        !um_settings_get_string(ld, L, -1, "upstream_protocol", "\"http\" or \"https\"", &proto))
        return false;
    if (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0)
        return um_settings_fail(ld, L, "upstream_protocol",
                                "upstream_protocol: expected \"http\" or "
                                "\"https\", got '%s'",
                                proto);
    const char *dname = um_settings_get_global(L, "upstream_domain") != LUA_TNIL ? "upstream_domain"
                        : (lua_pop(L, 1), um_settings_get_global(L, "upstream_ip")) != LUA_TNIL
                            ? "upstream_ip"
                            : NULL;
    if (dname == NULL)
        return um_settings_fail_at(ld, um_settings_line_of(ld, L, "origin_type"),
                                   "origin_type = \"upstream\" needs "
                                   "upstream_domain, the name or address of the upstream server");
    if (!um_settings_get_string(ld, L, -1, dname, "a host name or address", &domain)) return false;
    if (!um_settings_is_host_name(domain, strlen(domain)) && inet_pton(AF_INET, domain, buf) != 1)
        return um_settings_fail(ld, L, dname, "%s: bad host name '%s'", dname, domain);
    n = strcmp(proto, "https") == 0 ? 443 : 80;
    if (um_settings_get_global(L, "upstream_port") != LUA_TNIL &&
        !um_settings_get_integer(L, -1, 1, 65535, &n))
        return um_settings_fail(ld, L, "upstream_port",
                                "upstream_port: expected a port number from 1 to "
                                "65535");
    if (um_settings_get_global(L, "upstream_host") != LUA_TNIL &&
        !um_settings_get_string(ld, L, -1, "upstream_host", "a host name", &host))
        return false;
    int ft = um_settings_get_global(L, "upstream_set");
    if (ft != LUA_TNIL && ft != LUA_TFUNCTION)
        return um_settings_fail(ld, L, "upstream_set", "upstream_set: expected a function, got %s",
                                lua_typename(L, ft));
    c->lua.upstream_set = ft == LUA_TFUNCTION;
    c->lua.yy_protocol = um_strndup(proto, strlen(proto));
    c->lua.yy_domain = um_strndup(domain, strlen(domain));
    c->lua.yy_port = (int)n;

    lua_newtable(L); /* upstreams */
    lua_newtable(L); /* upstreams.yunying */
    lua_newtable(L);
    snprintf(buf, sizeof buf, "%s://%s:%lld", proto, domain, n);
    lua_pushstring(L, buf);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "servers");
    /* The Host sent: upstream_host, else the server's name (upstream_set may change it). */
    c->lua.yy_host = um_strndup(host ? host : domain, strlen(host ? host : domain));
    if (!c->lua.upstream_set) {
        lua_pushstring(L, c->lua.yy_host);
        lua_setfield(L, -2, "host");
    }
    lua_setfield(L, -2, "yunying");
    set_global(L, "upstreams");
    /* The stack: routes, routes[1], then the values read above. */
    lua_pushvalue(L, 2);
    lua_pushliteral(L, "yunying");
    lua_setfield(L, -2, "upstream");
    lua_rawseti(L, 1, 1);
    lua_settop(L, 1);
    set_global(L, "routes");
    return true;
}
