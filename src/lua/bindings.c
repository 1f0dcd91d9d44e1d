/* SPDX-License-Identifier: BSD-2-Clause */
/* What hooks see: req (the request, changed in place in on_request), res (the response
 * head in on_response) and the umbra table (respond, redirect, log, now, unescape).
 *
 * req and res are one userdata each per state, reading and changing the call in progress
 * (um__hooks_current). Every value a hook sets is checked here, and an error names what
 * was wrong; the strings made live in the call's arena. */
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

#define RES_EXTRA_FIELDS 32

static const char RESPOND_KEY = 'r';

/* The state whose Lua code called (all of a state's coroutines share its registry). */
static struct um__hook_state *state_of(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&um__hooks_state_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    struct um__hook_state *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h;
}

struct um__hook_call *um__hooks_current(lua_State *L)
{
    struct um__hook_state *h = state_of(L);
    if (h == NULL || h->call == NULL)
        luaL_error(L, "request objects exist only while a hook runs");
    return h->call;
}

/* ---------------------------------------------------------------- checks */

/* A field value: no CR, LF, NUL or other control byte but HTAB; no leading or trailing
 * whitespace (it would not survive a round trip). */
static bool is_field_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return false;
    }
    return n == 0 || (s[0] != ' ' && s[0] != '\t' && s[n - 1] != ' ' && s[n - 1] != '\t');
}

/* Path, query and host text: visible ASCII and obs-text only, none of the excluded bytes. */
bool um__hooks_is_visible(const char *s, size_t n, const char *excluded)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch == 0x7f || strchr(excluded, ch) != NULL)
            return false;
    }
    return true;
}

/* A field's name is name (n bytes, which may hold a NUL: then it is no field's). */
static bool name_is(um_str field, const char *name, size_t n)
{
    return field.len == n && um_str_eq_ci(field, name);
}

/* Fields that frame the message or belong to the connection: hooks may not set them. */
static bool is_framing(const char *name, size_t n)
{
    static const char *const names[] = {"content-length", "transfer-encoding", "connection",
                                        "keep-alive",     "te",                "trailer",
                                        "upgrade",        "proxy-connection",  NULL};
    for (const char *const *p = names; *p; p++)
        if (um_str_eq_ci((um_str){name, n}, *p))
            return true;
    return false;
}

const char *um__hooks_check_string(lua_State *L, int idx, const char *what, size_t *n)
{
    if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "%s: expected a string, got %s", what, luaL_typename(L, idx));
    return lua_tolstring(L, idx, n);
}

/* The value for field name at idx: a string (or number) that is a field value, else an
 * error (type_what names what was not a string, what the field's value). */
static const char *check_value(lua_State *L, int idx, const char *type_what, const char *what,
                               const char *name, size_t *n)
{
    const char *v = um__hooks_check_string(L, idx, type_what, n);
    if (!is_field_value(v, *n))
        luaL_error(L, "%s: the value of %s has a control character (CR, LF, NUL...) or "
                   "surrounding spaces", what, name);
    return v;
}

/* ---------------------------------------------------------------- req */

void um__hooks_push_str(lua_State *L, um_str s)
{
    lua_pushlstring(L, s.base ? s.base : "", s.len);
}

/* Pushes the value of the first field named name, or nil. */
static int push_header(lua_State *L, const struct um_header *h, size_t n, const char *name,
                       size_t nlen)
{
    for (size_t i = 0; i < n; i++)
        if (name_is(h[i].name, name, nlen)) {
            um__hooks_push_str(L, h[i].value);
            return 1;
        }
    lua_pushnil(L);
    return 1;
}

/* A table of lower-case name -> value; repeated fields joined with ", ". */
static int push_headers(lua_State *L, const struct um_header *h, size_t n)
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

static int req_header(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    return push_header(L, cl->req->headers, cl->req->num_headers, name, n);
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
        if (name_is(req->headers[i].name, name, n))
            continue;
        req->headers[out++] = req->headers[i];
    }
    req->num_headers = out;
}

