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
bool um__hooks_name_is(um_str field, const char *name, size_t n)
{
    return field.len == n && um_str_eq_ci(field, name);
}

/* Fields that frame the message or belong to the connection: hooks may not set them. */
bool um__hooks_is_framing(const char *name, size_t n)
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
const char *um__hooks_check_value(lua_State *L, int idx, const char *type_what, const char *what,
                               const char *name, size_t *n)
{
    const char *v = um__hooks_check_string(L, idx, type_what, n);
    if (!is_field_value(v, *n))
        luaL_error(L, "%s: the value of %s has a control character (CR, LF, NUL...) or "
                   "surrounding spaces", what, name);
    return v;
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
    static const luaL_Reg umbra[] = {{"respond", um__hooks_l_respond}, {"redirect", um__hooks_l_redirect},
                                     {"early_hints", um__hooks_l_early_hints},
                                     {"log", um__hooks_l_log},         {"now", um__hooks_l_now},
                                     {"unescape", um__hooks_l_unescape},
                                     {"limit", um__hooks_l_limit},     {NULL, NULL}};
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
    static const luaL_Reg req_methods[] = {{"header", um__hooks_req_header},
                                           {"set_header", um__hooks_req_set_header},
                                           {"remove_header", um__hooks_req_remove_header},
                                           {NULL, NULL}};
    static const luaL_Reg res_methods[] = {{"header", um__hooks_res_header},
                                           {"set_header", um__hooks_res_set_header},
                                           {"remove_header", um__hooks_res_remove_header},
                                           {NULL, NULL}};
    new_proxy(L, "umbra.req", um__hooks_req_index, um__hooks_req_newindex, req_methods, &h->req_ud);
    new_proxy(L, "umbra.res", um__hooks_res_index, um__hooks_res_newindex, res_methods, &h->res_ud);
}
