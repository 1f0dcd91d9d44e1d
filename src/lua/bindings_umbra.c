/* SPDX-License-Identifier: BSD-2-Clause */
/* The umbra table: respond, early_hints, redirect, log, now, unescape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/ascii.h"
#include "umbra/cacheorigin.h"
#include "umbra/config.h"
#include "umbra/hooks.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/luavm.h"

#include "internal.h"

static const char RESPOND_KEY = 'r';
/* ---------------------------------------------------------------- umbra module */

static struct um_hook_request *answering(lua_State *L, const char *what)
{
    return um__hooks_request_call(L, what, "only on_request can answer");
}

/* umbra.respond(status, body, headers): answers the request without an origin. */
int um__hooks_l_respond(lua_State *L)
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
            if (!um_http_is_token((um_str){name, n}) || um__hooks_is_framing(name, n))
                return luaL_error(L, "umbra.respond: bad or reserved field name '%s'", name);
            bool list = lua_istable(L, -1);
            size_t count = list ? lua_objlen(L, -1) : 1;
            for (size_t i = 1; i <= count; i++) {
                if (list)
                    lua_rawgeti(L, -1, (int)i);
                const char *v =
                    um__hooks_check_value(L, -1, "umbra.respond: header value", "umbra.respond", name, &vn);
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
int um__hooks_l_early_hints(lua_State *L)
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
        if (!um_http_is_token((um_str){name, n}) || um__hooks_is_framing(name, n))
            return luaL_error(L, "umbra.early_hints: bad or reserved field name '%s'", name);
        bool list = lua_istable(L, -1);
        size_t count = list ? lua_objlen(L, -1) : 1;
        for (size_t i = 1; i <= count; i++) {
            if (list)
                lua_rawgeti(L, -1, (int)i);
            const char *v = um__hooks_check_value(L, -1, "umbra.early_hints: field value",
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
int um__hooks_l_redirect(lua_State *L)
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
int um__hooks_l_log(lua_State *L)
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
    um_lua_log_top(L, ids[lv]);
    return 0;
}

int um__hooks_l_now(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
    return 1;
}

/* umbra.unescape(s): percent-decoding ("%2F" -> "/"; a bad escape stays as it is). */
int um__hooks_l_unescape(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        int c = um_pct_byte(s + i, n - i);
        if (c >= 0) {
            luaL_addchar(&b, (char)c);
            i += 2;
        } else {
            luaL_addchar(&b, s[i]);
        }
    }
    luaL_pushresult(&b);
    return 1;
}

