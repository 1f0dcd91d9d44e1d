/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the config module share: the state of one load, the error reporting
 * and the value readers (values.c), and one step per group of settings.
 *
 * config.c runs config.lua in a sandboxed Lua state and then calls the steps in order,
 * each of which reads its globals into ld->c; a step returns false after it has written
 * the message (with um_settings_fail or um_settings_fail_at). Every step and reader uses raw
 * table accesses only, so that no metamethod of the script runs during validation. The
 * readers leave the Lua stack as their comments say; a step may leave values on it (the
 * loader clears the stack between steps). */
#ifndef UMBRA_CONFIG_INTERNAL_H
#define UMBRA_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "lualines.h"
#include "umbra/config.h"
#include "umbra/settings.h"

#define MAX_WORKERS 256
#define PATH_LEN UM_SETTINGS_PATH_LEN
#define CACHE_MIN_MEMORY (1ull << 20)

/* One run of um_config_load. */
struct um_settings_load {
    const char *file;
    char *err;
    size_t errlen;
    char short_src[LUA_IDSIZE]; /* how LuaJIT names the file in its messages */
    char *dir;                  /* directory of the file, for relative roots */
    const char *src;
    size_t srclen;
    struct um__lualines lines;
    bool scanned;
    struct um_config *c;
    bool failed;
};

/* The names of the globals a file may set. config.c: Umbra's settings; hooks.c: the
 * request hooks (functions, global or per route); yunying.c: Yunying's settings. */
extern const char *const um__cfg_settings[];
extern const char *const um__cfg_hooks[];
extern const char *const um__cfg_yunying[];
/* user.c: the process's settings (user, group), which a Yunying-style file may set too. */
extern const char *const um__cfg_process[];

/* The named keys each table of settings allows (the files that read them say what they
 * mean); settings.c lists them all, with where each table sits. */
extern const char *const um__cfg_listen_keys[];     /* listen.c: listen[N] */
extern const char *const um__cfg_http2_keys[];      /* http2.c: http2 */
extern const char *const um__cfg_upstream_keys[];   /* upstreams.c: upstreams.NAME */
extern const char *const um__cfg_upstream_tls_keys[]; /* upstreams.c: upstreams.NAME.tls */
extern const char *const um__cfg_upstream_health_keys[]; /* upstreams.c: upstreams.NAME.health */
extern const char *const um__cfg_route_keys[];      /* routes.c: routes[N] */
extern const char *const um__cfg_limit_keys[];      /* limits.c: limits */
extern const char *const um__cfg_timeout_keys[];    /* limits.c: timeouts */
extern const char *const um__cfg_admin_keys[];      /* ops.c: admin */

/* Registry key (its address) of the table global name -> line of its first assignment,
 * which config.c fills while the chunk runs. */
extern const char um__cfg_global_lines_key;

/* The readers every step uses (and the modules' own readers) are umbra/settings.h's. */

/* --- shared between the steps ----------------------------------------------------------- */

/* listen.c: "HOST:PORT" into out (out->text is owned by out). */
bool um__cfg_parse_listen(struct um_settings_load *ld, lua_State *L, const char *path,
                          const char *text, struct um_listen *out);
/* listen.c: whether a listener has tls = true. */
bool um__cfg_any_tls_listener(const struct um_config *c);

/* parts.c: the modules' parts (umbra/settings.h). Whether name is a module's global, or
 * the route key of one; the modules' globals (NULL-ended, valid until the next call); the
 * step that reads them; a route's parts (idx: the route's table); freeing them all. */
bool um__cfg_is_part_global(const char *name);
bool um__cfg_is_route_key(const char *name);
const char *const *um__cfg_part_globals(void);
/* The keys a route may have: routes.c's and the modules' route keys (as part_globals). */
const char *const *um__cfg_route_keys_all(void);
bool um__cfg_load_parts(struct um_settings_load *ld, lua_State *L);
bool um__cfg_check_parts(struct um_settings_load *ld, lua_State *L); /* the last step */
bool um__cfg_load_route_parts(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                              struct um_route *r);
void um__cfg_free_parts(struct um_config *c);

/* --- the steps, in the order config.c runs them ------------------------------------------ */

bool um__cfg_load_yunying(struct um_settings_load *ld, lua_State *L);   /* yunying.c */
bool um__cfg_load_hooks(struct um_settings_load *ld, lua_State *L);     /* hooks.c */
bool um__cfg_load_listen(struct um_settings_load *ld, lua_State *L);    /* listen.c */
bool um__cfg_load_workers(struct um_settings_load *ld, lua_State *L);   /* limits.c */
bool um__cfg_load_upstreams(struct um_settings_load *ld, lua_State *L); /* upstreams.c */
bool um__cfg_load_routes(struct um_settings_load *ld, lua_State *L);    /* routes.c */
bool um__cfg_load_limits(struct um_settings_load *ld, lua_State *L);    /* limits.c */
bool um__cfg_load_timeouts(struct um_settings_load *ld, lua_State *L);  /* limits.c */
bool um__cfg_load_mime(struct um_settings_load *ld, lua_State *L);      /* mime.c */
bool um__cfg_load_log_level(struct um_settings_load *ld, lua_State *L); /* ops.c */
bool um__cfg_load_admin(struct um_settings_load *ld, lua_State *L);      /* ops.c */
bool um__cfg_load_http2(struct um_settings_load *ld, lua_State *L);      /* http2.c */
bool um__cfg_load_user(struct um_settings_load *ld, lua_State *L);       /* user.c */

#endif
