/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the config module share: the state of one load, the error reporting
 * and the value readers (values.c), and one step per group of settings.
 *
 * config.c runs config.lua in a sandboxed Lua state and then calls the steps in order,
 * each of which reads its globals into ld->c; a step returns false after it has written
 * the message (with um__cfg_fail or um__cfg_fail_at). Every step and reader uses raw
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

#define MAX_WORKERS 256
/* Longest dotted path of a setting ("routes.2.root") that messages and the line finder
 * use. */
#define PATH_LEN 256
#define CACHE_MIN_MEMORY (1ull << 20)

/* One run of um_config_load. */
struct um__cfg_load {
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
extern const char *const um__cfg_tls_keys[];        /* listen.c: tls */
extern const char *const um__cfg_cert_keys[];       /* listen.c: tls[N] */
extern const char *const um__cfg_upstream_keys[];   /* upstreams.c: upstreams.NAME */
extern const char *const um__cfg_upstream_tls_keys[]; /* upstreams.c: upstreams.NAME.tls */
extern const char *const um__cfg_route_keys[];      /* routes.c: routes[N] */
extern const char *const um__cfg_limit_keys[];      /* limits.c: limits */
extern const char *const um__cfg_timeout_keys[];    /* limits.c: timeouts */
extern const char *const um__cfg_cache_keys[];      /* cache.c: cache */
extern const char *const um__cfg_purge_keys[];
extern const char *const um__cfg_l2_keys[];         /* cache.c: cache.l2 */
extern const char *const um__cfg_disk_keys[];       /* disk.c: cache.disk */
extern const char *const um__cfg_admin_keys[];      /* ops.c: admin */
extern const char *const um__cfg_access_log_keys[]; /* ops.c: access_log */
extern const char *const um__cfg_cgi_keys[];        /* cgi.c: cgi */
extern const char *const um__cfg_compress_keys[];   /* compress.c: compress */
extern const char *const um__cfg_compress_level_keys[]; /* compress.c: compress.level */
extern const char *const um__cfg_cluster_keys[];    /* cluster.c: cluster */

/* Registry key (its address) of the table global name -> line of its first assignment,
 * which config.c fills while the chunk runs. */
extern const char um__cfg_global_lines_key;

/* --- errors (values.c) ------------------------------------------------------------------ */

/* Writes "FILE:LINE: message" (or "FILE: message" when line <= 0) into ld's buffer, marks
 * the load failed and returns false. */
__attribute__((format(printf, 3, 4))) bool um__cfg_fail_at(struct um__cfg_load *ld, int line,
                                                          const char *fmt, ...);
/* Reports a bad value at path (a dotted path such as "routes.2.root") at the line
 * um__cfg_line_of finds for it; returns false. The message should start with the path. */
__attribute__((format(printf, 4, 5))) bool um__cfg_fail(struct um__cfg_load *ld, lua_State *L,
                                                       const char *path, const char *fmt, ...);
/* The line of the value at path: where the line finder placed it, else its nearest
 * ancestor, else the first assignment of its global; 0 when none is known. */
int um__cfg_line_of(struct um__cfg_load *ld, lua_State *L, const char *path);

/* --- names and paths (values.c) --------------------------------------------------------- */

/* Whether s is one of the NULL-terminated list. */
bool um__cfg_in_list(const char *const *list, const char *s);
/* Pushes list as "a, b, c" (every entry, no size limit) on L's stack and returns it; the
 * string lives while it stays on the stack. */
const char *um__cfg_join(lua_State *L, const char *const *list);
/* Describes the key at idx for a message, without converting it (lua_next-safe). */
const char *um__cfg_key_text(lua_State *L, int idx, char *buf, size_t n);
/* Writes "parent.key" (or "parent.i") into buf, truncated to n bytes; returns buf. */
const char *um__cfg_subpath(char *buf, size_t n, const char *parent, const char *key);
const char *um__cfg_subpath_i(char *buf, size_t n, const char *parent, size_t i);
/* Lower-cases the ASCII letters of s in place. */
void um__cfg_lower(char *s);
/* A DNS-style host name of n bytes: labels of 1 to 63 letters, digits, '-' or '_'. */
bool um__cfg_is_host_name(const char *s, size_t n);

/* --- readers (values.c) ----------------------------------------------------------------- */

/* Push the global name, or t[name] of the table at idx, raw; return its type. */
int um__cfg_get_global(lua_State *L, const char *name);
int um__cfg_get_field(lua_State *L, int idx, const char *name);
/* Fails unless every key of the table at idx is one of allowed. */
bool um__cfg_check_keys(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                        const char *const *allowed);
/* Fails unless the table at idx is a list t[1..n] without holes; *n is its length. */
bool um__cfg_check_list(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                        size_t *n);
/* Fails unless the value at idx is a non-empty string without NUL bytes; *s lives as long
 * as the value. what describes the expected value in the message. */
bool um__cfg_get_string(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                        const char *what, const char **s);
/* The optional boolean `key` of the table at idx (path names it): *out is set when it is
 * there, *given (may be NULL) says whether it is; fails on a value of another type. */
bool um__cfg_opt_bool(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                      const char *key, bool *out, bool *given);
/* An integer in [lo, hi] (a Lua number without fraction); false without a message. */
bool um__cfg_get_integer(lua_State *L, int idx, double lo, double hi, long long *out);
/* A number of seconds greater than 0 (get_seconds) or from 0 (get_seconds0), at most a
 * year (fractions allowed). */
bool um__cfg_get_seconds(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                         double *out);
bool um__cfg_get_seconds0(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                          double *out);
/* A size (a number of bytes, or a string for um_config_parse_size) in [lo, hi]. */
bool um__cfg_get_size(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                      uint64_t lo, uint64_t hi, uint64_t *out);
/* Resolves name against the config's folder into an absolute, existing path (a directory
 * when want_dir, else a regular file); *out is the caller's to free. */
char *um__cfg_dir_join(const struct um__cfg_load *ld, const char *name);
bool um__cfg_resolve_path(struct um__cfg_load *ld, lua_State *L, const char *path,
                          const char *name, bool want_dir, char **out);

/* --- shared between the steps ----------------------------------------------------------- */

/* listen.c: "HOST:PORT" into out (out->text is owned by out). */
bool um__cfg_parse_listen(struct um__cfg_load *ld, lua_State *L, const char *path,
                          const char *text, struct um_listen *out);
/* listen.c: whether a listener has tls = true. */
bool um__cfg_any_tls_listener(const struct um_config *c);
/* netmask.c: "ADDRESS" or "ADDRESS/PREFIX" into out. */
bool um__cfg_parse_netmask(struct um__cfg_load *ld, lua_State *L, const char *path,
                           const char *text, struct um_netmask *out);

/* compress.c: the built-in compress settings (off); the compress value at idx (true,
 * false or a table) over base into out. */
void um__cfg_compress_defaults(struct um_compress_conf *cc);
bool um__cfg_parse_compress(struct um__cfg_load *ld, lua_State *L, int idx, const char *path,
                            const struct um_compress_conf *base, struct um_compress_conf *out);

/* --- the steps, in the order config.c runs them ------------------------------------------ */

bool um__cfg_load_yunying(struct um__cfg_load *ld, lua_State *L);    /* yunying.c */
bool um__cfg_load_hooks(struct um__cfg_load *ld, lua_State *L);      /* hooks.c */
bool um__cfg_load_listen(struct um__cfg_load *ld, lua_State *L);     /* listen.c */
bool um__cfg_load_tls(struct um__cfg_load *ld, lua_State *L);        /* listen.c */
bool um__cfg_load_workers(struct um__cfg_load *ld, lua_State *L);    /* limits.c */
bool um__cfg_load_upstreams(struct um__cfg_load *ld, lua_State *L);  /* upstreams.c */
bool um__cfg_load_compress(struct um__cfg_load *ld, lua_State *L);   /* compress.c */
bool um__cfg_load_routes(struct um__cfg_load *ld, lua_State *L);     /* routes.c */
bool um__cfg_load_limits(struct um__cfg_load *ld, lua_State *L);     /* limits.c */
bool um__cfg_load_timeouts(struct um__cfg_load *ld, lua_State *L);   /* limits.c */
bool um__cfg_load_mime(struct um__cfg_load *ld, lua_State *L);       /* mime.c */
bool um__cfg_load_log_level(struct um__cfg_load *ld, lua_State *L);  /* ops.c */
bool um__cfg_load_cache(struct um__cfg_load *ld, lua_State *L);      /* cache.c */
/* cache.disk of the cache table at idx (disk.c). */
bool um__cfg_load_cache_disk(struct um__cfg_load *ld, lua_State *L, int idx);
bool um__cfg_load_admin(struct um__cfg_load *ld, lua_State *L);      /* ops.c */
bool um__cfg_load_http2(struct um__cfg_load *ld, lua_State *L);      /* http2.c */
bool um__cfg_load_access_log(struct um__cfg_load *ld, lua_State *L); /* ops.c */
bool um__cfg_load_cgi(struct um__cfg_load *ld, lua_State *L);        /* cgi.c */
bool um__cfg_load_cluster(struct um__cfg_load *ld, lua_State *L);    /* cluster.c */
bool um__cfg_load_user(struct um__cfg_load *ld, lua_State *L);       /* user.c */

#endif
