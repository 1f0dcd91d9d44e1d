/* SPDX-License-Identifier: BSD-2-Clause */
/* Request-time Lua: the on_request and on_response hooks of config.lua, and Yunying's
 * upstream_set.
 *
 * Each worker runs the hooks of a configuration snapshot in its own lua_State: the states
 * of a snapshot (struct um_hooks) are made on the main thread when it loads, and are part
 * of what the server builds from it (umbra/runtime.h); once handed to the workers, a state
 * is used by its worker's thread only.
 * Every call is a protected call under an instruction budget: an error, or a script that
 * runs too long, makes the call fail (the request gets a 500) and the state stays usable. */
#ifndef UMBRA_HOOKS_H
#define UMBRA_HOOKS_H

#include "umbra/common.h"
#include "umbra/http1.h"
#include "umbra/origin.h"

struct um_config;
struct um_context;
struct um_route;
/* The request states of one snapshot, one per worker. */
struct um_hooks;
struct um_module;

/* Bump allocator for the strings a hook creates; they live until um_arena_reset. */
struct um_arena {
    struct um_arena_block *head;
};
void *um_arena_alloc(struct um_arena *a, size_t n);
/* A NUL-terminated copy of s[0..n) in the arena; s may be NULL when n is 0. */
char *um_arena_strdup(struct um_arena *a, const char *s, size_t n);
void um_arena_reset(struct um_arena *a);

/* Lua instructions one hook call may run. */
#define UM_HOOK_BUDGET 1000000

/* The request an on_request hook sees and changes. */
struct um_hook_request {
    /* In; req is changed in place (new strings in arena). */
    struct um_request *req;
    const struct um_route *route; /* NULL when no route matched; the hook may choose one */
    const char *client_ip;
    int client_port;
    const char *scheme;      /* "http" or "https" */
    const char *server_name; /* TLS SNI, or NULL */
    struct um_arena *arena;
    /* Out. */
    bool path_changed;    /* req->path (or the query) was rewritten */
    int upstream;         /* index of the upstream to use instead of the route's; -1: none */
    char *upstream_url;   /* Yunying: "scheme://host:port" to send this request to; or NULL */
    bool has_body;        /* Yunying set_body: body replaces the request's */
    um_str body;
    um_str cache_key;     /* base.len > 0: the cache key to use instead of the URL's */
    bool no_cache;        /* bypass the cache for this request */
    bool has_ttl;         /* ttl: freshness lifetime to store the response with, seconds */
    int64_t ttl;
    /* A direct answer (umbra.respond / umbra.redirect). */
    int status;           /* 0: none */
    struct um_header *headers;
    size_t num_headers;
    um_str resp_body;
    /* Early Hints (umbra.early_hints): the fields of a 103 to send before the answer, in
     * arena; NULL/0: none. */
    struct um_header *hints;
    size_t num_hints;
};

enum um_hook_result {
    UM_HOOK_CONTINUE, /* go on to the origin (maybe with changes) */
    UM_HOOK_ANSWER,   /* the hook answered: hr->status, headers, resp_body */
    UM_HOOK_FAIL,     /* the hook failed (logged with its traceback): answer 500 */
};

/* True when the snapshot has request hooks (global or on any route) or upstream_set. */
bool um_hooks_enabled(const struct um_config *c);
/* True when on_request hooks apply to requests of route (NULL: no route matched). */
bool um_hooks_want_request(const struct um_config *c, const struct um_route *route);
/* True when on_response hooks apply to responses of route. */
bool um_hooks_want_response(const struct um_config *c, const struct um_route *route);

/* Runs the global then the route's on_request (or Yunying's upstream_set) for hr, on the
 * state of h made for ctx's worker (on that worker's thread). When the hook picks another
 * route (one of h's snapshot), hr->route is changed. */
enum um_hook_result um_hooks_on_request(const struct um_context *ctx, struct um_hooks *h,
                                        struct um_hook_request *hr);

/* What an on_response hook changed. */
struct um_hook_response {
    struct um_response_head head; /* headers in arena (or the origin's when unchanged) */
    struct um_arena *arena;
};

/* Runs the route's then the global on_response for a response head, on the state of h
 * made for ctx's worker; *out is the head to use (it may be the input). req is the
 * request as sent to the origin. Returns false when the hook failed (logged): the
 * response must be replaced by a 500 / 502. */
bool um_hooks_on_response(const struct um_context *ctx, struct um_hooks *h,
                          const struct um_route *route, const struct um_request *req,
                          const char *client_ip, const struct um_response_head *in,
                          struct um_hook_response *out);

/* The origin a hooked route uses below its cache: it sends a fetch to f->backend (an
 * upstream a hook picked) or to inner, and runs the on_response hooks on the head before
 * passing it on (so that the cache stores what they made of it). inner may be NULL, for a
 * route only hooks answer: then a fetch without a backend gets a 404. Takes inner; h
 * must outlive the origin. */
struct um_origin *um_hooks_origin_create(struct um_origin *inner, struct um_hooks *h,
                                         const struct um_route *route);

/* Makes the request states of workers 0 to num_workers - 1 for c, each running the file's
 * text once (its top level included), when c has hooks; none otherwise. Call on the main
 * thread before the states are handed to any worker: the hand-over (thread start, or a
 * reload's mailbox) makes them visible to the workers. Returns NULL, with "FILE:LINE:
 * message" in err and no state left, when the file fails in a state (it sees an umbra
 * table, which the loader does not give it). c must outlive the states (the server's
 * runtime holds both). */
/* Its record (src/lua/hooks.c): a runtime's state of it is the workers' request states, a
 * struct um_hooks. */
extern const struct um_module um_lua_module;

struct um_hooks *um_hooks_create(const struct um_config *c, int num_workers, char *err,
                                 size_t errlen);

/* The number of states h has: num_workers, or 0 when its snapshot has no hooks. */
size_t um_hooks_num_states(const struct um_hooks *h);

/* Closes the states (any thread, once nothing uses them); h may be NULL. */
void um_hooks_destroy(struct um_hooks *h);

/* The Lua engine the hooks run on ("LuaJIT 2.1.0-beta3"): static text. */
const char *um_hooks_library_version(void);

#endif
