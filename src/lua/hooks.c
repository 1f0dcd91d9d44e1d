/* Request-time Lua: per-worker states and the bindings hooks see (req, res, umbra, and
 * Yunying's set_* functions).
 *
 * A state runs the config file's text again, then keeps references to the hook functions
 * it defined. The states of a snapshot are all made when the server builds its runtime
 * (umbra/runtime.h), on the main thread, so that the file's top level (its start-up work,
 * maybe file I/O) never runs in a worker's loop turn; from then on each is used by its
 * worker's thread only. The runtime's publication (the start of the worker threads, or a
 * reload's mailbox, under its lock) orders the making before the first use.
 *
 * A state is made and budgeted by the sandbox the loader uses too (umbra/luasandbox.h),
 * and restricted by it once the file has run. The req and res objects are one userdata
 * each per state; they read and change the call in progress (the state's, which the C
 * functions find through the registry), so nothing is allocated per request for them and
 * one kept past its call cannot reach freed memory. */
#include "umbra/hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/cacheorigin.h"
#include "umbra/config.h"
#include "umbra/context.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/luasandbox.h"
#include "umbra/metrics.h"

#include "internal.h"

#define RES_EXTRA_FIELDS 32

/* ---------------------------------------------------------------- arena */

struct um_arena_block {
    struct um_arena_block *next;
    size_t used, cap;
    char data[];
};

