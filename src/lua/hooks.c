/* SPDX-License-Identifier: BSD-2-Clause */
/* Request-time Lua: per-worker states and the bindings hooks see (req, res, umbra, and
 * Yunying's set_* functions).
 *
 * The module's files: this one makes and frees the states (struct um_hooks); calls.c runs
 * the hooks of a request; bindings.c is what the hooks see (req, res, the umbra table);
 * yunying.c is the Yunying compatibility (its set_* functions and upstream_set); arena.c
 * holds the strings they make. internal.h is what they share.
 *
 * A state runs the config file's text again, then keeps references to the hook functions
 * it defined. The states of a snapshot are all made when the server builds its runtime
 * (umbra/runtime.h), on the main thread, so that the file's top level (its start-up work,
 * maybe file I/O) never runs in a worker's loop turn; from then on each is used by its
 * worker's thread only. The runtime's publication (the start of the worker threads, or a
 * reload's mailbox, under its lock) orders the making before the first use.
 *
 * A state is made, budgeted and capped by the sandbox the loader uses too
 * (umbra/luavm.h), with the request library from the start: the file's top level
 * runs in it with what the hooks have, so that nothing it keeps (local df = dofile) gives
 * a hook more. A call that went past the memory cap leaves the state broken: at the end
 * of the request's calls the state is closed (its memory goes back) and made anew on the
 * worker's thread (um__hooks_state_done); its globals start over. The req and res objects are one userdata
 * each per state; they read and change the call in progress (the state's, which the C
 * functions find through the registry), so nothing is allocated per request for them and
 * one kept past its call cannot reach freed memory. */
#include "umbra/hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/config.h"
#include "umbra/context.h"
#include "umbra/log.h"
#include "umbra/luavm.h"
#include "umbra/module.h"

#include "internal.h"

static const struct um_metric_def counter_defs[] = {
    {"umbra_lua_errors_total", "counter", "Errors in Lua request hooks.", NULL},
};
struct um_metric_block um__lua_counters = {counter_defs, 1, 0};

/* The workers' request states, one runtime's (umbra/module.h): made anew at each reload,
 * since the file may have changed even when the snapshot's settings did not. */
static void *make_states(const struct um_config *now, const struct um_config *was, void *was_state,
                         int workers, char *err, size_t errlen)
{
    (void)was, (void)was_state;
    /* A trial (workers 0) runs the file in one state: every worker's would run the same. */
    return um_hooks_create(now, workers > 0 ? workers : 1, err, errlen);
}

static void drop_states(void *h)
{
    um_hooks_destroy(h);
}

const struct um_module um_lua_module = {
    .name = "lua",
    .counters = &um__lua_counters,
    .make = make_states,
    .drop = drop_states,
};

const char um__hooks_state_key = 's';

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

/* Raw accesses only, here and below: these run outside a budgeted call, where a
 * metamethod of the file's (on _G or a route table) could loop or raise unprotected. */
static void raw_field(lua_State *L, int idx, const char *name)
{
    lua_pushstring(L, name);
    lua_rawget(L, idx < 0 && idx > LUA_REGISTRYINDEX ? idx - 1 : idx);
}

static int ref_global_function(lua_State *L, const char *name)
{
    raw_field(L, LUA_GLOBALSINDEX, name);
    if (lua_type(L, -1) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        return LUA_NOREF;
    }
    return luaL_ref(L, LUA_REGISTRYINDEX);
}

