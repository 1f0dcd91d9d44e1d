/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the lua module share (hooks.c has the module's design note).
 *
 * A request state (struct um__hook_state) is one worker's lua_State with references to
 * the hook functions the file defined; the call in progress on it (struct um__hook_call)
 * is what the bindings read and change. */
#ifndef UMBRA_LUA_INTERNAL_H
#define UMBRA_LUA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

#include "umbra/config.h"
#include "umbra/hooks.h"
#include "umbra/metrics.h"

struct um__hook_call;

struct um__hook_state {
    lua_State *L;
    struct um__hook_call *call; /* the call in progress, or NULL */
    int on_request, on_response, upstream_set; /* registry refs, or LUA_NOREF */
    int *route_req, *route_resp;               /* per route */
    int req_ud, res_ud;
    um_str yy_host; /* Yunying: the Host upstream_set starts from */
    bool broken;    /* a call went past the memory cap: make the state anew */
};

/* A hook call in progress. */
struct um__hook_call {
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

/* The request states of one snapshot (umbra/hooks.h). */
struct um_hooks {
    const struct um_config *config;  /* borrowed: it outlives the states */
    struct um__hook_state **states;  /* one per worker; NULL when config has no hooks */
    size_t num_states;
};

/* --- hooks.c ------------------------------------------------------------------------------ */

/* Its address is the registry's key of a state's struct um__hook_state (light userdata). */
/* The module's counters (hooks.c): [0] errors in hooks. */
extern struct um_metric_block um__lua_counters;

extern const char um__hooks_state_key;

/* The state of ctx's worker in h, or NULL (logged) when h has none for it. */
struct um__hook_state *um__hooks_state_get(const struct um_context *ctx, struct um_hooks *h);
/* After the calls of a request on ctx's worker: a state a call broke (past its memory cap)
 * is closed and made anew. The state um__hooks_state_get gave is invalid after this. */
void um__hooks_state_done(const struct um_context *ctx, struct um_hooks *h);

/* --- calls.c ------------------------------------------------------------------------------ */

/* The message handler every call has at stack index 1: adds the traceback. */
int um__hooks_traceback(lua_State *L);

/* Calls the function under nargs arguments on the stack with the budget; leaves one result
 * on success. On failure logs what and the traceback (on one line) and returns false. */
bool um__hooks_pcall(struct um__hook_state *h, int nargs, unsigned budget, const char *what,
                     const struct um__hook_call *cl);

/* --- bindings.c --------------------------------------------------------------------------- */

/* Sets up the umbra table (with umbra.worker = worker) and the req and res userdata of h. */
void um__hooks_open_bindings(lua_State *L, struct um__hook_state *h, int worker);

/* The call in progress on L's state; a Lua error outside of one. */
struct um__hook_call *um__hooks_current(lua_State *L);
/* The request of an on_request (or upstream_set) call; in on_response, an error that says
 * "what: why". */
struct um_hook_request *um__hooks_request_call(lua_State *L, const char *what, const char *why);

/* Checked arguments: a string (or number) at idx, else an error naming what; a path (from
 * '/', visible, no '?' or '#'); visible ASCII and obs-text without the excluded bytes. */
const char *um__hooks_check_string(lua_State *L, int idx, const char *what, size_t *n);
void um__hooks_check_path(lua_State *L, const char *what, const char *p, size_t n);
bool um__hooks_is_visible(const char *s, size_t n, const char *excluded);

/* New path and query of hr's request: the target is rebuilt from them (origin-form). */
void um__hooks_set_target(struct um_hook_request *hr, const char *path, size_t plen,
                          const char *query, size_t qlen, bool has_query);
/* The host at idx becomes the request's authority (checked; an error names what). */
void um__hooks_set_host(lua_State *L, int idx, struct um_hook_request *hr, const char *what);
/* Pushes s as a Lua string ("" for a NULL base). */
void um__hooks_push_str(lua_State *L, um_str s);

/* --- bindings_limits.c ------------------------------------------------------------------- */

/* umbra.limit(name, key) */
int um__hooks_l_limit(lua_State *L);
/* Sets umbra.shared: a userdata per dictionary of c (which outlives the state). */
void um__hooks_open_shared(lua_State *L, const struct um_config *c);

/* --- yunying.c ---------------------------------------------------------------------------- */

/* Sets Yunying's set_* functions as globals. */
void um__hooks_open_yunying(lua_State *L);

/* Runs h's upstream_set for hr (a Yunying-style file). */
enum um_hook_result um__hooks_yunying(struct um__hook_state *h, struct um_hook_request *hr,
                                      struct um__hook_call *cl);

/* --- bindings_req.c, bindings_res.c, bindings_umbra.c: the tables, set up by bindings.c --- */

bool um__hooks_name_is(um_str field, const char *name, size_t n);
bool um__hooks_is_framing(const char *name, size_t n);
const char *um__hooks_check_value(lua_State *L, int idx, const char *type_what, const char *what,
                               const char *name, size_t *n);
int um__hooks_push_header(lua_State *L, const struct um_header *h, size_t n, const char *name,
                       size_t nlen);
int um__hooks_push_headers(lua_State *L, const struct um_header *h, size_t n);
int um__hooks_req_header(lua_State *L);
int um__hooks_req_set_header(lua_State *L);
int um__hooks_req_remove_header(lua_State *L);
void um__hooks_set_ttl(lua_State *L, int idx, const char *what, bool *has_ttl, int64_t *ttl);
int um__hooks_req_index(lua_State *L);
int um__hooks_req_newindex(lua_State *L);
int um__hooks_res_header(lua_State *L);
int um__hooks_res_set_header(lua_State *L);
int um__hooks_res_remove_header(lua_State *L);
int um__hooks_res_index(lua_State *L);
int um__hooks_res_newindex(lua_State *L);
int um__hooks_l_respond(lua_State *L);
int um__hooks_l_early_hints(lua_State *L);
int um__hooks_l_redirect(lua_State *L);
int um__hooks_l_log(lua_State *L);
int um__hooks_l_now(lua_State *L);
int um__hooks_l_unescape(lua_State *L);

#endif
