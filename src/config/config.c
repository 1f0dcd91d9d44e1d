/* SPDX-License-Identifier: BSD-2-Clause */
/* Loading config.lua into an immutable, reference-counted snapshot.
 *
 * The file runs once in a fresh LuaJIT state of the sandbox (umbra/luavm.h: the whole
 * standard library, JIT off, an instruction budget, so that a runaway loop ends in an
 * error instead of a hang, and a memory cap of UM_LUA_LOAD_MEMORY). Then the
 * globals it assigned are read into C structs and validated, inside lua_cpcall so that
 * even an allocation failure in the Lua state comes back as a message, and only raw table
 * accesses are used, so that no metamethod of the script runs during validation.
 *
 * Every message names the file and, whenever one applies, the line:
 * - Lua syntax and runtime errors carry "chunkname:line:" already; the chunk name is
 *   "@FILE", and the (possibly shortened) name LuaJIT prints is swapped for FILE.
 * - A bad value is reported at the line of its dotted path ("routes.2.root") as found by
 *   the line finder (lualines.c), else at the nearest ancestor it found ("routes.2", then
 *   "routes"), else at the line where the global was first assigned, which a __newindex
 *   metamethod on _G records while the chunk runs, else without a line (values.c).
 *
 * Each group of settings is read by its own step, in its own file; internal.h lists them
 * and what they share. This file holds the loader, the check that no unknown global was
 * set, and the snapshot's life (reference counts, freeing, lookups). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "internal.h"
#include "umbra/log.h"
#include "umbra/luavm.h"

#define MAX_FILE_BYTES (16u << 20)

/* The server's own; the modules' are theirs (umbra/settings.h). */
const char *const um__cfg_settings[] = {"listen", "workers",  "upstreams", "routes",
                                        "limits", "timeouts", "mime",      "log_level",
                                        "admin",  "http2",    NULL};

/* Turns the Lua error value on top of the stack into "FILE:LINE: message". */
static void fail_lua(struct um_settings_load *ld, lua_State *L)
{
    int t = lua_type(L, -1);
    if (t != LUA_TSTRING && t != LUA_TNUMBER) {
        um_settings_fail_at(ld, 0, "error (error object is a %s value)", lua_typename(L, t));
        return;
    }
    const char *msg = lua_tostring(L, -1);
    size_t n = strlen(ld->short_src);
    if (n > 0 && strncmp(msg, ld->short_src, n) == 0 && msg[n] == ':') {
        ld->failed = true;
        if (ld->err != NULL && ld->errlen > 0)
            snprintf(ld->err, ld->errlen, "%s%s", ld->file, msg + n);
        return;
    }
    um_settings_fail_at(ld, 0, "%s", msg);
}

/* Fails on the first (lowest line) global the file assigned that is neither a setting
 * nor a function (request hooks such as on_request are functions). */
static bool check_globals(struct um_settings_load *ld, lua_State *L)
{
    char *bad = NULL;
    int bad_line = INT_MAX;
    lua_pushlightuserdata(L, (void *)&um__cfg_global_lines_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    int idx = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int line = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING ||
            um_settings_in_list(um__cfg_settings, lua_tostring(L, -1)) ||
            um_settings_in_list(um__cfg_hooks, lua_tostring(L, -1)) ||
            um_settings_in_list(um__cfg_process, lua_tostring(L, -1)) ||
            um__cfg_is_part_global(lua_tostring(L, -1)) ||
            um_settings_in_list(um__cfg_yunying, lua_tostring(L, -1)))
            continue;
        lua_pushvalue(L, -1);
        lua_rawget(L, LUA_GLOBALSINDEX);
        int t = lua_type(L, -1);
        lua_pop(L, 1);
        if (t == LUA_TNIL || t == LUA_TFUNCTION)
            continue;
        const char *name = lua_tostring(L, -1);
        if (bad == NULL || line < bad_line || (line == bad_line && strcmp(name, bad) < 0)) {
            free(bad);
            bad = um_strndup(name, strlen(name));
            bad_line = line;
        }
    }
    lua_pop(L, 1);
    if (bad == NULL)
        return true;
    int line = um_settings_line_of(ld, L, bad);
    /* The lists go on the Lua stack, not into char arrays: every setting is named, however
     * many there are. */
    lua_pushstring(L, bad);
    free(bad);
    const char *name = lua_tostring(L, -1);
    const char *settings = um_settings_join(L, um__cfg_settings);
    if (um__cfg_part_globals()[0] != NULL) { /* then the modules' */
        lua_pushliteral(L, ", ");
        um_settings_join(L, um__cfg_part_globals());
        lua_concat(L, 3);
        settings = lua_tostring(L, -1);
    }
    const char *process = um_settings_join(L, um__cfg_process);
    return um_settings_fail_at(ld, line,
                               "unknown setting '%s' (settings are: %s, %s; use local for helper "
                               "variables)",
                               name, settings, process);
}

