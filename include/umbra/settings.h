/* SPDX-License-Identifier: BSD-2-Clause */
/* A module's settings (its record's `settings`, umbra/module.h), and the readers every
 * settings reader uses, the loader's own and the modules'.
 *
 * The loader (src/config/) runs config.lua in a sandboxed Lua state and reads the server's
 * own settings (listen, routes, limits, timeouts, ...). A module's global (compress,
 * access_log, ...) it does not know: it calls the reader the module's record names, with
 * the global's value on the Lua stack, into the module's part of the snapshot (a struct
 * of the module's own, of `size` bytes), and the same for the key the module owns in a
 * route. So a module's settings are read, checked, documented (tests/docs) and freed by
 * the module; the loader and the snapshot name none of them.
 *
 * A reader reports a bad value with um_settings_fail (the message starts with the value's
 * dotted path, "compress.level.gzip"; the loader puts "FILE:LINE: " before it) and returns
 * false. Readers use raw table access only (no metamethod of the script runs while it is
 * read) and leave the Lua stack as they found it.
 *
 * Threads: the loader's (main thread); parts are read-only once loaded, read by any. */
#ifndef UMBRA_SETTINGS_H
#define UMBRA_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

/* Longest dotted path of a setting ("routes.2.root") messages and the line finder use. */
#define UM_SETTINGS_PATH_LEN 256
/* Modules with settings, at most. */
#define UM_SETTINGS_MAX 16

struct um_settings_load; /* one run of um_config_load */
struct um_config;
struct um_route;

/* A table of keys, for the documentation's check: "compress.level" and its keys. */
struct um_settings_table {
    const char *table;
    const char *const *keys; /* ended by NULL */
};

struct um_settings {
    const char *global; /* the global the module owns, e.g. "compress" */
    /* Where um_settings_use writes its place in the list plus one (a static of the
     * module's, 0 until then): a part is found without a search, per request. */
    unsigned *index;
    size_t size;        /* of its part */
    /* Fills part (zeroed) with what holds when the global is not set. */
    void (*defaults)(void *part);
    /* Reads the global's value (at idx; path is its name) over the defaults in part. */
    bool (*read)(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part);
    /* Frees what part owns (not part itself); NULL: nothing. */
    void (*dispose)(void *part);
    /* routes[N].KEY, or NULL. Every route gets a part of its own, a copy of the global
     * one, which read_route changes when the route sets KEY (its value at idx). A copy is
     * a memcpy: a route's part owns no memory. What it points to is the global part's
     * (its dispose frees it, after every route's part is freed). */
    const char *route_key;
    /* Or several keys of a route, ended by NULL (route_key is then NULL): read_route is
     * called for every route that sets one of them, once, with the route's table at idx
     * and the route's path ("routes.2"), and reads the keys it owns. */
    const char *const *route_keys;
    bool (*read_route)(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       void *part);
    /* Checks the part against the rest of the snapshot c (the server's settings, such as
     * the listeners), once everything is read; NULL: nothing to check. */
    bool (*check)(struct um_settings_load *ld, lua_State *L, const struct um_config *c,
                  const void *part);
    /* The tables of keys it reads, ended by {NULL}, for the documentation (the global's
     * own table first, as "compress"; nested ones as "compress.level"). */
    const struct um_settings_table *tables;
};

/* The modules' settings the loader reads, in the order the list gives (the order of their
 * parts): set once by the server (um_modules_init) before the first load. */
void um_settings_use(const struct um_settings *const *list);
/* The i-th of them, or NULL past the last. */
const struct um_settings *um_settings_registered(size_t i);

/* A module's part of snapshot c, of route r of it: never NULL for a module of the list
 * (asserts otherwise). */
const void *um_config_part(const struct um_config *c, const struct um_settings *s);
const void *um_route_part(const struct um_route *r, const struct um_settings *s);
/* Puts part (borrowed) in place of s's in a snapshot or route made by hand (tests); a
 * snapshot made by um_config_load owns its parts. */
void um_config_set_part(struct um_config *c, const struct um_settings *s, void *part);
void um_route_set_part(struct um_route *r, const struct um_settings *s, void *part);

/* --- errors (values.c) ------------------------------------------------------------------ */

/* Writes "FILE:LINE: message" (or "FILE: message" when line <= 0) into ld's buffer, marks
 * the load failed and returns false. */
