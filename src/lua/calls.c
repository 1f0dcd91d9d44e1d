/* SPDX-License-Identifier: BSD-2-Clause */
/* Running the hooks of a request: on_request and on_response (Yunying's upstream_set is
 * yunying.c's), each under the budget, with errors logged on one line. */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "umbra/config.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/luavm.h"
#include "umbra/metrics.h"

#include "internal.h"

int um__hooks_traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

/* Calls the function under nargs arguments on the stack with the budget; leaves one result
 * on success. On failure logs what and the traceback (on one line) and returns false. */
bool um__hooks_pcall(struct um__hook_state *h, int nargs, unsigned budget, const char *what,
                     const struct um__hook_call *cl)
{
    lua_State *L = h->L;
    /* The stack holds the message handler at 1 (always), the function, its arguments. */
    int r = um_lua_sandbox_pcall(L, nargs, 1, 1, budget);
    if (r == 0)
        return true;
    if (r == LUA_ERRMEM)
        h->broken = true;
    um_counter_add(um_metric(&um__lua_counters, 0), 1);
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
    /* The state is closed after the request's calls (um__hooks_state_done): said here, so
     * that the failure stays one line. */
    const char *anew = r == LUA_ERRMEM ? " (the worker's Lua state is made anew)" : "";
    if (cl && cl->req)
        um_log_err("lua: %s failed for %.*s %.*s from %s: %s%s", what,
                   (int)cl->req->method.len, cl->req->method.base, (int)cl->req->target.len,
                   cl->req->target.base, cl->client_ip ? cl->client_ip : "-", line, anew);
    else
        um_log_err("lua: %s failed: %s%s", what, line, anew);
    lua_settop(L, 1);
    return false;
}

/* ---------------------------------------------------------------- calls */

/* Calls the function ref with req (and res); true when it ran without error. */
static bool run(struct um__hook_state *h, int ref, bool with_res, const char *what,
                struct um__hook_call *cl)
{
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->req_ud);
    if (with_res)
        lua_rawgeti(L, LUA_REGISTRYINDEX, h->res_ud);
    h->call = cl;
    bool ok = um__hooks_pcall(h, with_res ? 2 : 1, UM_HOOK_BUDGET, what, cl);
    h->call = NULL;
    if (ok)
        lua_settop(L, 1);
    return ok;
}

static enum um_hook_result on_request(const struct um_context *ctx, struct um_hooks *hooks,
                                      struct um_hook_request *hr)
{
    const struct um_config *c = hooks->config;
    struct um__hook_state *h = um__hooks_state_get(ctx, hooks);
    if (h == NULL)
        return UM_HOOK_FAIL;
    struct um__hook_call cl = {.c = c,
                               .hr = hr,
                               .req = hr->req,
                               .client_ip = hr->client_ip,
                               .client_port = hr->client_port,
                               .scheme = hr->scheme,
                               .server_name = hr->server_name,
                               .arena = hr->arena};
    if (c->lua.yunying)
        return h->upstream_set != LUA_NOREF ? um__hooks_yunying(h, hr, &cl) : UM_HOOK_CONTINUE;
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

static bool on_response(const struct um_context *ctx, struct um_hooks *hooks,
                        const struct um_route *route, const struct um_request *req,
                        const char *client_ip, const struct um_response_head *in,
                        struct um_hook_response *out)
{
    const struct um_config *c = hooks->config;
    out->head = *in;
    /* The hook may change the fields: a serialised copy of them no longer stands. */
    out->head.wire = (um_str){NULL, 0};
    out->head.num_wire = 0;
    struct um__hook_state *h = um__hooks_state_get(ctx, hooks);
    if (h == NULL)
        return false;
    struct um__hook_call cl = {
        .c = c, .req = req, .client_ip = client_ip, .arena = out->arena, .in = in, .out = out};
    if (route) {
        int ref = h->route_resp[route - c->routes];
        if (ref != LUA_NOREF && !run(h, ref, true, "route on_response", &cl))
            return false;
    }
    if (h->on_response != LUA_NOREF && !run(h, h->on_response, true, "on_response", &cl))
        return false;
    return true;
}

enum um_hook_result um_hooks_on_request(const struct um_context *ctx, struct um_hooks *hooks,
                                        struct um_hook_request *hr)
{
    enum um_hook_result r = on_request(ctx, hooks, hr);
    um__hooks_state_done(ctx, hooks);
    return r;
}

bool um_hooks_on_response(const struct um_context *ctx, struct um_hooks *hooks,
                          const struct um_route *route, const struct um_request *req,
                          const char *client_ip, const struct um_response_head *in,
                          struct um_hook_response *out)
{
    bool ok = on_response(ctx, hooks, route, req, client_ip, in, out);
    um__hooks_state_done(ctx, hooks);
    return ok;
}
