/* SPDX-License-Identifier: BSD-2-Clause */
/* The Lua sandbox, the instruction budget and the memory cap (umbra/luavm.h).
 *
 * A state's sandbox record (struct sandbox) is the user data of the allocator wrapped
 * around LuaJIT's: the count hook, which only gets the lua_State, finds it with
 * lua_getallocf, and it is freed after the state, since lua_close still frees through the
 * wrapper. The hook fires every UM_LUA_TICK instructions whether a budgeted call runs or
 * not: setting and clearing it around each call is not free in LuaJIT (the dispatch table
 * is rebuilt), so between calls it finds counting off and returns.
 *
 * The cap. Past it, an allocation is refused only inside a budgeted call, where the
 * refusal is an error the call catches: outside (the C side pushing a few values between
 * calls) a refusal would be an unprotected error, which ends the process. The first
 * allocation past the cap is let through when it fits in UM_LUA_MEMORY_RESERVE: the count
 * hook then raises the error at the script's next tick, at a line that can be named, and
 * the reserve pays for the message and its traceback; a larger one is refused at once (a
 * "not enough memory" error, which unwinds without a message handler: the call's result
 * replaces it by the cap's message, with the line note_where read when the cap was
 * passed). From then on the hook raises at every instruction, as for the budget,
 * so that a pcall in the script cannot carry on, and the call fails even if the script
 * swallowed every error. LuaJIT collects no garbage before it reports an allocation
 * failure, so garbage counts against the cap. */
#include "umbra/luavm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>

#include "pattern.h"
#include "umbra/common.h"
#include "umbra/log.h"

struct sandbox {
    lua_Alloc f; /* LuaJIT's allocator */
    void *ud;
    size_t used, cap;
    const char *cap_name; /* the setting the message names */
    lua_State *L;         /* the state of the budgeted call */
    char where[LUA_IDSIZE + 32]; /* "SOURCE:LINE: " where the cap was first passed, or "" */
    unsigned ticks, max_ticks;
    unsigned charged; /* instructions charged by C code (patterns), short of a tick */
    uintptr_t cstack_base; /* the C stack where the budgeted call began */
    bool counting; /* a budgeted call runs */
    bool every;    /* the hook fires at every instruction (a budget or the cap ran out) */
    bool over;     /* the call went past the cap */
};

/* Notes the line of the innermost Lua function running, for the cap's message when the
 * allocation is refused at once (the error then unwinds with no line). Reads the frames
 * only: LuaJIT keeps them walkable at every allocation, since one may throw. */