__attribute__((format(printf, 3, 4))) bool um_settings_fail_at(struct um_settings_load *ld,
                                                               int line, const char *fmt, ...);
/* Reports a bad value at path (a dotted path such as "routes.2.root") at the line
 * um_settings_line_of finds for it; returns false. The message should start with the path. */
__attribute__((format(printf, 4, 5))) bool
um_settings_fail(struct um_settings_load *ld, lua_State *L, const char *path, const char *fmt, ...);
/* The line of the value at path: where the line finder placed it, else its nearest
 * ancestor, else the first assignment of its global; 0 when none is known. */
int um_settings_line_of(struct um_settings_load *ld, lua_State *L, const char *path);

/* --- names and paths (values.c) --------------------------------------------------------- */

/* Whether s is one of the NULL-terminated list. */
bool um_settings_in_list(const char *const *list, const char *s);
/* Pushes list as "a, b, c" (every entry, no size limit) on L's stack and returns it; the
 * string lives while it stays on the stack. */
const char *um_settings_join(lua_State *L, const char *const *list);
/* Describes the key at idx for a message, without converting it (lua_next-safe). */
const char *um_settings_key_text(lua_State *L, int idx, char *buf, size_t n);
/* Writes "parent.key" (or "parent.i") into buf, truncated to n bytes; returns buf. */
const char *um_settings_subpath(char *buf, size_t n, const char *parent, const char *key);
const char *um_settings_subpath_i(char *buf, size_t n, const char *parent, size_t i);
/* Lower-cases the ASCII letters of s in place. */
void um_settings_lower(char *s);

/* --- readers (values.c) ----------------------------------------------------------------- */

/* Push the global name, or t[name] of the table at idx, raw; return its type. */
int um_settings_get_global(lua_State *L, const char *name);
int um_settings_get_field(lua_State *L, int idx, const char *name);
/* Fails unless every key of the table at idx is one of allowed. */
bool um_settings_check_keys(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            const char *const *allowed);
/* Fails unless the table at idx is a list t[1..n] without holes; *n is its length. */
bool um_settings_check_list(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            size_t *n);
/* Fails unless the value at idx is a non-empty string without NUL bytes; *s lives as long
 * as the value. what describes the expected value in the message. */
bool um_settings_get_string(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            const char *what, const char **s);
/* The optional boolean `key` of the table at idx (path names it): *out is set when it is
 * there, *given (may be NULL) says whether it is; fails on a value of another type. */
bool um_settings_opt_bool(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                          const char *key, bool *out, bool *given);
/* An integer in [lo, hi] (a Lua number without fraction); false without a message. */
bool um_settings_get_integer(lua_State *L, int idx, double lo, double hi, long long *out);
/* A number of seconds greater than 0 (get_seconds) or from 0 (get_seconds0), at most a
 * year (fractions allowed). */
bool um_settings_get_seconds(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                             double *out);
bool um_settings_get_seconds0(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                              double *out);
/* A size (a number of bytes, or a string for um_config_parse_size) in [lo, hi]. */
bool um_settings_get_size(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                          uint64_t lo, uint64_t hi, uint64_t *out);
/* Resolves name against the config's folder into an absolute, existing path (a directory
 * when want_dir, else a regular file); *out is the caller's to free. */
bool um_settings_resolve_path(struct um_settings_load *ld, lua_State *L, const char *path,
                              const char *name, bool want_dir, char **out);

/* name joined to the config file's folder (absolute when that resolves); the caller's to
 * free. */
char *um_settings_dir_join(const struct um_settings_load *ld, const char *name);
/* "ADDRESS" or "ADDRESS/PREFIX" (IPv4 or IPv6) into out. */
struct um_netmask;
bool um_settings_parse_netmask(struct um_settings_load *ld, lua_State *L, const char *path,
                               const char *text, struct um_netmask *out);
/* The list of addresses or networks at idx, at path (a string is a list of one; an entry
 * listed twice is an error): *out (freed first, then made with um_calloc: the caller's to
 * free; NULL when the list is empty) and *num. */
bool um_settings_netmask_list(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                              struct um_netmask **out, size_t *num);

/* A DNS-style host name of n bytes: labels of 1 to 63 letters, digits, '-' or '_'. */
bool um_settings_is_host_name(const char *s, size_t n);

#endif