/* Reads and validates the globals, under lua_cpcall. */
static int extract(lua_State *L)
{
    struct um_settings_load *ld = lua_touserdata(L, 1);
    lua_settop(L, 0);
    static bool (*const steps[])(struct um_settings_load *, lua_State *) = {
        check_globals,        um__cfg_load_yunying,   um__cfg_load_hooks, um__cfg_load_listen,
        um__cfg_load_workers, um__cfg_load_upstreams, um__cfg_load_parts, um__cfg_load_routes,
        um__cfg_load_limits,  um__cfg_load_timeouts,  um__cfg_load_mime,  um__cfg_load_log_level,
        um__cfg_load_admin,   um__cfg_load_http2,     um__cfg_load_user,  um__cfg_check_parts,
    };
    for (size_t i = 0; i < UM_NELEMS(steps); i++) {
        if (!steps[i](ld, L))
            break;
        lua_settop(L, 0);
    }
    return 0;
}

/* __newindex of _G while the chunk runs: records where each global is first assigned. */
static int on_newindex(lua_State *L)
{
    lua_Debug ar;
    if (lua_type(L, 2) == LUA_TSTRING && lua_getstack(L, 1, &ar) &&
        lua_getinfo(L, "l", &ar) && ar.currentline > 0) {
        lua_pushvalue(L, 2);
        lua_pushinteger(L, ar.currentline);
        lua_rawset(L, lua_upvalueindex(1));
    }
    lua_settop(L, 3);
    lua_rawset(L, 1);
    return 0;
}

static char *read_file(const char *file, size_t *len, int *err)
{
    FILE *f = fopen(file, "rb");
    if (f == NULL) {
        *err = errno;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = um_malloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(buf);
                fclose(f);
                *err = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = um_realloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                *err = errno ? errno : EIO;
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* The directory of file, absolute when it can be resolved, so that messages about relative
 * roots show where they were looked for. */
static char *dir_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    char *dir;
    if (slash == NULL)
        dir = um_strndup(".", 1);
    else if (slash == file)
        dir = um_strndup("/", 1);
    else
        dir = um_strndup(file, (size_t)(slash - file));
    char *real = realpath(dir, NULL);
    if (real == NULL)
        return dir;
    free(dir);
    return real;
}

static void config_free(struct um_config *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->num_listen; i++) {
        free(c->listen[i].text);
        free(c->listen[i].proxy_from);
    }
    free(c->listen);
    for (size_t i = 0; i < c->num_routes; i++) {
        struct um_route *r = &c->routes[i];
        free(r->host);
        free(r->path);
        free(r->root);
        free(r->index);
        free(r->name);
        free(r->cgi);
    }
    um__cfg_free_parts(c);
    free(c->routes);
    free(c->lua.source);
    free(c->lua.chunkname);
    free(c->lua.yy_protocol);
    free(c->lua.yy_domain);
    free(c->lua.yy_host);
    for (size_t i = 0; i < c->num_upstreams; i++) {
        struct um_upstream_conf *u = &c->upstreams[i];
        for (size_t j = 0; j < u->num_servers; j++)
            free(u->servers[j].url);
        free(u->servers);
        free(u->name);
        free(u->host);
        free(u->tls_ca);
        free(u->health_path);
    }
    free(c->upstreams);
    for (size_t i = 0; i < c->num_mime; i++) {
        free(c->mime[i].ext);
        free(c->mime[i].type);
    }
    free(c->mime);
    free(c->admin.listen.text);
    free(c->admin.allow);
    free(c->user.name);
    free(c->pid_file);
    free(c->user.group);
    free(c->file);
    free(c);
}

struct um_config *um_config_load(const char *file, char *err, size_t errlen)
{
    struct um_settings_load ld;
    memset(&ld, 0, sizeof ld);
    ld.file = file;
    ld.err = err;
    ld.errlen = errlen;
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    lua_State *L = NULL;
    struct um_config *c = NULL;
    char *chunkname = NULL;
    lua_Debug ar;
    size_t fl = strlen(file);
    int e = 0;
    char *src = read_file(file, &ld.srclen, &e);
    if (src == NULL) {
        um_settings_fail_at(&ld, 0, "cannot read the file: %s", strerror(e));
        goto out;
    }
    size_t folded_len;
    char *folded = um__lua_fold_shifts(src, ld.srclen, &folded_len);
    if (folded) {
        free(src);
        src = folded;
        ld.srclen = folded_len;
    }
    ld.src = src;
    ld.dir = dir_of(file);

