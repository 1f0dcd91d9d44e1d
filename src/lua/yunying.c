/* SPDX-License-Identifier: BSD-2-Clause */
/* Yunying compatibility: the set_* functions a Yunying-style file's upstream_set calls,
 * and the call itself (um_hooks_on_request runs it instead of on_request for such a file).
 * upstream_set(target, method, host) starts from the server the file's upstream_*
 * settings name and may change the request and that server; the cache key stays the
 * client's URL. */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/cacheorigin.h"
#include "umbra/config.h"
#include "umbra/hooks.h"
#include "umbra/httpfield.h"

#include "internal.h"

static struct um_hook_request *yy_request(lua_State *L, const char *what)
{
    return um__hooks_request_call(L, what, "only in upstream_set");
}

static int yy_set_path(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_path");
    size_t n;
    const char *p = um__hooks_check_string(L, 1, "set_path", &n);
    const char *q = memchr(p, '?', n);
    size_t plen = q ? (size_t)(q - p) : n;
    um__hooks_check_path(L, "set_path", p, plen);
    if (q && !um__hooks_is_visible(q + 1, n - plen - 1, "#"))
        luaL_error(L, "set_path: the query has a space, control character or #");
    um__hooks_set_target(hr, p, plen, q ? q + 1 : NULL, q ? n - plen - 1 : 0, q != NULL);
    return 0;
}

static int yy_set_method(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_method");
    size_t n;
    const char *m = um__hooks_check_string(L, 1, "set_method", &n);
    if (!um_http_is_token((um_str){m, n}))
        return luaL_error(L, "set_method: '%s' is not a method", m);
    hr->req->method = (um_str){um_arena_strdup(hr->arena, m, n), n};
    hr->req->method_id = um_http1_method_id(m, n);
    return 0;
}

static int yy_set_host(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_host");
    um__hooks_set_host(L, 1, hr, "set_host");
    return 0;
}

static int yy_set_body(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_body");
    size_t n;
    const char *b = um__hooks_check_string(L, 1, "set_body", &n);
    hr->has_body = true;
    hr->body = (um_str){um_arena_strdup(hr->arena, b, n), n};
    return 0;
}

static int yy_set_domain(lua_State *L)
{
    yy_request(L, "set_upstream_domain");
    size_t n;
    const char *d = um__hooks_check_string(L, 1, "set_upstream_domain", &n);
    if (n == 0 || !um__hooks_is_visible(d, n, "/?#@\\\"<>{}|^`:"))
        return luaL_error(L, "set_upstream_domain: '%s' is not a host name or address", d);
    struct um__hook_call *cl = um__hooks_current(L);
    cl->yy_domain = um_arena_strdup(cl->arena, d, n);
    cl->yy_server_changed = true;
    return 0;
}

static int yy_set_port(lua_State *L)
{
    yy_request(L, "set_upstream_port");
    lua_Integer p = luaL_checkinteger(L, 1);
    if (p < 1 || p > 65535)
        return luaL_error(L, "set_upstream_port: %d is not a port", (int)p);
    struct um__hook_call *cl = um__hooks_current(L);
    cl->yy_port = (int)p;
    cl->yy_server_changed = true;
    return 0;
}

static int yy_set_protocol(lua_State *L)
{
    yy_request(L, "set_upstream_protocol");
    const char *p = luaL_checkstring(L, 1);
    if (strcmp(p, "http") != 0 && strcmp(p, "https") != 0)
        return luaL_error(L, "set_upstream_protocol: expected \"http\" or \"https\", got '%s'", p);
    struct um__hook_call *cl = um__hooks_current(L);
    cl->yy_protocol = p[4] ? "https" : "http";
    cl->yy_server_changed = true;
    return 0;
}

void um__hooks_open_yunying(lua_State *L)
{
    static const luaL_Reg yy[] = {
        {"set_path", yy_set_path},
        {"set_method", yy_set_method},
        {"set_host", yy_set_host},
        {"set_body", yy_set_body},
        {"set_upstream_domain", yy_set_domain},
        {"set_upstream_ip", yy_set_domain},
        {"set_upstream_port", yy_set_port},
        {"set_upstream_protocol", yy_set_protocol},
        {NULL, NULL},
    };
    for (const luaL_Reg *r = yy; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, LUA_GLOBALSINDEX, r->name);
    }
}

/* The cache's key of the request before a hook changed it. */
static um_str url_key(struct um_arena *a, const struct um_request *req)
{
    size_t n = um_cache_url_key_len(req);
    char *k = um_arena_alloc(a, n + 1);
    um_cache_url_key_write(req, k);
    k[n] = '\0';
    return (um_str){k, n};
}

enum um_hook_result um__hooks_yunying(struct um__hook_state *h, struct um_hook_request *hr,
                                      struct um__hook_call *cl)
{
    const struct um_config *c = cl->c;
    struct um_request *req = hr->req;
    lua_State *L = h->L;
    /* Its cache key is the client's URL, whatever the upstream request becomes. */
    um_str key = url_key(hr->arena, req);
    cl->yy_protocol = c->lua.yy_protocol;
    cl->yy_domain = c->lua.yy_domain;
    cl->yy_port = c->lua.yy_port;
    um_str client_host = req->authority;
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->upstream_set);
    um__hooks_push_str(L, req->target);
    um__hooks_push_str(L, req->method);
    um__hooks_push_str(L, client_host);
    /* The Host sent is upstream_host (or the server's name) unless set_host changes it. */
    req->authority = h->yy_host;
    h->call = cl;
    bool ok = um__hooks_pcall(h, 3, UM_HOOK_BUDGET, "upstream_set", cl);
    h->call = NULL;
    if (!ok)
        return UM_HOOK_FAIL;
    lua_settop(L, 1);
    hr->cache_key = key;
    if (cl->yy_server_changed) {
        size_t n = strlen(cl->yy_domain) + 32;
        char *u = um_arena_alloc(hr->arena, n);
        snprintf(u, n, "%s://%s:%d", cl->yy_protocol, cl->yy_domain, cl->yy_port);
        hr->upstream_url = u;
    }
    return UM_HOOK_CONTINUE;
}
