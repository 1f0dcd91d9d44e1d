/* SPDX-License-Identifier: BSD-2-Clause */
/* The Lua VM (src/luavm/): the sandbox, how every Lua state of Umbra is made, what it
 * has, how long its code may run and how much memory it may hold.
 *
 * Two kinds of state use it. The config loader's (src/config/config.c) runs config.lua
 * once with the whole standard library: the file's top level may read files to compute
 * its settings. Each worker's request state (src/lua/hooks.c) is restricted from the
 * moment it is made, before the file's text runs in it again: a function the file's top
 * level keeps (local df = dofile) can only keep what the hooks may have. Both run every
 * call under an instruction budget, so that an endless loop ends in an error instead of a
 * hang, and under a memory cap.
 *
 * The JIT compiler is off in every state, from C, and the request states have no way to
 * turn it on (no jit library, no require): compiled traces do not run count hooks, and the
 * budget must stop any loop. What runs in C without the hook is covered otherwise: pattern
 * matching (string.find, match, gmatch, gsub) is Umbra's own, which charges its steps to
 * the budget (src/luavm/pattern.c); C functions that call Lua are bounded in how deep
 * they nest (UM_LUA_CSTACK); xpcall's message handler does not run when the budget raised
 * the error (LuaJIT runs it inside the hook, where no hook fires); and no finalizer can
 * be made (no newproxy), since LuaJIT runs those with the hooks off.
 *
 * The memory cap is an allocator wrapped around LuaJIT's own (lua_getallocf and
 * lua_setallocf, which work whether LuaJIT is built with GC64 or not, and keep its fast
 * allocator): every byte the state asks for is counted, and an allocation that would pass
 * the cap is refused, inside a budgeted call, so the cap is exact to the byte for what
 * LuaJIT allocates (not counting the allocator's own overhead). Garbage not collected yet
 * counts: a script's live data should stay well under the cap. */
#ifndef UMBRA_LUAVM_H
#define UMBRA_LUAVM_H

#include <stddef.h>

#include <lua.h>

#include "umbra/log.h"

/* Instructions the file's top level may run, in the loader and in each request state. A
 * real config runs a few thousand; an endless loop reaches this in a few tens of
 * milliseconds. */
#define UM_LUA_LOAD_BUDGET 10000000

/* Instructions between two looks at the budget (a budget is counted in these). */
#define UM_LUA_TICK 1000

/* The memory cap of the loader's state (limits.lua_memory is not known before the file has
 * run), and so the largest limits.lua_memory: the request states run the same top level. */
#define UM_LUA_LOAD_MEMORY (1024ull << 20)

/* Bytes past the cap a call that ran over it may still take, so that its error (and the
 * traceback a message handler writes) can be made. */
#define UM_LUA_MEMORY_RESERVE (1u << 20)

/* How far the C stack may grow in a budgeted call through library functions that call Lua
 * from C (string.gsub, table.sort, ...: src/luavm/sandbox.c); past it they raise "C stack
 * overflow". Well under the smallest thread stack Umbra runs Lua on (glibc's default,
 * RLIMIT_STACK: 8 MB on Debian). */
#define UM_LUA_CSTACK (512u << 10)

enum um_lua_sandbox_kind {
    /* The whole standard library (the loader). */
    UM_LUA_SANDBOX_FULL,
    /* What request-time code may have: base (without dofile, loadfile and newproxy; load
     * and loadstring take text only; collectgarbage only "count", "collect" and "step";
     * print writes to the error log), coroutine, string (without dump), table, math, bit,
     * os.time, os.clock, os.date, os.difftime and debug.traceback. No io, package, require,
     * module, jit, ffi or the rest of os and debug: hooks must never block the worker, run
     * other processes or files, or lift the budget (debug.sethook, jit.on), and LuaJIT
     * does not verify bytecode. */
    UM_LUA_SANDBOX_REQUEST,
};

/* A new state of kind with the compiler off, the budget's count hook set (it does nothing
 * outside um_lua_sandbox_pcall) and a memory cap of memory bytes (at least 1 MB). NULL when
 * out of memory. The caller closes it with um_lua_sandbox_close. Any thread; a state is
 * used by one thread at a time. */
lua_State *um_lua_sandbox_new(enum um_lua_sandbox_kind kind, size_t memory);

/* Closes a state of um_lua_sandbox_new (NULL is ignored); its memory goes back. */
void um_lua_sandbox_close(lua_State *L);

/* Logs the string at the top of L's stack at level, as one line "lua: ..." (line breaks
 * become spaces; at most 1 KiB): what print and umbra.log write. */
void um_lua_log_top(lua_State *L, enum um_log_level level);

/* lua_pcall(L, nargs, nresults, errfunc) with at most budget instructions (counted in
 * UM_LUA_TICK steps) and the state's memory cap.
 * - Past the budget the call fails with "SOURCE:LINE: instruction budget of N exceeded
 *   (endless loop?)", naming the line the code was at, and from then on the count hook
 *   fires at every instruction, so that a pcall inside the script cannot carry on.
 * - An allocation past the memory cap is refused and the call fails with "Lua memory limit
 *   of N bytes exceeded", returning LUA_ERRMEM, even when the script caught the error; the
 *   state's data may then be half-made: the caller should close the state.
 * The next call of this function sets both back. Returns what lua_pcall returns. */
int um_lua_sandbox_pcall(lua_State *L, int nargs, int nresults, int errfunc, unsigned budget);

/* Bytes the state holds now (what its allocator has handed out). */
size_t um_lua_sandbox_memory(lua_State *L);

#endif
