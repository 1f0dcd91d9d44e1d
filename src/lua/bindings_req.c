/* SPDX-License-Identifier: BSD-2-Clause */
/* The req table: the request a hook reads, and in on_request changes in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/cacheorigin.h"
#include "umbra/config.h"
#include "umbra/hooks.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"

#include "internal.h"


/* ---------------------------------------------------------------- req */

void um__hooks_push_str(lua_State *L, um_str s)
{
    lua_pushlstring(L, s.base ? s.base : "", s.len);
}

/* Pushes the value of the first field named name, or nil. */
int um__hooks_push_header(lua_State *L, const struct um_header *h, size_t n, const char *name,
                       size_t nlen)
{
    for (size_t i = 0; i < n; i++)
        if (um__hooks_name_is(h[i].name, name, nlen)) {
            um__hooks_push_str(L, h[i].value);
            return 1;
        }
    lua_pushnil(L);
    return 1;
}

/* A table of lower-case name -> value; repeated fields joined with ", ". */
int um__hooks_push_headers(lua_State *L, const struct um_header *h, size_t n)
{
    lua_createtable(L, 0, (int)n);
    char name[256];
    for (size_t i = 0; i < n; i++) {
        size_t len = h[i].name.len < sizeof(name) ? h[i].name.len : sizeof(name) - 1;
        for (size_t j = 0; j < len; j++) {
            char ch = h[i].name.base[j];
            name[j] = ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
        }
        lua_pushlstring(L, name, len);
        lua_pushvalue(L, -1);
        lua_rawget(L, -3);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            um__hooks_push_str(L, h[i].value);
        } else {
            lua_pushliteral(L, ", ");
            um__hooks_push_str(L, h[i].value);
            lua_concat(L, 3);
        }
        lua_rawset(L, -3);
    }
    return 1;
}

int um__hooks_req_header(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    return um__hooks_push_header(L, cl->req->headers, cl->req->num_headers, name, n);
}

/* The request of an on_request (or upstream_set) call; in on_response, an error that says
 * "what: why". */
struct um_hook_request *um__hooks_request_call(lua_State *L, const char *what, const char *why)
{
    struct um__hook_call *cl = um__hooks_current(L);
    if (cl->hr == NULL)
        luaL_error(L, "%s: %s", what, why);
    return cl->hr;
}

static struct um_hook_request *writable(lua_State *L, const char *what)
{
    return um__hooks_request_call(L, what, "the request cannot be changed in on_response");
}

static void remove_fields(struct um_request *req, const char *name, size_t n, size_t from)
{
    size_t out = from;
    for (size_t i = from; i < req->num_headers; i++) {
        if (um__hooks_name_is(req->headers[i].name, name, n))
            continue;
        req->headers[out++] = req->headers[i];
    }
    req->num_headers = out;
}

/* req:set_header(name, value): replaces every field of that name (value nil removes). */
int um__hooks_req_set_header(lua_State *L)
{
    struct um_hook_request *hr = writable(L, "req:set_header");
    struct um_request *req = hr->req;
    size_t n, vn;
    const char *name = luaL_checklstring(L, 2, &n);
    if (!um_http_is_token((um_str){name, n}))
        return luaL_error(L, "req:set_header: bad field name '%s'", name);
    if (um__hooks_is_framing(name, n) || um_str_eq_ci((um_str){name, n}, "host"))
        return luaL_error(L, "req:set_header: %s cannot be set by a hook%s", name,
                          n == 4 ? " (set req.host)" : "");
    if (lua_isnoneornil(L, 3)) {
        remove_fields(req, name, n, 0);
        return 0;
    }
    const char *value = um__hooks_check_value(L, 3, "req:set_header", "req:set_header", name, &vn);
    um_str v = {um_arena_strdup(hr->arena, value, vn), vn};
    for (size_t i = 0; i < req->num_headers; i++)
        if (um__hooks_name_is(req->headers[i].name, name, n)) {
            req->headers[i].value = v;
            remove_fields(req, name, n, i + 1);
            return 0;
        }
    if (req->num_headers >= UM_HTTP1_MAX_HEADERS)
        return luaL_error(L, "req:set_header: too many fields (at most %d)",
                          UM_HTTP1_MAX_HEADERS);
    req->headers[req->num_headers++] =
        (struct um_header){{um_arena_strdup(hr->arena, name, n), n}, v};
    return 0;
}

int um__hooks_req_remove_header(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushnil(L);
    return um__hooks_req_set_header(L);
}