/* req:set_header(name, value): replaces every field of that name (value nil removes). */
static int req_set_header(lua_State *L)
{
    struct um_hook_request *hr = writable(L, "req:set_header");
    struct um_request *req = hr->req;
    size_t n, vn;
    const char *name = luaL_checklstring(L, 2, &n);
    if (!um_http_is_token((um_str){name, n}))
        return luaL_error(L, "req:set_header: bad field name '%s'", name);
    if (is_framing(name, n) || um_str_eq_ci((um_str){name, n}, "host"))
        return luaL_error(L, "req:set_header: %s cannot be set by a hook%s", name,
                          n == 4 ? " (set req.host)" : "");
    if (lua_isnoneornil(L, 3)) {
        remove_fields(req, name, n, 0);
        return 0;
    }
    const char *value = check_value(L, 3, "req:set_header", "req:set_header", name, &vn);
    um_str v = {um_arena_strdup(hr->arena, value, vn), vn};
    for (size_t i = 0; i < req->num_headers; i++)
        if (name_is(req->headers[i].name, name, n)) {
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

static int req_remove_header(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushnil(L);
    return req_set_header(L);
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
static void set_ttl(lua_State *L, int idx, const char *what, bool *has_ttl, int64_t *ttl)
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

static int req_index(lua_State *L)
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
            return push_headers(L, req->headers, req->num_headers);
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

static int req_newindex(lua_State *L)
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
        set_ttl(L, 3, what, &hr->has_ttl, &hr->ttl);
    } else if (strcmp(k, "no_cache") == 0) {
        hr->no_cache = lua_toboolean(L, 3);
    } else {
        return luaL_error(L, "req.%s cannot be set (settable: path, query, host, method, "
                          "upstream, route, cache_key, ttl, no_cache)", k);
    }
    return 0;
}

/* ---------------------------------------------------------------- res */

static struct um__hook_call *response_call(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    if (cl->out == NULL)
        luaL_error(L, "res exists only in on_response");
    return cl;
}

static int res_header(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    const struct um_response_head *h = &cl->out->head;
    return push_header(L, h->headers, h->num_headers, name, n);
}

/* The head's fields, copied into the arena on the first change. */
static struct um_header *res_fields(struct um__hook_call *cl)
{
    struct um_response_head *h = &cl->out->head;
    if (!cl->headers_copied) {
        cl->cap_headers = h->num_headers + RES_EXTRA_FIELDS;
        struct um_header *f = um_arena_alloc(cl->arena, cl->cap_headers * sizeof(*f));
        memcpy(f, h->headers, h->num_headers * sizeof(*f));
        h->headers = f;
        cl->headers_copied = true;
    }
    return (struct um_header *)h->headers;
}

static int res_set_header(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    size_t n, vn;
    const char *name = luaL_checklstring(L, 2, &n);
    if (!um_http_is_token((um_str){name, n}))
        return luaL_error(L, "res:set_header: bad field name '%s'", name);
    if (is_framing(name, n))
        return luaL_error(L, "res:set_header: %s cannot be set by a hook", name);
    const char *value = NULL;
    if (!lua_isnoneornil(L, 3)) {
        value = check_value(L, 3, "res:set_header", "res:set_header", name, &vn);
    }
    struct um_header *f = res_fields(cl);
    struct um_response_head *h = &cl->out->head;
    size_t out = 0;
    bool placed = false;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (name_is(f[i].name, name, n)) {
            if (value == NULL || placed)
                continue;
            f[i].value = (um_str){um_arena_strdup(cl->arena, value, vn), vn};
            placed = true;
        }
        f[out++] = f[i];
    }
    h->num_headers = out;
    if (value && !placed) {
        if (h->num_headers >= cl->cap_headers)
            return luaL_error(L, "res:set_header: too many fields");
        f[h->num_headers++] = (struct um_header){{um_arena_strdup(cl->arena, name, n), n},
                                                 {um_arena_strdup(cl->arena, value, vn), vn}};
    }
    return 0;
}

static int res_remove_header(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushnil(L);
    return res_set_header(L);
}

/* res.tags = { "a", "b" } (or "a b"; nil or {} for none): the surrogate keys the cache
 * tags the response with; they replace every Surrogate-Key, Cache-Tag and xkey field with
 * one Surrogate-Key. */