static void note_where(struct sandbox *sb)
{
    lua_Debug ar;
    for (int level = 0; level < 4 && lua_getstack(sb->L, level, &ar); level++) {
        if (lua_getinfo(sb->L, "Sl", &ar) && ar.currentline > 0) {
            snprintf(sb->where, sizeof sb->where, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
}

static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct sandbox *sb = ud;
    size_t old = ptr ? osize : 0;
    if (nsize > old && sb->counting) {
        size_t grow = nsize - old;
        if (sb->used + grow > sb->cap) {
            if (!sb->over)
                note_where(sb);
            sb->over = true;
            if (sb->used + grow > sb->cap + UM_LUA_MEMORY_RESERVE)
                return NULL;
        }
    }
    void *p = sb->f(sb->ud, ptr, osize, nsize);
    if (p != NULL || nsize == 0)
        sb->used = sb->used - (old < sb->used ? old : sb->used) + nsize;
    return p;
}

static struct sandbox *sandbox_of(lua_State *L)
{
    void *ud;
    lua_Alloc f = lua_getallocf(L, &ud);
    UM_ASSERT(f == sandbox_alloc);
    return ud;
}

/* "64MB", "512KB" or "1000 bytes". */
static void push_size(lua_State *L, size_t n)
{
    if (n % (1u << 20) == 0)
        lua_pushfstring(L, "%dMB", (int)(n >> 20));
    else if (n % 1024 == 0)
        lua_pushfstring(L, "%dKB", (int)(n >> 10));
    else
        lua_pushfstring(L, "%d bytes", (int)n);
}

static void push_memory_message(lua_State *L, struct sandbox *sb)
{
    lua_pushliteral(L, "Lua memory limit of ");
    push_size(L, sb->cap);
    lua_pushfstring(L, " exceeded (%s)", sb->cap_name);
    lua_concat(L, 3);
}

static void on_count(lua_State *L, lua_Debug *ar)
{
    struct sandbox *sb = sandbox_of(L);
    if (!sb->counting || (!sb->over && ++sb->ticks <= sb->max_ticks))
        return;
    /* From now on at every instruction, so that a pcall in the script cannot carry on. */
    if (!sb->every) {
        lua_sethook(L, on_count, LUA_MASKCOUNT, 1);
        sb->every = true;
    }
    /* The line the script is at (luaL_error would name its caller's: none for the file's
     * top level), so that the message reads FILE:LINE like every other. */
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        lua_pushfstring(L, "%s:%d: ", ar->short_src, ar->currentline);
    else
        lua_pushliteral(L, "");
    if (sb->over)
        push_memory_message(L, sb);
    else
        lua_pushfstring(L, "instruction budget of %d exceeded (endless loop?)",
                        (int)(sb->max_ticks * UM_LUA_TICK));
    lua_concat(L, 2);
    lua_error(L);
}

void um__lua_sandbox_charge(lua_State *L, unsigned n)
{
    struct sandbox *sb = sandbox_of(L);
    if (!sb->counting)
        return;
    sb->charged += n;
    sb->ticks += sb->charged / UM_LUA_TICK;
    sb->charged %= UM_LUA_TICK;
    if (sb->ticks <= sb->max_ticks)
        return;
    if (!sb->every) {
        lua_sethook(L, on_count, LUA_MASKCOUNT, 1);
        sb->every = true;
    }
    luaL_error(L, "instruction budget of %d exceeded (in a pattern match)",
               (int)(sb->max_ticks * UM_LUA_TICK));
}

/* ---------------------------------------------------------------- the C stack */

/* LuaJIT does not bound how deep calls from C into Lua nest (PUC Lua stops at 200): a
 * function that calls itself through string.gsub, string.format's __tostring, table.sort,
 * os.time's __index or coroutine.resume grows the C stack until the thread dies of it,
 * well before the Lua stack or the memory cap runs out. Every library function of a state
 * that calls Lua from C is wrapped in a check of how far the C stack has grown since the
 * budgeted call began (a measure, not a count, so that no error can leave it wrong). */
static void check_cstack(lua_State *L, struct sandbox *sb)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (sb->counting && sb->cstack_base > here && sb->cstack_base - here > UM_LUA_CSTACK)
        luaL_error(L, "C stack overflow (calls from C functions into Lua nested too deep)");
}

/* The function in upvalue 1, called with the arguments, after the check. */
static int cstack_guarded(lua_State *L)
{
    check_cstack(L, sandbox_of(L));
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

/* coroutine.wrap(f): the built-in one's function, guarded. */
static int guarded_wrap(lua_State *L)
{
    lua_settop(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, 1, 1);
    lua_pushcclosure(L, cstack_guarded, 1);
    return 1;
}

/* Wraps lib.name (a global table's field) in f with the original as its upvalue. */
static void guard_field(lua_State *L, const char *lib, const char *name, lua_CFunction f)
{
    lua_getfield(L, LUA_GLOBALSINDEX, lib);
    lua_getfield(L, -1, name);
    lua_pushcclosure(L, f, 1);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
}

static void guard_cstack(lua_State *L)
{
    guard_field(L, LUA_STRLIBNAME, "gsub", cstack_guarded);
    guard_field(L, LUA_STRLIBNAME, "format", cstack_guarded);
    guard_field(L, LUA_TABLIBNAME, "sort", cstack_guarded);
    guard_field(L, LUA_OSLIBNAME, "time", cstack_guarded);
    guard_field(L, LUA_COLIBNAME, "resume", cstack_guarded);
    guard_field(L, LUA_COLIBNAME, "wrap", guarded_wrap);
}

/* ---------------------------------------------------------------- the request library */

/* load and loadstring read text only: LuaJIT does not verify bytecode, and a crafted
 * binary chunk reads and writes memory at will. */
static int load_text(lua_State *L, const char *s, size_t n, const char *name)
{
    if (luaL_loadbufferx(L, s, n, name, "t") != 0) {
        lua_pushnil(L);
        lua_insert(L, -2);
        return 2;
    }
    return 1;
}

/* load(chunk [, chunkname [, mode [, env]]]): chunk a string or a function returning its
 * pieces; mode is ignored (text only). */
static int sb_load(lua_State *L)
{
    check_cstack(L, sandbox_of(L));
    const char *name = luaL_optstring(L, 2, NULL);
    int r;
    if (lua_type(L, 1) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, 1, &n);
        r = load_text(L, s, n, name ? name : s);
    } else {
        luaL_checktype(L, 1, LUA_TFUNCTION);
        luaL_Buffer b;
        lua_settop(L, 4);
        luaL_buffinit(L, &b);
        for (;;) {
            lua_pushvalue(L, 1);
            lua_call(L, 0, 1);
            if (lua_isnil(L, -1)) {
                lua_pop(L, 1);
                break;
            }
            if (!lua_isstring(L, -1))
                return luaL_error(L, "reader function must return a string");
            if (lua_objlen(L, -1) == 0) {
                lua_pop(L, 1);
                break;
            }
            luaL_addvalue(&b);
        }
        luaL_pushresult(&b);
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        r = load_text(L, s, n, name ? name : "=(load)");
    }
    if (r == 1 && lua_istable(L, 4)) {
        lua_pushvalue(L, 4);
        lua_setfenv(L, -2);
    }
    return r;
}

/* loadstring(s [, chunkname]) */
static int sb_loadstring(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return load_text(L, s, n, luaL_optstring(L, 2, s));
}

/* collectgarbage([opt [, arg]]): "collect", "count" and "step" only; "stop" would let the
 * state grow to its cap on every request after. */
static int sb_collectgarbage(lua_State *L)
{
    static const char *const opts[] = {"collect", "count", "step", NULL};
    int o = luaL_checkoption(L, 1, "collect", opts);
    switch (o) {
    case 1:
        lua_pushnumber(L, lua_gc(L, LUA_GCCOUNT, 0) + lua_gc(L, LUA_GCCOUNTB, 0) / 1024.0);
        return 1;
    case 2:
        lua_pushboolean(L, lua_gc(L, LUA_GCSTEP, (int)luaL_optinteger(L, 2, 0)));
        return 1;
    default:
        lua_pushinteger(L, lua_gc(L, LUA_GCCOLLECT, 0));
        return 1;
    }
}

/* print(...): a line in the error log at level info (stdout may be a pipe nobody reads,
 * and a write to it would block the worker). */
static int sb_print(lua_State *L)
{
    check_cstack(L, sandbox_of(L));
    int top = lua_gettop(L);
    luaL_Buffer b;
    lua_getfield(L, LUA_GLOBALSINDEX, "tostring");
    luaL_buffinit(L, &b);
    for (int i = 1; i <= top; i++) {
        lua_pushvalue(L, top + 1);
        lua_pushvalue(L, i);
        lua_call(L, 1, 1);
        if (!lua_isstring(L, -1))
            return luaL_error(L, "'tostring' must return a string to 'print'");
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    um_lua_log_top(L, UM_LOG_INFO);
    return 0;
}

void um_lua_log_top(lua_State *L, enum um_log_level level)
{
    size_t n;
    const char *msg = lua_tolstring(L, -1, &n);
    char line[1024];
    size_t o = 0;
    for (size_t i = 0; msg && i < n && o + 1 < sizeof(line); i++)
        line[o++] = (msg[i] == '\n' || msg[i] == '\r') ? ' ' : msg[i];
    line[o] = '\0';
    um_log(level, "lua: %s", line);
}

/* xpcall's message handler, guarded. LuaJIT runs a message handler before it unwinds, and
 * when the error comes from the count hook (the budget or the cap ran out), it is still
 * inside the hook, where no hook fires: a handler that loops (a Lua function, or a C one
 * that runs Lua, like a coroutine.wrap) would never be stopped. Then the handler is not
 * run: the message goes through as it is, and the call fails anyway. */
static int guarded_handler(lua_State *L)
{
    struct sandbox *sb = sandbox_of(L);
    if (sb->every) {
        lua_settop(L, 1);
        return 1;
    }
    check_cstack(L, sb);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int guard_handler(lua_State *L)
{
    lua_settop(L, 1);
    lua_pushcclosure(L, guarded_handler, 1);
    return 1;
}

/* xpcall(f, handler, ...) with the handler guarded; in Lua, so that it stays a tail call to
 * the built-in one (a coroutine may yield through it). */
static const char XPCALL[] = "local xpcall, guard = xpcall, ...\n"
                             "_G.xpcall = function(f, h, ...) return xpcall(f, guard(h), ...) end\n";

static void guard_xpcall(lua_State *L)
{
    if (luaL_loadbuffer(L, XPCALL, sizeof XPCALL - 1, "=sandbox") != 0)
        lua_error(L);
    lua_pushcfunction(L, guard_handler);
    lua_call(L, 1, 0);
}

static void open_lib(lua_State *L, lua_CFunction open, const char *name)
{
    lua_pushcfunction(L, open);
    lua_pushstring(L, name);
    lua_call(L, 1, 0);
}

/* Replaces the library table called name (global and in package.loaded's registry table)
 * by one with only the fields in keep. */
static void keep_only(lua_State *L, const char *name, const char *const *keep)
{
    lua_getfield(L, LUA_GLOBALSINDEX, name);
    lua_newtable(L);
    for (const char *const *k = keep; *k; k++) {
        lua_getfield(L, -2, *k);
        lua_setfield(L, -2, *k);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_GLOBALSINDEX, name);
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_istable(L, -1)) {
        lua_pushvalue(L, -2);
        lua_setfield(L, -2, name);
    }
    lua_pop(L, 3);
}

static int open_request_libs(lua_State *L)
{
    open_lib(L, luaopen_base, ""); /* and coroutine */
    open_lib(L, luaopen_table, LUA_TABLIBNAME);
    open_lib(L, luaopen_string, LUA_STRLIBNAME);
    open_lib(L, luaopen_math, LUA_MATHLIBNAME);
    open_lib(L, luaopen_bit, LUA_BITLIBNAME);
    open_lib(L, luaopen_os, LUA_OSLIBNAME);
    open_lib(L, luaopen_debug, LUA_DBLIBNAME);

    /* newproxy makes userdata with a __gc metamethod: LuaJIT runs finalizers with the
     * hooks off, so an endless loop in one would never end (at the latest in lua_close). */
    static const char *const gone[] = {"dofile", "loadfile", "newproxy", NULL};
    for (const char *const *g = gone; *g; g++) {
        lua_pushnil(L);
        lua_setfield(L, LUA_GLOBALSINDEX, *g);
    }
    static const luaL_Reg replaced[] = {{"load", sb_load},
                                        {"loadstring", sb_loadstring},
                                        {"collectgarbage", sb_collectgarbage},
                                        {"print", sb_print},
                                        {NULL, NULL}};
    for (const luaL_Reg *r = replaced; r->name; r++) {
        lua_pushcfunction(L, r->func);
        lua_setfield(L, LUA_GLOBALSINDEX, r->name);
    }
    lua_getfield(L, LUA_GLOBALSINDEX, LUA_STRLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    static const char *const os_keep[] = {"time", "clock", "date", "difftime", NULL};
    keep_only(L, LUA_OSLIBNAME, os_keep);
    static const char *const debug_keep[] = {"traceback", NULL}; /* for xpcall */
    keep_only(L, LUA_DBLIBNAME, debug_keep);
    um__luapattern_open(L);
    guard_xpcall(L);
    guard_cstack(L);
    return 0;
}

/* ---------------------------------------------------------------- states */

static int open_full_libs(lua_State *L)
{
    luaL_openlibs(L);
    um__luapattern_open(L);
    guard_xpcall(L);
    guard_cstack(L);
    return 0;
}

lua_State *um_lua_sandbox_new(enum um_lua_sandbox_kind kind, size_t memory)
{
    struct sandbox *sb = calloc(1, sizeof(*sb));
    if (sb == NULL)
        return NULL;
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        free(sb);
        return NULL;
    }
    if (lua_cpcall(L, kind == UM_LUA_SANDBOX_FULL ? open_full_libs : open_request_libs, NULL) !=
        0) {
        lua_close(L);
        free(sb);
        return NULL;
    }
    /* Compiled traces do not run count hooks: keep everything in the interpreter. (After
     * the libraries: luaL_openlibs's "jit" library turns the compiler on. The request
     * states never have it, so nothing turns it back on.) */
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    lua_gc(L, LUA_GCCOLLECT, 0);
    sb->f = lua_getallocf(L, &sb->ud);
    sb->used = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB, 0);
    sb->cap = memory < (1u << 20) ? (1u << 20) : memory;
    sb->cap_name = kind == UM_LUA_SANDBOX_FULL ? "the config loader's cap" : "limits.lua_memory";
    lua_setallocf(L, sandbox_alloc, sb);
    lua_sethook(L, on_count, LUA_MASKCOUNT, UM_LUA_TICK);
    return L;
}

void um_lua_sandbox_close(lua_State *L)
{
    if (L == NULL)
        return;
    struct sandbox *sb = sandbox_of(L);
    sb->counting = false;
    /* LuaJIT gives its allocator's arena back only when the state still uses it. */
    lua_setallocf(L, sb->f, sb->ud);
    lua_close(L);
    free(sb);
}

size_t um_lua_sandbox_memory(lua_State *L)
{
    return sandbox_of(L)->used;
}

int um_lua_sandbox_pcall(lua_State *L, int nargs, int nresults, int errfunc, unsigned budget)
{
    struct sandbox *sb = sandbox_of(L);
    int base = lua_gettop(L) - nargs - 1;
    sb->ticks = 0;
    sb->charged = 0;
    sb->max_ticks = budget / UM_LUA_TICK;
    sb->cstack_base = (uintptr_t)__builtin_frame_address(0);
    sb->over = false;
    sb->where[0] = '\0';
    sb->L = L;
    sb->counting = true;
    if (sb->every) {
        lua_sethook(L, on_count, LUA_MASKCOUNT, UM_LUA_TICK);
        sb->every = false;
    }
    int r = lua_pcall(L, nargs, nresults, errfunc);
    sb->counting = false;
    if (sb->over) {
        /* The script may have caught the error, or raised another: the call fails with
         * the cap's message, unless it is the message (with its line and traceback). */
        const char *msg = r == LUA_ERRRUN ? lua_tostring(L, -1) : NULL;
        if (msg == NULL || strstr(msg, "Lua memory limit") == NULL) {
            lua_settop(L, base);
            lua_pushstring(L, sb->where);
            push_memory_message(L, sb);
            lua_concat(L, 2);
        }
        r = LUA_ERRMEM;
    }
    return r;
}