/* New path and query: the target is rebuilt from them (origin-form). */
void um__hooks_set_target(struct um_hook_request *hr, const char *path, size_t plen,
                          const char *query, size_t qlen, bool has_query)
{
    struct um_request *req = hr->req;
    size_t tlen = plen + (has_query ? qlen + 1 : 0);
    char *t = um_arena_alloc(hr->arena, tlen + 1);
    memcpy(t, path, plen);
    if (has_query) {
        t[plen] = '?';
        memcpy(t + plen + 1, query, qlen);
    }
    t[tlen] = '\0';
    req->target = (um_str){t, tlen};
    req->path = (um_str){t, plen};
    req->query = has_query ? (um_str){t + plen + 1, qlen} : (um_str){t + tlen, 0};
    req->flags = (req->flags & ~(unsigned)UM_REQ_F_ABSOLUTE_FORM & ~(unsigned)UM_REQ_F_HAS_QUERY) |
                 (has_query ? UM_REQ_F_HAS_QUERY : 0);
    hr->path_changed = true;
}

/* A ttl at idx: nil clears it, else seconds from 0 to 10 years. */
void um__hooks_set_ttl(lua_State *L, int idx, const char *what, bool *has_ttl, int64_t *ttl)
{
    if (lua_isnil(L, idx)) {
        *has_ttl = false;
        return;
    }
    lua_Number t = luaL_checknumber(L, idx);
    if (!(t >= 0 && t <= 31536000 * 10.0))
        luaL_error(L, "%s: expected seconds from 0 to 10 years", what);
    *has_ttl = true;
    *ttl = (int64_t)t;
}

void um__hooks_check_path(lua_State *L, const char *what, const char *p, size_t n)
{
    if (n == 0 || p[0] != '/' || !um__hooks_is_visible(p, n, "?#"))
        luaL_error(L, "%s: '%s' is not a path (it must start with /, without spaces, control "
                   "characters, ? or #)", what, p);
}

void um__hooks_set_host(lua_State *L, int idx, struct um_hook_request *hr, const char *what)
{
    size_t n;
    const char *h = um__hooks_check_string(L, idx, what, &n);
    if (n == 0 || !um__hooks_is_visible(h, n, "/?#@\\\"<>{}|^`"))
        luaL_error(L, "%s: '%s' is not a host", what, h);
    hr->req->authority = (um_str){um_arena_strdup(hr->arena, h, n), n};
}

int um__hooks_req_index(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    const struct um_request *req = cl->req;
    size_t n;
    const char *k = lua_tolstring(L, 2, &n);
    if (k == NULL)
        return 0;
    const struct um_hook_request *hr = cl->hr;
    switch (k[0]) {
    case 'c':
        if (strcmp(k, "client_ip") == 0)
            lua_pushstring(L, cl->client_ip ? cl->client_ip : "");
        else if (strcmp(k, "client_port") == 0)
            lua_pushinteger(L, cl->client_port);
        else if (strcmp(k, "cache_key") == 0 && hr && hr->cache_key.base)
            um__hooks_push_str(L, hr->cache_key);
        else
            lua_pushnil(L);
        return 1;
    case 'h':
        if (strcmp(k, "host") == 0) {
            /* The Host field as sent (with its port, if any). */
            um__hooks_push_str(L, req->authority);
            return 1;
        }
        if (strcmp(k, "headers") == 0)
            return um__hooks_push_headers(L, req->headers, req->num_headers);
        if (strcmp(k, "http_version") == 0) {
            /* "2", "1.1" or "1.0": the protocol the client spoke. */
            lua_pushstring(L, (req->flags & UM_REQ_F_HTTP2) ? "2"
                              : req->minor_version == 0 ? "1.0" : "1.1");
            return 1;
        }
        if (strcmp(k, "hostname") == 0) {
            /* Lower case, without the port: what host-based routing compares. */
            char name[256];
            /* (An HTTP/1.0 request without Host has no authority at all: a NULL base.) */
            um_str a = um_url_host(req->authority);
            size_t len = a.len;
            if (len > sizeof(name))
                len = sizeof(name);
            for (size_t i = 0; i < len; i++)
                name[i] = a.base[i] >= 'A' && a.base[i] <= 'Z' ? (char)(a.base[i] + 32) : a.base[i];
            lua_pushlstring(L, name, len);
            return 1;
        }
        break;
    case 'm':
        if (strcmp(k, "method") == 0) {
            um__hooks_push_str(L, req->method);
            return 1;
        }
        break;
    case 'n':
        if (strcmp(k, "no_cache") == 0) {
            lua_pushboolean(L, hr && hr->no_cache);
            return 1;
        }
        break;
    case 'p':
        if (strcmp(k, "path") == 0) {
            um__hooks_push_str(L, req->path);
            return 1;
        }
        break;
    case 'q':
        if (strcmp(k, "query") == 0) {
            if (req->flags & UM_REQ_F_HAS_QUERY)
                um__hooks_push_str(L, req->query);
            else
                lua_pushnil(L);
            return 1;
        }
        break;
    case 'r':
        if (strcmp(k, "route") == 0) {
            if (hr && hr->route && hr->route->name)
                lua_pushstring(L, hr->route->name);
            else
                lua_pushnil(L);
            return 1;
        }
        break;
    case 's':
        if (strcmp(k, "scheme") == 0) {
            lua_pushstring(L, cl->scheme ? cl->scheme : "http");
            return 1;
        }
        if (strcmp(k, "server_name") == 0) {
            if (cl->server_name)
                lua_pushstring(L, cl->server_name);
            else
                lua_pushnil(L);
            return 1;
        }
        break;
    case 't':
        if (strcmp(k, "target") == 0) {
            um__hooks_push_str(L, req->target);
            return 1;
        }
        if (strcmp(k, "ttl") == 0) {
            if (hr && hr->has_ttl)
                lua_pushnumber(L, (lua_Number)hr->ttl);
            else
                lua_pushnil(L);
            return 1;
        }
        break;
    case 'u':
        if (strcmp(k, "upstream") == 0) {
            int u = hr && hr->upstream >= 0 ? hr->upstream
                    : hr && hr->route    ? hr->route->upstream
                                         : -1;
            if (u >= 0)
                lua_pushstring(L, cl->c->upstreams[u].name);
            else
                lua_pushnil(L);
            return 1;
        }
        break;
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1)); /* the methods: header, set_header... */
    return 1;
}