static int res_set_tags(lua_State *L, struct um__hook_call *cl)
{
    char buf[UM_CACHE_MAX_TAGS * (UM_CACHE_TAG_MAX_LEN + 1)];
    size_t len = 0, count = 0;
    int t = lua_type(L, 3);
    if (t != LUA_TNIL && t != LUA_TTABLE && t != LUA_TSTRING)
        return luaL_error(L, "res.tags: expected a list of strings, got %s", lua_typename(L, t));
    size_t n = t == LUA_TTABLE ? lua_objlen(L, 3) : t == LUA_TSTRING ? 1 : 0;
    for (size_t i = 1; i <= n; i++) {
        if (t == LUA_TTABLE)
            lua_rawgeti(L, 3, (int)i);
        else
            lua_pushvalue(L, 3);
        size_t sl;
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &sl) : NULL;
        if (s == NULL)
            return luaL_error(L, "res.tags[%d]: expected a string", (int)i);
        um_str parts[UM_CACHE_MAX_TAGS];
        size_t np = um_cache_split_tags((um_str){s, sl}, parts, 0, UM_CACHE_MAX_TAGS);
        for (size_t k = 0; k < np; k++) {
            for (size_t j = 0; j < parts[k].len; j++) {
                unsigned char ch = (unsigned char)parts[k].base[j];
                if (ch < 0x21 || ch == 0x7f)
                    return luaL_error(L, "res.tags: a tag has a control character");
            }
            if (parts[k].len > UM_CACHE_TAG_MAX_LEN)
                return luaL_error(L, "res.tags: a tag is longer than %d bytes",
                                  UM_CACHE_TAG_MAX_LEN);
            if (count == UM_CACHE_MAX_TAGS)
                return luaL_error(L, "res.tags: more than %d tags", UM_CACHE_MAX_TAGS);
            if (len > 0)
                buf[len++] = ' ';
            memcpy(buf + len, parts[k].base, parts[k].len);
            len += parts[k].len;
            count++;
        }
        lua_pop(L, 1);
    }
    struct um_header *f = res_fields(cl);
    struct um_response_head *h = &cl->out->head;
    size_t out = 0;
    for (size_t i = 0; i < h->num_headers; i++)
        if (!um_cache_is_tag_field(f[i].name))
            f[out++] = f[i];
    h->num_headers = out;
    if (count > 0) {
        if (h->num_headers >= cl->cap_headers)
            return luaL_error(L, "res.tags: too many fields");
        f[h->num_headers++] = (struct um_header){UM_STR("Surrogate-Key"),
                                                 {um_arena_strdup(cl->arena, buf, len), len}};
    }
    return 0;
}

static void push_tags(lua_State *L, const struct um_response_head *h)
{
    um_str tags[UM_CACHE_MAX_TAGS];
    size_t n = um_cache_response_tags(h->headers, h->num_headers, tags, UM_CACHE_MAX_TAGS);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushlstring(L, tags[i].base, tags[i].len);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

static int res_index(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    const char *k = lua_tostring(L, 2);
    if (k == NULL)
        return 0;
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1))
        return 1;
    lua_pop(L, 1);
    const struct um_response_head *h = &cl->out->head;
    if (strcmp(k, "status") == 0)
        lua_pushinteger(L, h->status);
    else if (strcmp(k, "headers") == 0)
        push_headers(L, h->headers, h->num_headers);
    else if (strcmp(k, "ttl") == 0 && h->has_ttl)
        lua_pushnumber(L, (lua_Number)h->ttl);
    else if (strcmp(k, "cacheable") == 0)
        lua_pushboolean(L, !h->no_store);
    else if (strcmp(k, "tags") == 0)
        push_tags(L, h);
    else
        lua_pushnil(L);
    return 1;
}

static int res_newindex(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    const char *k = luaL_checkstring(L, 2);
    struct um_response_head *h = &cl->out->head;
    if (strcmp(k, "ttl") == 0) {
        set_ttl(L, 3, "res.ttl", &h->has_ttl, &h->ttl);
    } else if (strcmp(k, "cacheable") == 0) {
        h->no_store = !lua_toboolean(L, 3);
    } else if (strcmp(k, "tags") == 0) {
        return res_set_tags(L, cl);
    } else {
        return luaL_error(L, "res.%s cannot be set (settable: ttl, cacheable, tags; fields "
                          "with res:set_header)", k);
    }
    return 0;
}

/* ---------------------------------------------------------------- umbra module */

static struct um_hook_request *answering(lua_State *L, const char *what)
{
    return um__hooks_request_call(L, what, "only on_request can answer");
}

