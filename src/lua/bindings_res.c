/* SPDX-License-Identifier: BSD-2-Clause */
/* The res table: the response head an on_response hook reads and changes. */
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

/* ---------------------------------------------------------------- res */

static struct um__hook_call *response_call(lua_State *L)
{
    struct um__hook_call *cl = um__hooks_current(L);
    if (cl->out == NULL)
        luaL_error(L, "res exists only in on_response");
    return cl;
}

int um__hooks_res_header(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    size_t n;
    const char *name = luaL_checklstring(L, 2, &n);
    const struct um_response_head *h = &cl->out->head;
    return um__hooks_push_header(L, h->headers, h->num_headers, name, n);
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

int um__hooks_res_set_header(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    size_t n, vn;
    const char *name = luaL_checklstring(L, 2, &n);
    if (!um_http_is_token((um_str){name, n}))
        return luaL_error(L, "res:set_header: bad field name '%s'", name);
    if (um__hooks_is_framing(name, n))
        return luaL_error(L, "res:set_header: %s cannot be set by a hook", name);
    const char *value = NULL;
    if (!lua_isnoneornil(L, 3)) {
        value = um__hooks_check_value(L, 3, "res:set_header", "res:set_header", name, &vn);
    }
    struct um_header *f = res_fields(cl);
    struct um_response_head *h = &cl->out->head;
    size_t out = 0;
    bool placed = false;
    for (size_t i = 0; i < h->num_headers; i++) {
        if (um__hooks_name_is(f[i].name, name, n)) {
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

int um__hooks_res_remove_header(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushnil(L);
    return um__hooks_res_set_header(L);
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

int um__hooks_res_index(lua_State *L)
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
        um__hooks_push_headers(L, h->headers, h->num_headers);
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

int um__hooks_res_newindex(lua_State *L)
{
    struct um__hook_call *cl = response_call(L);
    const char *k = luaL_checkstring(L, 2);
    struct um_response_head *h = &cl->out->head;
    if (strcmp(k, "ttl") == 0) {
        um__hooks_set_ttl(L, 3, "res.ttl", &h->has_ttl, &h->ttl);
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

