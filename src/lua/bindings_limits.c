/* SPDX-License-Identifier: BSD-2-Clause */
/* umbra.limit and umbra.shared (umbra/limits.h): the rate limits and the dictionaries
 * shared by every worker, reached from a worker's Lua state.
 *
 * umbra.shared.NAME is a userdata per dictionary, made with the state from its snapshot
 * (which outlives the state, and holds a reference on the store); its methods take the
 * store's stripe lock for one operation each, and copy values in and out, so Lua never
 * holds a pointer into the store. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/limits.h"

#include "internal.h"

static const char DICT_MT[] = "umbra.shared.dict";

/* umbra.limit(name, key): true, or false and the seconds to wait. */
int um__hooks_l_limit(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    size_t nl, kl;
    const char *name = luaL_checklstring(L, 1, &nl);
    const char *key = um__hooks_check_string(L, 2, "umbra.limit: key", &kl);
    const struct um_limit_def *d = um_limits_find(cl->c, name, nl);
    if (d == NULL)
        return luaL_error(L, "umbra.limit: no rate limit '%s' in rate_limits", name);
    double wait = um_limit_take(d, (um_str){key, kl}, um_limits_now());
    if (wait <= 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushnumber(L, wait);
    return 2;
}

static struct um_store *dict_of(lua_State *L, const char *what)
{
    struct um_store **p = luaL_checkudata(L, 1, DICT_MT);
    if (*p == NULL) luaL_error(L, "%s: call it as dict:%s(...)", what, what);
    return *p;
}

static um_str key_of(lua_State *L, int idx, const char *what)
{
    size_t n;
    const char *k = um__hooks_check_string(L, idx, what, &n);
    return (um_str){k, n};
}

static double ttl_of(lua_State *L, int idx, const char *what)
{
    double t = luaL_optnumber(L, idx, 0);
    if (!(t >= 0 && t <= 366.0 * 86400 * 10))
        luaL_error(L, "%s: ttl must be a number of seconds from 0 (never expires)", what);
    return t;
}

static void value_of(lua_State *L, int idx, const char *what, struct um_shared_value *v)
{
    memset(v, 0, sizeof(*v));
    switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL: v->type = UM_SHARED_NONE; break;
    case LUA_TNUMBER: v->type = UM_SHARED_NUM; v->num = lua_tonumber(L, idx); break;
    case LUA_TBOOLEAN: v->type = UM_SHARED_BOOL; v->num = lua_toboolean(L, idx); break;
    case LUA_TSTRING: v->type = UM_SHARED_STR; v->str.base = lua_tolstring(L, idx, &v->str.len); break;
    default: luaL_error(L, "%s: a value is a string, a number or a boolean, not %s", what,
                        luaL_typename(L, idx));
    }
}

static int l_get(lua_State *L)
{
    struct um_store *s = dict_of(L, "get");
    um_str k = key_of(L, 2, "shared:get: key");
    char small[4096];
    char *buf = small;
    size_t cap = sizeof small, full = 0;
    struct um_shared_value v;
    double now = um_limits_now();
    bool found = um_shared_get(s, k, now, &v, buf, cap, &full);
    if (found && v.type == UM_SHARED_STR && full > cap) {
        /* Longer than the stack's buffer: again into one its size (the value may have
         * changed meanwhile; a longer one still is cut, the call's snapshot of it). */
        cap = full;
        buf = lua_newuserdata(L, cap);
        found = um_shared_get(s, k, now, &v, buf, cap, &full);
    }
    if (!found) {
        lua_pushnil(L);
        return 1;
    }
    switch (v.type) {
    case UM_SHARED_STR: lua_pushlstring(L, v.str.base, v.str.len); break;
    case UM_SHARED_BOOL: lua_pushboolean(L, v.num != 0); break;
    default: lua_pushnumber(L, v.num); break;
    }
    return 1;
}

static int result(lua_State *L, enum um_shared_result r)
{
    if (r == UM_SHARED_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, r == UM_SHARED_EXISTS ? "exists" : r == UM_SHARED_NOT_NUM ? "not a number" : "too big");
    return 2;
}