/* umbra.respond(status, body, headers): answers the request without an origin. */
static int l_respond(lua_State *L)
{
    struct um_hook_request *hr = answering(L, "umbra.respond");
    lua_Integer status = luaL_checkinteger(L, 1);
    if (status < 200 || status > 599)
        return luaL_error(L, "umbra.respond: status %d is not from 200 to 599", (int)status);
    size_t blen = 0;
    const char *body =
        lua_isnoneornil(L, 2) ? "" : um__hooks_check_string(L, 2, "umbra.respond: body", &blen);
    size_t nh = 0;
    struct um_header *hs = NULL;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        size_t cap = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            cap += lua_istable(L, -1) ? lua_objlen(L, -1) : 1;
            lua_pop(L, 1);
        }
        if (cap > 64)
            return luaL_error(L, "umbra.respond: too many header fields");
        hs = um_arena_alloc(hr->arena, (cap ? cap : 1) * sizeof(*hs));
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            size_t n, vn;
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_error(L, "umbra.respond: header names must be strings");
            const char *name = lua_tolstring(L, -2, &n);
            if (!um_http_is_token((um_str){name, n}) || is_framing(name, n))
                return luaL_error(L, "umbra.respond: bad or reserved field name '%s'", name);
            bool list = lua_istable(L, -1);
            size_t count = list ? lua_objlen(L, -1) : 1;
            for (size_t i = 1; i <= count; i++) {
                if (list)
                    lua_rawgeti(L, -1, (int)i);
                const char *v =
                    check_value(L, -1, "umbra.respond: header value", "umbra.respond", name, &vn);
                hs[nh++] = (struct um_header){{um_arena_strdup(hr->arena, name, n), n},
                                              {um_arena_strdup(hr->arena, v, vn), vn}};
                if (list)
                    lua_pop(L, 1);
            }
            lua_pop(L, 1);
        }
    }
    hr->status = (int)status;
    hr->headers = hs;
    hr->num_headers = nh;
    hr->resp_body = (um_str){um_arena_strdup(hr->arena, body, blen), blen};
    lua_pushlightuserdata(L, (void *)&RESPOND_KEY);
    return 1;
}

/* umbra.early_hints({ link = "</a.css>; rel=preload; as=style" }): a 103 Early Hints
 * (RFC 8297) with these fields goes to the client before the answer (an HTTP/1.1 client;
 * others get none). A value may be a list (repeated fields); several calls add up. */
static int l_early_hints(lua_State *L)
{
    struct um_hook_request *hr =
        um__hooks_request_call(L, "umbra.early_hints", "only on_request can send early hints");
    luaL_checktype(L, 1, LUA_TTABLE);
    size_t cap = hr->num_hints;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        cap += lua_istable(L, -1) ? lua_objlen(L, -1) : 1;
        lua_pop(L, 1);
    }
    if (cap > 64)
        return luaL_error(L, "umbra.early_hints: too many fields (at most 64)");
    struct um_header *hs = um_arena_alloc(hr->arena, (cap ? cap : 1) * sizeof(*hs));
    if (hr->num_hints)
        memcpy(hs, hr->hints, hr->num_hints * sizeof(*hs));
    size_t nh = hr->num_hints;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        size_t n, vn;
        if (lua_type(L, -2) != LUA_TSTRING)
            return luaL_error(L, "umbra.early_hints: field names must be strings");
        const char *name = lua_tolstring(L, -2, &n);
        if (!um_http_is_token((um_str){name, n}) || is_framing(name, n))
            return luaL_error(L, "umbra.early_hints: bad or reserved field name '%s'", name);
        bool list = lua_istable(L, -1);
        size_t count = list ? lua_objlen(L, -1) : 1;
        for (size_t i = 1; i <= count; i++) {
            if (list)
                lua_rawgeti(L, -1, (int)i);
            const char *v = check_value(L, -1, "umbra.early_hints: field value",
                                        "umbra.early_hints", name, &vn);
            hs[nh++] = (struct um_header){{um_arena_strdup(hr->arena, name, n), n},
                                          {um_arena_strdup(hr->arena, v, vn), vn}};
            if (list)
                lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    hr->hints = hs;
    hr->num_hints = nh;
    return 0;
}

