/* SPDX-License-Identifier: BSD-2-Clause */
/* routes = { { path = "/", root = "www" }, { path = "/api/", upstream = "app" }, ... }:
 * what each path serves (files, an upstream, or a hook's answer). */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "internal.h"

const char *const um__cfg_route_keys[] = {"host",       "path",           "root",  "upstream",
                                          "index",      "redirect_https", "cache", "name",
                                          "on_request", "on_response",    "cgi",   "precompressed",
                                          NULL};

/* The route's upstream = "NAME" (on top of the stack), at path. */
static bool resolve_upstream(struct um_settings_load *ld, lua_State *L, const char *path,
                             struct um_route *r)
{
    struct um_config *c = ld->c;
    const char *s;
    if (!um_settings_get_string(ld, L, -1, path, "the name of an upstream", &s)) return false;
    int found = um_config_upstream_index(c, s);
    if (found >= 0) {
        r->upstream = found;
        return true;
    }
    if (c->num_upstreams == 0)
        return um_settings_fail(ld, L, path,
                                "%s: unknown upstream '%s' (the upstreams setting defines "
                                "none)",
                                path, s);
    /* Every name, however many: a Lua buffer, not a char array. */
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < c->num_upstreams; i++) {
        if (i > 0)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, c->upstreams[i].name);
    }
    luaL_pushresult(&b);
    return um_settings_fail(ld, L, path, "%s: unknown upstream '%s' (upstreams are: %s)", path, s,
                            lua_tostring(L, -1));
}

/* { path = "/cgi-bin/", cgi = "DIR", cache = BOOL }: scripts under DIR (its value on top
 * of the stack). cache is off unless asked for. */
static bool load_cgi_route(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                           struct um_route *r)
{
    char sub[PATH_LEN];
    const char *s;
    static const char *const others[] = {"root", "upstream", "index", NULL};
    for (const char *const *k = others; *k; k++) {
        int t = um_settings_get_field(L, idx, *k);
        lua_pop(L, 1);
        if (t != LUA_TNIL) {
            um_settings_subpath(sub, sizeof sub, rpath, *k);
            return um_settings_fail(ld, L, sub,
                                    "%s: a cgi route runs the scripts of its directory (it has "
                                    "no %s)",
                                    sub, *k);
        }
    }
    um_settings_subpath(sub, sizeof sub, rpath, "cgi");
    if (!um_settings_get_string(ld, L, -1, sub, "a directory of CGI scripts", &s) ||
        !um_settings_resolve_path(ld, L, sub, s, true, &r->cgi))
        return false;
    lua_pop(L, 1);
    um_settings_subpath(sub, sizeof sub, rpath, "cache");
    return um_settings_opt_bool(ld, L, idx, sub, "cache", &r->cache, NULL);
}

/* The route's host, lowercased, if it has one. */
static bool load_host(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                      struct um_route *r)
{
    char sub[PATH_LEN];
    const char *s;
    um_settings_subpath(sub, sizeof sub, rpath, "host");
    if (um_settings_get_field(L, idx, "host") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, sub, "a host name such as \"example.com\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if (*p <= ' ' || *p == ':' || *p == '/' || *p == 0x7f)
                return um_settings_fail(ld, L, sub,
                                        "%s: bad host name '%s' (no port, path or spaces)", sub, s);
        r->host = um_strndup(s, strlen(s));
        for (char *p = r->host; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
    }
    lua_pop(L, 1);
    return true;
}

/* A route that serves files: its root and its index. */
static bool load_root(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                      struct um_route *r)
{
    char sub[PATH_LEN];
    const char *s;
    um_settings_subpath(sub, sizeof sub, rpath, "root");
    um_settings_get_field(L, idx, "root");
    if (!um_settings_get_string(ld, L, -1, sub, "a directory", &s) ||
        !um_settings_resolve_path(ld, L, sub, s, true, &r->root))
        return false;
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, rpath, "index");
    int t = um_settings_get_field(L, idx, "index");
    if (t == LUA_TNIL) {
        r->index = um_strndup("index.html", strlen("index.html"));
    } else if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
        r->index = NULL;
    } else {
        const char *what = "a file name such as \"index.html\", or false";
        if (!um_settings_get_string(ld, L, -1, sub, what, &s)) return false;
        if (strchr(s, '/') != NULL || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
            return um_settings_fail(ld, L, sub, "%s: expected %s, got '%s'", sub, what, s);
        r->index = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);
    return true;
}