    c = um_calloc(1, sizeof *c);
    ld.c = c;
    c->_refcnt = 1;
    c->file = um_strndup(file, strlen(file));
    c->limits.max_connections = 10000;
    c->limits.max_header_bytes = 16384;
    c->limits.max_body_bytes = 16u << 20;
    c->limits.max_request_line = 8192;
    c->limits.lua_memory = 64u << 20;
    c->timeouts.header = 10;
    c->timeouts.idle = 60;
    c->timeouts.send = 30;
    c->timeouts.shutdown = 10;
    c->timeouts.tunnel = 3600;
    c->http2.max_concurrent_streams = 128;
    c->http2.initial_window = 1u << 20;
    c->http2.max_header_list = 64u << 10;
    c->log_level = UM_LOG_INFO;

    L = um_lua_sandbox_new(UM_LUA_SANDBOX_FULL, UM_LUA_LOAD_MEMORY);
    if (L == NULL) {
        um_settings_fail_at(&ld, 0, "cannot create a Lua state (out of memory)");
        goto out;
    }

    chunkname = um_malloc(fl + 2);
    chunkname[0] = '@';
    memcpy(chunkname + 1, file, fl + 1);

    /* Learn how LuaJIT abbreviates the chunk name in messages (long paths become
     * "...tail"), to put the full file name back in their place. */
    if (luaL_loadbuffer(L, "", 0, chunkname) == 0 && lua_getinfo(L, ">S", &ar))
        snprintf(ld.short_src, sizeof ld.short_src, "%s", ar.short_src);
    lua_settop(L, 0);

    /* _G's metatable records the line where each global is first assigned. */
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)&um__cfg_global_lines_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, on_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, LUA_GLOBALSINDEX);
    lua_settop(L, 0);

    if (luaL_loadbufferx(L, src, ld.srclen, chunkname, "t") != 0) {
        fail_lua(&ld, L);
        goto out;
    }
    if (um_lua_sandbox_pcall(L, 0, 0, 0, UM_LUA_LOAD_BUDGET) != 0) {
        fail_lua(&ld, L);
        goto out;
    }
    /* No finalizer of the script runs while the values are read. */
    lua_gc(L, LUA_GCSTOP, 0);
    if (lua_cpcall(L, extract, &ld) != 0 && !ld.failed)
        fail_lua(&ld, L);

out:
    um_lua_sandbox_close(L);
    if (!ld.failed) {
        /* Each worker's request state runs the same text again. They are made by the
         * server (umbra/hooks.h), which knows how many workers run: a reload keeps the
         * running number, whatever the file says. */
        c->lua.source = src;
        c->lua.source_len = ld.srclen;
        c->lua.chunkname = chunkname;
        src = chunkname = NULL;
    }
    free(chunkname);
    free(src);
    free(ld.dir);
    um__lualines_dispose(&ld.lines);
    if (ld.failed) {
        config_free(ld.c);
        return NULL;
    }
    return ld.c;
}

/* The count is the one field holders change, through const pointers too: the snapshot
 * itself is heap memory that was never const, so writing it is defined. */
void um_config_ref(const struct um_config *c)
{
    int n = atomic_fetch_add_explicit((atomic_int *)&c->_refcnt, 1, memory_order_relaxed) + 1;
    UM_ASSERT(n > 1);
}

void um_config_unref(const struct um_config *c)
{
    if (c == NULL)
        return;
    int n = atomic_fetch_sub_explicit((atomic_int *)&c->_refcnt, 1, memory_order_acq_rel) - 1;
    UM_ASSERT(n >= 0);
    if (n == 0)
        config_free((struct um_config *)c);
}

int um_config_upstream_index(const struct um_config *c, const char *name)
{
    for (size_t i = 0; i < c->num_upstreams; i++)
        if (strcmp(c->upstreams[i].name, name) == 0)
            return (int)i;
    return -1;
}

int um_config_route_index(const struct um_config *c, const char *name)
{
    for (size_t i = 0; i < c->num_routes; i++)
        if (c->routes[i].name && strcmp(c->routes[i].name, name) == 0)
            return (int)i;
    return -1;
}