/* umbra.redirect(url, status = 302) */
static int l_redirect(lua_State *L)
{
    struct um_hook_request *hr = answering(L, "umbra.redirect");
    size_t n;
    const char *url = luaL_checklstring(L, 1, &n);
    lua_Integer status = luaL_optinteger(L, 2, 302);
    if (status != 301 && status != 302 && status != 303 && status != 307 && status != 308)
        return luaL_error(L, "umbra.redirect: status %d is not 301, 302, 303, 307 or 308",
                          (int)status);
    if (n == 0 || !um__hooks_is_visible(url, n, ""))
        return luaL_error(L, "umbra.redirect: the URL is empty or has a space or control "
                          "character");
    struct um_header *h = um_arena_alloc(hr->arena, sizeof(*h));
    *h = (struct um_header){UM_STR("Location"), {um_arena_strdup(hr->arena, url, n), n}};
    hr->status = (int)status;
    hr->headers = h;
    hr->num_headers = 1;
    hr->resp_body = (um_str){"", 0};
    lua_pushlightuserdata(L, (void *)&RESPOND_KEY);
    return 1;
}

/* umbra.log(level, ...): level is "error", "warn", "info" or "debug". */
static int l_log(lua_State *L)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
    static const enum um_log_level ids[] = {UM_LOG_ERR, UM_LOG_WARN, UM_LOG_INFO, UM_LOG_DEBUG};
    int lv = luaL_checkoption(L, 1, NULL, levels);
    if (um_log_level_get() < ids[lv])
        return 0;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int top = lua_gettop(L);
    for (int i = 2; i <= top; i++) {
        if (i > 2)
            luaL_addchar(&b, ' ');
        int t = lua_type(L, i);
        if (t == LUA_TSTRING || t == LUA_TNUMBER) {
            lua_pushvalue(L, i);
            luaL_addvalue(&b);
        } else if (t == LUA_TBOOLEAN) {
            luaL_addstring(&b, lua_toboolean(L, i) ? "true" : "false");
        } else {
            luaL_addstring(&b, lua_typename(L, t));
        }
    }
    luaL_pushresult(&b);
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    char line[1024];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < sizeof(line); i++)
        line[o++] = (msg[i] == '\n' || msg[i] == '\r') ? ' ' : msg[i];
    line[o] = '\0';
    um_log(ids[lv], "lua: %s", line);
    return 0;
}

static int l_now(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
    return 1;
}

/* umbra.unescape(s): percent-decoding ("%2F" -> "/"; a bad escape stays as it is). */
static int l_unescape(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
#define HEX(c) ((c) >= '0' && (c) <= '9' ? (c) - '0' : ((c) | 32) >= 'a' && ((c) | 32) <= 'f' ? ((c) | 32) - 'a' + 10 : -1)
        if (s[i] == '%' && i + 2 < n && (hi = HEX(s[i + 1])) >= 0 && (lo = HEX(s[i + 2])) >= 0) {
            luaL_addchar(&b, (char)(hi * 16 + lo));
            i += 2;
        } else {
            luaL_addchar(&b, s[i]);
        }
#undef HEX
    }
    luaL_pushresult(&b);
    return 1;
}

/* ---------------------------------------------------------------- state setup */

static void new_proxy(lua_State *L, const char *name, lua_CFunction index,
                      lua_CFunction newindex, const luaL_Reg *methods, int *ref)
{
    lua_newuserdata(L, 1);
    lua_createtable(L, 0, 4);
    lua_newtable(L);
    for (const luaL_Reg *m = methods; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    lua_pushcclosure(L, index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    *ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

void um__hooks_open_bindings(lua_State *L, struct um__hook_state *h, int worker)
{
    static const luaL_Reg umbra[] = {{"respond", l_respond}, {"redirect", l_redirect},
                                     {"early_hints", l_early_hints},
                                     {"log", l_log},         {"now", l_now},
                                     {"unescape", l_unescape}, {NULL, NULL}};
    lua_newtable(L);
    for (const luaL_Reg *r = umbra; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, -2, r->name);
    }
    lua_pushinteger(L, worker);
    lua_setfield(L, -2, "worker");
    lua_pushstring(L, UMBRA_VERSION);
    lua_setfield(L, -2, "version");
    lua_setfield(L, LUA_GLOBALSINDEX, "umbra");
    static const luaL_Reg req_methods[] = {{"header", req_header},
                                           {"set_header", req_set_header},
                                           {"remove_header", req_remove_header},
                                           {NULL, NULL}};
    static const luaL_Reg res_methods[] = {{"header", res_header},
                                           {"set_header", res_set_header},
                                           {"remove_header", res_remove_header},
                                           {NULL, NULL}};
    new_proxy(L, "umbra.req", req_index, req_newindex, req_methods, &h->req_ud);
    new_proxy(L, "umbra.res", res_index, res_newindex, res_methods, &h->res_ud);
}