static int l_set(lua_State *L)
{
    struct um_store *s = dict_of(L, "set");
    um_str k = key_of(L, 2, "shared:set: key");
    struct um_shared_value v;
    value_of(L, 3, "shared:set", &v);
    double ttl = ttl_of(L, 4, "shared:set");
    return result(L, um_shared_set(s, k, &v, ttl, um_limits_now()));
}

static int l_add(lua_State *L)
{
    struct um_store *s = dict_of(L, "add");
    um_str k = key_of(L, 2, "shared:add: key");
    struct um_shared_value v;
    value_of(L, 3, "shared:add", &v);
    if (v.type == UM_SHARED_NONE) return luaL_error(L, "shared:add: a value is needed");
    double ttl = ttl_of(L, 4, "shared:add");
    return result(L, um_shared_add(s, k, &v, ttl, um_limits_now()));
}

static int l_incr(lua_State *L)
{
    struct um_store *s = dict_of(L, "incr");
    um_str k = key_of(L, 2, "shared:incr: key");
    double n = luaL_optnumber(L, 3, 1);
    double init = luaL_optnumber(L, 4, 0);
    double ttl = ttl_of(L, 5, "shared:incr");
    double out = 0;
    enum um_shared_result r = um_shared_incr(s, k, n, init, ttl, um_limits_now(), &out);
    if (r != UM_SHARED_OK) {
        lua_pushnil(L);
        lua_pushstring(L, r == UM_SHARED_NOT_NUM ? "not a number" : "too big");
        return 2;
    }
    lua_pushnumber(L, out);
    return 1;
}

static int l_delete(lua_State *L)
{
    struct um_store *s = dict_of(L, "delete");
    um_str k = key_of(L, 2, "shared:delete: key");
    lua_pushboolean(L, um_shared_delete(s, k, um_limits_now()));
    return 1;
}

/* The keys are copied into a list in C first: a Lua allocation may fail (the state's
 * memory cap) and must not do so while a stripe lock is held. */
struct keys {
    um_str *k;
    size_t n, cap;
};

static void keep_key(void *arg, um_str key)
{
    struct keys *ks = arg;
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? ks->cap * 2 : 64;
        ks->k = um_realloc(ks->k, ks->cap * sizeof(*ks->k));
    }
    ks->k[ks->n++] = (um_str){um_strndup(key.base, key.len), key.len};
}

static int l_keys(lua_State *L)
{
    struct um_store *s = dict_of(L, "keys");
    lua_Integer max = luaL_optinteger(L, 2, 1024);
    if (max < 0) return luaL_error(L, "shared:keys: max must be from 0 (every key)");
    struct keys ks = {NULL, 0, 0};
    um_shared_keys(s, (size_t)max, um_limits_now(), keep_key, &ks);
    lua_createtable(L, (int)ks.n, 0);
    for (size_t i = 0; i < ks.n; i++) {
        lua_pushlstring(L, ks.k[i].base, ks.k[i].len);
        lua_rawseti(L, -2, (int)i + 1);
    }
    for (size_t i = 0; i < ks.n; i++)
        free((void *)ks.k[i].base);
    free(ks.k);
    return 1;
}

void um__hooks_open_shared(lua_State *L, const struct um_config *c)
{
    static const luaL_Reg methods[] = {{"get", l_get},       {"set", l_set},   {"add", l_add},
                                       {"incr", l_incr},     {"delete", l_delete},
                                       {"keys", l_keys},     {NULL, NULL}};
    luaL_newmetatable(L, DICT_MT);
    lua_newtable(L);
    for (const luaL_Reg *m = methods; m->name; m++) {
        lua_pushcfunction(L, m->func);
        lua_setfield(L, -2, m->name);
    }
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, DICT_MT);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);

    lua_getfield(L, LUA_GLOBALSINDEX, "umbra");
    lua_newtable(L);
    const struct um_shared_conf *sc = um_shared_conf(c);
    for (size_t i = 0; sc && i < sc->num_dicts; i++) {
        struct um_store **p = lua_newuserdata(L, sizeof(*p));
        *p = sc->dicts[i].store;
        luaL_getmetatable(L, DICT_MT);
        lua_setmetatable(L, -2);
        lua_setfield(L, -2, sc->dicts[i].name);
    }
    lua_setfield(L, -2, "shared");
    lua_pop(L, 1);
}