int um__hooks_req_newindex(lua_State *L)
{
    const char *k = luaL_checkstring(L, 2);
    struct um_hook_request *hr = writable(L, "req");
    struct um__hook_call *cl = um__hooks_current(L);
    struct um_request *req = hr->req;
    size_t n;
    char what[64];
    snprintf(what, sizeof(what), "req.%s", k);
    if (strcmp(k, "path") == 0) {
        const char *p = um__hooks_check_string(L, 3, what, &n);
        um__hooks_check_path(L, what, p, n);
        um__hooks_set_target(hr, p, n, req->query.base, req->query.len,
                             (req->flags & UM_REQ_F_HAS_QUERY) != 0);
    } else if (strcmp(k, "query") == 0) {
        const char *q = NULL;
        n = 0;
        if (!lua_isnil(L, 3)) {
            q = um__hooks_check_string(L, 3, what, &n);
            if (!um__hooks_is_visible(q, n, "#"))
                return luaL_error(L, "%s: has a space, control character or #", what);
        }
        um__hooks_set_target(hr, req->path.base, req->path.len, q, n, q != NULL);
    } else if (strcmp(k, "host") == 0) {
        um__hooks_set_host(L, 3, hr, what);
    } else if (strcmp(k, "method") == 0) {
        const char *m = um__hooks_check_string(L, 3, what, &n);
        if (!um_http_is_token((um_str){m, n}))
            return luaL_error(L, "%s: '%s' is not a method", what, m);
        req->method = (um_str){um_arena_strdup(hr->arena, m, n), n};
        req->method_id = um_http1_method_id(m, n);
    } else if (strcmp(k, "upstream") == 0) {
        const char *u = um__hooks_check_string(L, 3, what, &n);
        int i = um_config_upstream_index(cl->c, u);
        if (i < 0)
            return luaL_error(L, "%s: no upstream is named '%s'", what, u);
        hr->upstream = i;
    } else if (strcmp(k, "route") == 0) {
        const char *r = um__hooks_check_string(L, 3, what, &n);
        int i = um_config_route_index(cl->c, r);
        if (i < 0)
            return luaL_error(L, "%s: no route is named '%s'", what, r);
        hr->route = &cl->c->routes[i];
    } else if (strcmp(k, "cache_key") == 0) {
        if (lua_isnil(L, 3)) {
            hr->cache_key = (um_str){NULL, 0};
        } else {
            const char *ck = um__hooks_check_string(L, 3, what, &n);
            if (n == 0)
                return luaL_error(L, "%s: empty", what);
            hr->cache_key = (um_str){um_arena_strdup(hr->arena, ck, n), n};
        }
    } else if (strcmp(k, "ttl") == 0) {
        um__hooks_set_ttl(L, 3, what, &hr->has_ttl, &hr->ttl);
    } else if (strcmp(k, "no_cache") == 0) {
        hr->no_cache = lua_toboolean(L, 3);
    } else {
        return luaL_error(L, "req.%s cannot be set (settable: path, query, host, method, "
                          "upstream, route, cache_key, ttl, no_cache)", k);
    }
    return 0;
}