void *um_arena_alloc(struct um_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct um_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 4000 ? n : 4000;
        b = um_malloc(sizeof(*b) + cap);
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *um_arena_strdup(struct um_arena *a, const char *s, size_t n)
{
    char *p = um_arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void um_arena_reset(struct um_arena *a)
{
    struct um_arena_block *b = a->head;
    while (b) {
        struct um_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---------------------------------------------------------------- states */

struct call;

struct hstate {
    lua_State *L;
    struct call *call; /* the call in progress, or NULL */
    int on_request, on_response, upstream_set; /* registry refs, or LUA_NOREF */
    int *route_req, *route_resp;               /* per route */
    int req_ud, res_ud;
    um_str yy_host; /* Yunying: the Host upstream_set starts from */
};

/* A hook call in progress. */
struct call {
    const struct um_config *c;
    struct um_hook_request *hr; /* on_request (writable req); NULL in on_response */
    const struct um_request *req;
    const char *client_ip;
    int client_port;
    const char *scheme;
    const char *server_name;
    struct um_arena *arena;
    /* on_response */
    const struct um_response_head *in;
    struct um_hook_response *out;
    bool headers_copied;
    size_t cap_headers;
    /* Yunying */
    const char *yy_protocol, *yy_domain;
    int yy_port;
    bool yy_server_changed;
};

static const char RESPOND_KEY = 'r';
static const char STATE_KEY = 's'; /* the registry's light userdata: the struct hstate */

/* The state whose Lua code called (all of a state's coroutines share its registry). */
static struct hstate *state_of(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&STATE_KEY);
    lua_rawget(L, LUA_REGISTRYINDEX);
    struct hstate *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h;
}

bool um_hooks_enabled(const struct um_config *c)
{
    if (c->lua.on_request || c->lua.on_response || c->lua.upstream_set)
        return true;
    for (size_t i = 0; i < c->num_routes; i++)
        if (c->routes[i].on_request || c->routes[i].on_response)
            return true;
    return false;
}

bool um_hooks_want_request(const struct um_config *c, const struct um_route *route)
{
    return c->lua.on_request || c->lua.upstream_set || (route && route->on_request);
}

bool um_hooks_want_response(const struct um_config *c, const struct um_route *route)
{
    return c->lua.on_response || (route && route->on_response);
}

static struct call *current(lua_State *L)
{
    struct hstate *h = state_of(L);
    if (h == NULL || h->call == NULL)
        luaL_error(L, "request objects exist only while a hook runs");
    return h->call;
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

/* Calls the function under nargs arguments on the stack with the budget; leaves one result
 * on success. On failure logs what and the traceback (on one line) and returns false. */
static bool pcall_budget(struct hstate *h, int nargs, unsigned budget, const char *what,
                         const struct call *cl)
{
    lua_State *L = h->L;
    /* The stack holds the message handler at 1 (always), the function, its arguments. */
    int r = um_lua_sandbox_pcall(L, nargs, 1, 1, budget);
    if (r == 0)
        return true;
    um_counter_add(&um_metrics_worker()->lua_errors, 1);
    const char *msg = lua_tostring(L, -1);
    char line[2048];
    size_t n = 0;
    for (const char *p = msg ? msg : "(no message)"; *p && n + 4 < sizeof(line); p++) {
        if (*p == '\n') {
            memcpy(line + n, " | ", 3);
            n += 3;
        } else if (*p != '\t') {
            line[n++] = *p;
        }
    }
    line[n] = '\0';
    if (cl && cl->req)
        um_log_err("lua: %s failed for %.*s %.*s from %s: %s", what, (int)cl->req->method.len,
                   cl->req->method.base, (int)cl->req->target.len, cl->req->target.base,
                   cl->client_ip ? cl->client_ip : "-", line);
    else
        um_log_err("lua: %s failed: %s", what, line);
    lua_settop(L, 1);
    return false;
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
static bool is_visible(const char *s, size_t n, const char *excluded)
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

static const char *check_string(lua_State *L, int idx, const char *what, size_t *n)
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
    const char *v = check_string(L, idx, type_what, n);
    if (!is_field_value(v, *n))
        luaL_error(L, "%s: the value of %s has a control character (CR, LF, NUL...) or "
                   "surrounding spaces", what, name);
    return v;
}

/* ---------------------------------------------------------------- req */

static void push_str(lua_State *L, um_str s)
{
    lua_pushlstring(L, s.base ? s.base : "", s.len);
}

/* Pushes the value of the first field named name, or nil. */
static int push_header(lua_State *L, const struct um_header *h, size_t n, const char *name,
                       size_t nlen)
{
    for (size_t i = 0; i < n; i++)
        if (name_is(h[i].name, name, nlen)) {
            push_str(L, h[i].value);
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
            push_str(L, h[i].value);
        } else {
            lua_pushliteral(L, ", ");
            push_str(L, h[i].value);
            lua_concat(L, 3);
        }
        lua_rawset(L, -3);
    }
    return 1;
}

static int req_header(lua_State *L)
{
    struct call *cl = current(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    return push_header(L, cl->req->headers, cl->req->num_headers, name, n);
}

/* The request of an on_request (or upstream_set) call; in on_response, an error that says
 * "what: why". */
static struct um_hook_request *request_call(lua_State *L, const char *what, const char *why)
{
    struct call *cl = current(L);
    if (cl->hr == NULL)
        luaL_error(L, "%s: %s", what, why);
    return cl->hr;
}

static struct um_hook_request *writable(lua_State *L, const char *what)
{
    return request_call(L, what, "the request cannot be changed in on_response");
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
static void set_target(struct um_hook_request *hr, const char *path, size_t plen,
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

static void check_path(lua_State *L, const char *what, const char *p, size_t n)
{
    if (n == 0 || p[0] != '/' || !is_visible(p, n, "?#"))
        luaL_error(L, "%s: '%s' is not a path (it must start with /, without spaces, control "
                   "characters, ? or #)", what, p);
}

static void set_host(lua_State *L, int idx, struct um_hook_request *hr, const char *what)
{
    size_t n;
    const char *h = check_string(L, idx, what, &n);
    if (n == 0 || !is_visible(h, n, "/?#@\\\"<>{}|^`"))
        luaL_error(L, "%s: '%s' is not a host", what, h);
    hr->req->authority = (um_str){um_arena_strdup(hr->arena, h, n), n};
}

static int req_index(lua_State *L)
{
    struct call *cl = current(L);
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
            push_str(L, hr->cache_key);
        else
            lua_pushnil(L);
        return 1;
    case 'h':
        if (strcmp(k, "host") == 0) {
            /* The Host field as sent (with its port, if any). */
            push_str(L, req->authority);
            return 1;
        }
        if (strcmp(k, "headers") == 0)
            return push_headers(L, req->headers, req->num_headers);
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
            push_str(L, req->method);
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
            push_str(L, req->path);
            return 1;
        }
        break;
    case 'q':
        if (strcmp(k, "query") == 0) {
            if (req->flags & UM_REQ_F_HAS_QUERY)
                push_str(L, req->query);
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
            push_str(L, req->target);
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
    struct call *cl = current(L);
    struct um_request *req = hr->req;
    size_t n;
    char what[64];
    snprintf(what, sizeof(what), "req.%s", k);
    if (strcmp(k, "path") == 0) {
        const char *p = check_string(L, 3, what, &n);
        check_path(L, what, p, n);
        set_target(hr, p, n, req->query.base, req->query.len, (req->flags & UM_REQ_F_HAS_QUERY) != 0);
    } else if (strcmp(k, "query") == 0) {
        const char *q = NULL;
        n = 0;
        if (!lua_isnil(L, 3)) {
            q = check_string(L, 3, what, &n);
            if (!is_visible(q, n, "#"))
                return luaL_error(L, "%s: has a space, control character or #", what);
        }
        set_target(hr, req->path.base, req->path.len, q, n, q != NULL);
    } else if (strcmp(k, "host") == 0) {
        set_host(L, 3, hr, what);
    } else if (strcmp(k, "method") == 0) {
        const char *m = check_string(L, 3, what, &n);
        if (!um_http_is_token((um_str){m, n}))
            return luaL_error(L, "%s: '%s' is not a method", what, m);
        req->method = (um_str){um_arena_strdup(hr->arena, m, n), n};
        req->method_id = um_http1_method_id(m, n);
    } else if (strcmp(k, "upstream") == 0) {
        const char *u = check_string(L, 3, what, &n);
        int i = um_config_upstream_index(cl->c, u);
        if (i < 0)
            return luaL_error(L, "%s: no upstream is named '%s'", what, u);
        hr->upstream = i;
    } else if (strcmp(k, "route") == 0) {
        const char *r = check_string(L, 3, what, &n);
        int i = um_config_route_index(cl->c, r);
        if (i < 0)
            return luaL_error(L, "%s: no route is named '%s'", what, r);
        hr->route = &cl->c->routes[i];
    } else if (strcmp(k, "cache_key") == 0) {
        if (lua_isnil(L, 3)) {
            hr->cache_key = (um_str){NULL, 0};
        } else {
            const char *ck = check_string(L, 3, what, &n);
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

static struct call *response_call(lua_State *L)
{
    struct call *cl = current(L);
    if (cl->out == NULL)
        luaL_error(L, "res exists only in on_response");
    return cl;
}

static int res_header(lua_State *L)
{
    struct call *cl = response_call(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    const struct um_response_head *h = &cl->out->head;
    return push_header(L, h->headers, h->num_headers, name, n);
}

/* The head's fields, copied into the arena on the first change. */
static struct um_header *res_fields(struct call *cl)
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
    struct call *cl = response_call(L);
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

static int res_index(lua_State *L)
{
    struct call *cl = response_call(L);
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
    else
        lua_pushnil(L);
    return 1;
}

static int res_newindex(lua_State *L)
{
    struct call *cl = response_call(L);
    const char *k = luaL_checkstring(L, 2);
    struct um_response_head *h = &cl->out->head;
    if (strcmp(k, "ttl") == 0) {
        set_ttl(L, 3, "res.ttl", &h->has_ttl, &h->ttl);
    } else if (strcmp(k, "cacheable") == 0) {
        h->no_store = !lua_toboolean(L, 3);
    } else {
        return luaL_error(L, "res.%s cannot be set (settable: ttl, cacheable; fields with "
                          "res:set_header)", k);
    }
    return 0;
}

/* ---------------------------------------------------------------- umbra module */

static struct um_hook_request *answering(lua_State *L, const char *what)
{
    return request_call(L, what, "only on_request can answer");
}

/* umbra.respond(status, body, headers): answers the request without an origin. */
static int l_respond(lua_State *L)
{
    struct um_hook_request *hr = answering(L, "umbra.respond");
    lua_Integer status = luaL_checkinteger(L, 1);
    if (status < 200 || status > 599)
        return luaL_error(L, "umbra.respond: status %d is not from 200 to 599", (int)status);
    size_t blen = 0;
    const char *body = lua_isnoneornil(L, 2) ? "" : check_string(L, 2, "umbra.respond: body", &blen);
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
    if (n == 0 || !is_visible(url, n, ""))
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

/* ---------------------------------------------------------------- Yunying */

static struct um_hook_request *yy_request(lua_State *L, const char *what)
{
    return request_call(L, what, "only in upstream_set");
}

static int yy_set_path(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_path");
    size_t n;
    const char *p = check_string(L, 1, "set_path", &n);
    const char *q = memchr(p, '?', n);
    size_t plen = q ? (size_t)(q - p) : n;
    check_path(L, "set_path", p, plen);
    if (q && !is_visible(q + 1, n - plen - 1, "#"))
        luaL_error(L, "set_path: the query has a space, control character or #");
    set_target(hr, p, plen, q ? q + 1 : NULL, q ? n - plen - 1 : 0, q != NULL);
    return 0;
}

static int yy_set_method(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_method");
    size_t n;
    const char *m = check_string(L, 1, "set_method", &n);
    if (!um_http_is_token((um_str){m, n}))
        return luaL_error(L, "set_method: '%s' is not a method", m);
    hr->req->method = (um_str){um_arena_strdup(hr->arena, m, n), n};
    hr->req->method_id = um_http1_method_id(m, n);
    return 0;
}

static int yy_set_host(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_host");
    set_host(L, 1, hr, "set_host");
    return 0;
}

static int yy_set_body(lua_State *L)
{
    struct um_hook_request *hr = yy_request(L, "set_body");
    size_t n;
    const char *b = check_string(L, 1, "set_body", &n);
    hr->has_body = true;
    hr->body = (um_str){um_arena_strdup(hr->arena, b, n), n};
    return 0;
}

static int yy_set_domain(lua_State *L)
{
    yy_request(L, "set_upstream_domain");
    size_t n;
    const char *d = check_string(L, 1, "set_upstream_domain", &n);
    if (n == 0 || !is_visible(d, n, "/?#@\\\"<>{}|^`:"))
        return luaL_error(L, "set_upstream_domain: '%s' is not a host name or address", d);
    struct call *cl = current(L);
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
    struct call *cl = current(L);
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
    struct call *cl = current(L);
    cl->yy_protocol = p[4] ? "https" : "http";
    cl->yy_server_changed = true;
    return 0;
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

static int ref_global_function(lua_State *L, const char *name)
{
    lua_getfield(L, LUA_GLOBALSINDEX, name);
    if (lua_type(L, -1) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

static void state_free(struct hstate *h)
{
    if (h == NULL)
        return;
    if (h->L)
        lua_close(h->L);
    free(h->route_req);
    free(h->route_resp);
    free(h);
}

/* Writes the error value on top of L as "FILE:LINE: message (...)", as the loader reports
 * its errors: LuaJIT names the chunk by its short source (long paths abbreviated to
 * "...tail"), which short_src is; the file's own name goes back in its place. */
static void format_load_error(lua_State *L, const struct um_config *c, const char *short_src,
                              int worker, char *err, size_t errlen)
{
    int t = lua_type(L, -1);
    char other[64];
    const char *msg = other;
    if (t == LUA_TSTRING || t == LUA_TNUMBER)
        msg = lua_tostring(L, -1);
    else
        snprintf(other, sizeof other, "error (error object is a %s value)", lua_typename(L, t));
    size_t n = strlen(short_src);
    if (n > 0 && strncmp(msg, short_src, n) == 0 && msg[n] == ':')
        snprintf(err, errlen, "%s%s (in worker %d's request hooks)", c->file, msg + n, worker);
    else
        snprintf(err, errlen, "%s: %s (in worker %d's request hooks)", c->file, msg, worker);
}

/* Runs the config file's text in h's fresh state under the loader's budget. Returns false
 * with the error in err. */
static bool run_file(struct hstate *h, const struct um_config *c, int worker, char *err,
                     size_t errlen)
{
    lua_State *L = h->L;
    lua_Debug ar;
    char short_src[LUA_IDSIZE] = "";
    if (luaL_loadbuffer(L, "", 0, c->lua.chunkname) == 0 && lua_getinfo(L, ">S", &ar))
        snprintf(short_src, sizeof short_src, "%s", ar.short_src);
    lua_settop(L, 1);
    if (luaL_loadbuffer(L, c->lua.source, c->lua.source_len, c->lua.chunkname) != 0) {
        format_load_error(L, c, short_src, worker, err, errlen);
        return false;
    }
    if (um_lua_sandbox_pcall(L, 0, 0, 0, UM_LUA_LOAD_BUDGET) != 0) {
        format_load_error(L, c, short_src, worker, err, errlen);
        return false;
    }
    return true;
}

/* Makes worker's state of c: the bindings, then the file's text, then references to the
 * hooks it defined. Returns NULL with "FILE:LINE: message" in err. */
static struct hstate *state_new(const struct um_config *c, int worker, char *err,
                                size_t errlen)
{
    struct hstate *h = um_calloc(1, sizeof(*h));
    h->on_request = h->on_response = h->upstream_set = LUA_NOREF;
    h->route_req = um_calloc(c->num_routes + 1, sizeof(int));
    h->route_resp = um_calloc(c->num_routes + 1, sizeof(int));
    for (size_t i = 0; i < c->num_routes; i++)
        h->route_req[i] = h->route_resp[i] = LUA_NOREF;
    if (c->lua.yy_host)
        h->yy_host = (um_str){c->lua.yy_host, strlen(c->lua.yy_host)};
    lua_State *L = h->L = um_lua_sandbox_new();
    if (L == NULL) {
        snprintf(err, errlen, "%s: cannot create worker %d's Lua state (out of memory)",
                 c->file, worker);
        state_free(h);
        return NULL;
    }
    lua_pushlightuserdata(L, (void *)&STATE_KEY);
    lua_pushlightuserdata(L, h);
    lua_rawset(L, LUA_REGISTRYINDEX);

    static const luaL_Reg umbra[] = {{"respond", l_respond}, {"redirect", l_redirect},
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
    if (c->lua.yunying) {
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

    lua_pushcfunction(L, traceback); /* stays at 1: every call's message handler */
    if (!run_file(h, c, worker, err, errlen)) {
        state_free(h);
        return NULL;
    }
    lua_settop(L, 1);
    h->on_request = ref_global_function(L, "on_request");
    h->on_response = ref_global_function(L, "on_response");
    h->upstream_set = ref_global_function(L, "upstream_set");
    lua_getfield(L, LUA_GLOBALSINDEX, "routes");
    if (lua_istable(L, -1)) {
        for (size_t i = 0; i < c->num_routes; i++) {
            lua_rawgeti(L, -1, (int)i + 1);
            if (lua_istable(L, -1)) {
                lua_getfield(L, -1, "on_request");
                h->route_req[i] = lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX)
                                                        : (lua_pop(L, 1), LUA_NOREF);
                lua_getfield(L, -1, "on_response");
                h->route_resp[i] = lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX)
                                                         : (lua_pop(L, 1), LUA_NOREF);
            }
            lua_pop(L, 1);
        }
    }
    lua_settop(L, 1);
    um_lua_sandbox_restrict(L);
    return h;
}

struct um_hooks *um_hooks_create(const struct um_config *c, int num_workers, char *err,
                                 size_t errlen)
{
    UM_ASSERT(num_workers >= 1);
    struct um_hooks *h = um_calloc(1, sizeof(*h));
    h->config = c;
    if (!um_hooks_enabled(c))
        return h;
    h->states = um_calloc((size_t)num_workers, sizeof(*h->states));
    h->num_states = (size_t)num_workers;
    for (int w = 0; w < num_workers; w++) {
        h->states[w] = state_new(c, w, err, errlen);
        if (h->states[w] == NULL) {
            um_hooks_destroy(h);
            return NULL;
        }
    }
    return h;
}

size_t um_hooks_num_states(const struct um_hooks *h)
{
    return h->num_states;
}

/* The worker's state in h, made when h's snapshot loaded. */
static struct hstate *state_get(const struct um_context *ctx, struct um_hooks *h)
{
    int w = ctx ? ctx->worker_id : -1;
    if (w < 0 || (size_t)w >= h->num_states || h->states[w] == NULL) {
        um_log_err("lua: no request state for this worker (worker %d of %zu)", w,
                   h->num_states);
        return NULL;
    }
    return h->states[w];
}

void um_hooks_destroy(struct um_hooks *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->num_states; i++)
        state_free(h->states[i]);
    free(h->states);
    free(h);
}

/* ---------------------------------------------------------------- calls */

/* Calls the function ref with req (and res); true when it ran without error. */
static bool run(struct hstate *h, int ref, bool with_res, const char *what, struct call *cl)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->req_ud);
    if (with_res)
        lua_rawgeti(L, LUA_REGISTRYINDEX, h->res_ud);
    h->call = cl;
    bool ok = pcall_budget(h, with_res ? 2 : 1, UM_HOOK_BUDGET, what, cl);
    h->call = NULL;
    if (ok)
        lua_settop(L, 1);
    return ok;
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

static enum um_hook_result yunying(struct hstate *h, struct um_hook_request *hr, struct call *cl)
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
    push_str(L, req->target);
    push_str(L, req->method);
    push_str(L, client_host);
    /* The Host sent is upstream_host (or the server's name) unless set_host changes it. */
    req->authority = h->yy_host;
    h->call = cl;
    bool ok = pcall_budget(h, 3, UM_HOOK_BUDGET, "upstream_set", cl);
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

enum um_hook_result um_hooks_on_request(const struct um_context *ctx, struct um_hooks *hooks,
                                        struct um_hook_request *hr)
{
    const struct um_config *c = hooks->config;
    struct hstate *h = state_get(ctx, hooks);
    if (h == NULL)
        return UM_HOOK_FAIL;
    struct call cl = {.c = c,
                      .hr = hr,
                      .req = hr->req,
                      .client_ip = hr->client_ip,
                      .client_port = hr->client_port,
                      .scheme = hr->scheme,
                      .server_name = hr->server_name,
                      .arena = hr->arena};
    if (c->lua.yunying)
        return h->upstream_set != LUA_NOREF ? yunying(h, hr, &cl) : UM_HOOK_CONTINUE;
    if (h->on_request != LUA_NOREF) {
        if (!run(h, h->on_request, false, "on_request", &cl))
            return UM_HOOK_FAIL;
        if (hr->status)
            return UM_HOOK_ANSWER;
    }
    if (hr->route) {
        int ref = h->route_req[hr->route - c->routes];
        if (ref != LUA_NOREF) {
            if (!run(h, ref, false, "route on_request", &cl))
                return UM_HOOK_FAIL;
            if (hr->status)
                return UM_HOOK_ANSWER;
        }
    }
    return UM_HOOK_CONTINUE;
}

bool um_hooks_on_response(const struct um_context *ctx, struct um_hooks *hooks,
                          const struct um_route *route, const struct um_request *req,
                          const char *client_ip, const struct um_response_head *in,
                          struct um_hook_response *out)
{
    const struct um_config *c = hooks->config;
    out->head = *in;
    struct hstate *h = state_get(ctx, hooks);
    if (h == NULL)
        return false;
    struct call cl = {.c = c, .req = req, .client_ip = client_ip, .arena = out->arena,
                      .in = in, .out = out};
    if (route) {
        int ref = h->route_resp[route - c->routes];
        if (ref != LUA_NOREF && !run(h, ref, true, "route on_response", &cl))
            return false;
    }
    if (h->on_response != LUA_NOREF && !run(h, h->on_response, true, "on_response", &cl))
        return false;
    return true;
}