static void state_free(struct um__hook_state *h)
{
    if (h == NULL)
        return;
    um_lua_sandbox_close(h->L);
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
static bool run_file(struct um__hook_state *h, const struct um_config *c, int worker, char *err,
                     size_t errlen)
{
    lua_State *L = h->L;
    lua_Debug ar;
    char short_src[LUA_IDSIZE] = "";
    if (luaL_loadbuffer(L, "", 0, c->lua.chunkname) == 0 && lua_getinfo(L, ">S", &ar))
        snprintf(short_src, sizeof short_src, "%s", ar.short_src);
    lua_settop(L, 1);
    if (luaL_loadbufferx(L, c->lua.source, c->lua.source_len, c->lua.chunkname, "t") != 0) {
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
static struct um__hook_state *state_new(const struct um_config *c, int worker, char *err,
                                        size_t errlen)
{
    struct um__hook_state *h = um_calloc(1, sizeof(*h));
    h->on_request = h->on_response = h->upstream_set = LUA_NOREF;
    h->route_req = um_calloc(c->num_routes + 1, sizeof(int));
    h->route_resp = um_calloc(c->num_routes + 1, sizeof(int));
    for (size_t i = 0; i < c->num_routes; i++)
        h->route_req[i] = h->route_resp[i] = LUA_NOREF;
    if (c->lua.yy_host)
        h->yy_host = (um_str){c->lua.yy_host, strlen(c->lua.yy_host)};
    lua_State *L = h->L = um_lua_sandbox_new(UM_LUA_SANDBOX_REQUEST, c->limits.lua_memory);
    if (L == NULL) {
        snprintf(err, errlen, "%s: cannot create worker %d's Lua state (out of memory)",
                 c->file, worker);
        state_free(h);
        return NULL;
    }
    lua_pushlightuserdata(L, (void *)&um__hooks_state_key);
    lua_pushlightuserdata(L, h);
    lua_rawset(L, LUA_REGISTRYINDEX);

    um__hooks_open_bindings(L, h, worker);
    um__hooks_open_shared(L, c);
    if (c->lua.yunying)
        um__hooks_open_yunying(L);
    lua_pushcfunction(L, um__hooks_traceback); /* stays at 1: every call's message handler */
    if (!run_file(h, c, worker, err, errlen)) {
        state_free(h);
        return NULL;
    }
    lua_settop(L, 1);
    h->on_request = ref_global_function(L, "on_request");
    h->on_response = ref_global_function(L, "on_response");
    h->upstream_set = ref_global_function(L, "upstream_set");
    raw_field(L, LUA_GLOBALSINDEX, "routes");
    if (lua_istable(L, -1)) {
        for (size_t i = 0; i < c->num_routes; i++) {
            lua_rawgeti(L, -1, (int)i + 1);
            if (lua_istable(L, -1)) {
                raw_field(L, -1, "on_request");
                h->route_req[i] = lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX)
                                                        : (lua_pop(L, 1), LUA_NOREF);
                raw_field(L, -1, "on_response");
                h->route_resp[i] = lua_isfunction(L, -1) ? luaL_ref(L, LUA_REGISTRYINDEX)
                                                         : (lua_pop(L, 1), LUA_NOREF);
            }
            lua_pop(L, 1);
        }
    }
    lua_settop(L, 1);
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

/* Makes worker w's state anew (on that worker's thread). */
static void state_remake(struct um_hooks *h, int w)
{
    char err[1024];
    h->states[w] = state_new(h->config, w, err, sizeof err);
    if (h->states[w] == NULL)
        um_log_err("lua: cannot make worker %d's request state anew: %s", w, err);
}

/* The worker's state in h, made when h's snapshot loaded (or anew after it failed). */
struct um__hook_state *um__hooks_state_get(const struct um_context *ctx, struct um_hooks *h)
{
    int w = ctx ? ctx->worker_id : -1;
    if (w < 0 || (size_t)w >= h->num_states) {
        um_log_err("lua: no request state for this worker (worker %d of %zu)", w,
                   h->num_states);
        return NULL;
    }
    if (h->states[w] == NULL)
        state_remake(h, w); /* the last try failed: try again */
    return h->states[w];
}

void um__hooks_state_done(const struct um_context *ctx, struct um_hooks *h)
{
    int w = ctx ? ctx->worker_id : -1;
    if (w < 0 || (size_t)w >= h->num_states)
        return;
    struct um__hook_state *s = h->states[w];
    if (s == NULL || !s->broken)
        return;
    /* Its data may be half-made, and what it holds is near the cap: all of it goes back,
     * and the file's top level runs again in a new state (bounded by the budget and the
     * cap, and without I/O: the request library has none). */
    state_free(s);
    h->states[w] = NULL;
    state_remake(h, w);
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