static bool load_route(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                       struct um_route *r)
{
    char sub[PATH_LEN];
    const char *s;
    if (!lua_istable(L, idx))
        return um_settings_fail(
            ld, L, rpath,
            "%s: expected a route table such as { path = \"/\", root = \"www\" }, got %s", rpath,
            lua_typename(L, lua_type(L, idx)));
    r->upstream = -1;
    if (!um_settings_check_keys(ld, L, idx, rpath, um__cfg_route_keys_all())) return false;
    r->line = um_settings_line_of(ld, L, rpath);

    if (!load_host(ld, L, idx, rpath, r))
        return false;

    um_settings_subpath(sub, sizeof sub, rpath, "path");
    if (um_settings_get_field(L, idx, "path") == LUA_TNIL)
        return um_settings_fail(ld, L, sub, "%s: missing (every route needs a path such as \"/\")",
                                sub);
    if (!um_settings_get_string(ld, L, -1, sub, "a path starting with \"/\"", &s)) return false;
    if (s[0] != '/')
        return um_settings_fail(ld, L, sub, "%s: '%s' does not start with \"/\"", sub, s);
    for (const char *p = s; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return um_settings_fail(ld, L, sub, "%s: '%s' contains a space or control character",
                                    sub, s);
    r->path = um_strndup(s, strlen(s));
    lua_pop(L, 1);

    um_settings_subpath(sub, sizeof sub, rpath, "redirect_https");
    if (!um_settings_opt_bool(ld, L, idx, sub, "redirect_https", &r->redirect_https, NULL))
        return false;
    if (r->redirect_https && !um__cfg_any_tls_listener(ld->c))
        return um_settings_fail(ld, L, sub,
                                "%s: no listener has tls = true (there is no https address to "
                                "redirect to)",
                                sub);

    um_settings_subpath(sub, sizeof sub, rpath, "name");
    if (um_settings_get_field(L, idx, "name") != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, sub, "a route name such as \"api\"", &s))
            return false;
        /* The routes after this one have no name yet. */
        if (um_config_route_index(ld->c, s) >= 0)
            return um_settings_fail(ld, L, sub, "%s: another route is named '%s' already", sub, s);
        r->name = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);
    for (const char *const *h = um__cfg_hooks; *h; h++) {
        um_settings_subpath(sub, sizeof sub, rpath, *h);
        int ht = um_settings_get_field(L, idx, *h);
        if (ht != LUA_TNIL && ht != LUA_TFUNCTION)
            return um_settings_fail(ld, L, sub, "%s: expected a function, got %s", sub,
                                    lua_typename(L, ht));
        if (ht == LUA_TFUNCTION)
            *(h == um__cfg_hooks ? &r->on_request : &r->on_response) = true;
        lua_pop(L, 1);
    }

    if (!um__cfg_load_route_parts(ld, L, idx, rpath, r)) return false;
    um_settings_subpath(sub, sizeof sub, rpath, "precompressed");
    if (!um_settings_opt_bool(ld, L, idx, sub, "precompressed", &r->precompressed, NULL))
        return false;
    if (r->precompressed) {
        int rt2 = um_settings_get_field(L, idx, "root");
        lua_pop(L, 1);
        if (rt2 == LUA_TNIL)
            return um_settings_fail(ld, L, sub, "%s: applies to routes with a root (files)", sub);
    }

    if (um_settings_get_field(L, idx, "cgi") != LUA_TNIL)
        return load_cgi_route(ld, L, idx, rpath, r);
    lua_pop(L, 1);

    bool has_root = um_settings_get_field(L, idx, "root") != LUA_TNIL;
    bool has_upstream = um_settings_get_field(L, idx, "upstream") != LUA_TNIL;
    lua_pop(L, 2);
    if (has_root && has_upstream)
        return um_settings_fail(ld, L, rpath,
                                "%s: has both root and upstream (a route serves files from "
                                "a root or proxies to an upstream, not both)",
                                rpath);
    if (!has_root && !has_upstream) {
        /* A route that only a hook answers (or sends to an upstream of its choice). */
        if (r->on_request || ld->c->lua.on_request) {
            int ct = um_settings_get_field(L, idx, "cache"),
                it = um_settings_get_field(L, idx, "index");
            lua_pop(L, 2);
            if (ct != LUA_TNIL || it != LUA_TNIL)
                return um_settings_fail(ld, L, rpath, "%s: cache and index need root or upstream",
                                        rpath);
            return true;
        }
        return um_settings_fail(
            ld, L, rpath,
            "%s: route needs root or upstream (root = \"www\" serves "
            "files, upstream = \"NAME\" proxies to an upstream), or an on_request "
            "hook that answers",
            rpath);
    }

    /* cache: on by default for an upstream route; a static route never goes through the
     * cache (cache = false on one is allowed, and changes nothing). */
    um_settings_subpath(sub, sizeof sub, rpath, "cache");
    r->cache = has_upstream;
    if (!um_settings_opt_bool(ld, L, idx, sub, "cache", &r->cache, NULL)) return false;
    if (r->cache && !has_upstream)
        return um_settings_fail(ld, L, sub,
                                "%s: cache applies to upstream routes (this one serves files from "
                                "a root)",
                                sub);

    if (has_upstream) {
        um_settings_subpath(sub, sizeof sub, rpath, "upstream");
        um_settings_get_field(L, idx, "upstream");
        if (!resolve_upstream(ld, L, sub, r))
            return false;
        lua_pop(L, 1);
        um_settings_subpath(sub, sizeof sub, rpath, "index");
        if (um_settings_get_field(L, idx, "index") != LUA_TNIL)
            return um_settings_fail(ld, L, sub,
                                    "%s: only routes with a root have an index (this one "
                                    "proxies to upstream '%s')",
                                    sub, ld->c->upstreams[r->upstream].name);
        lua_pop(L, 1);
        return true;
    }

    return load_root(ld, L, idx, rpath, r);
}

bool um__cfg_load_routes(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN];
    int t = um_settings_get_global(L, "routes");
    if (t == LUA_TNIL)
        return um_settings_fail_at(ld, 0,
                                   "routes: missing (at least one route is required, e.g. "
                                   "routes = { { path = \"/\", root = \"www\" } })");
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "routes", "routes: expected a list of route tables, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n;
    if (!um_settings_check_list(ld, L, idx, "routes", &n)) return false;
    if (n == 0) return um_settings_fail(ld, L, "routes", "routes: expected at least one route");
    c->routes = um_calloc(n, sizeof *c->routes);
    c->num_routes = n;
    for (size_t i = 0; i < n; i++) {
        um_settings_subpath_i(sub, sizeof sub, "routes", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        if (!load_route(ld, L, lua_gettop(L), sub, &c->routes[i]))
            return false;
        lua_pop(L, 1);
    }
    return true;
}
