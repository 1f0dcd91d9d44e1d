/* The Lua sandbox: how every Lua state of Umbra is made, what it keeps, and how long its
 * code may run.
 *
 * Two kinds of state use it. The config loader's (src/config/config.c) runs config.lua
 * once with the whole standard library: the file's top level may read files. Each
 * worker's request state (src/lua/hooks.c) runs the same file once more and then loses
 * what request-time code must not have (um_lua_sandbox_restrict). Both run every call
 * under an instruction budget, so that an endless loop ends in an error instead of a hang.
 *
 * The JIT compiler is off in every state: compiled traces do not run count hooks, and the
 * budget must stop any loop. */
#ifndef UMBRA_LUASANDBOX_H
#define UMBRA_LUASANDBOX_H

#include <lua.h>

/* Instructions the file's top level may run, in the loader and in each request state. A
 * real config runs a few thousand; an endless loop reaches this in a few tens of
 * milliseconds. */
#define UM_LUA_LOAD_BUDGET 10000000

/* Instructions between two looks at the budget (a budget is counted in these). */
#define UM_LUA_TICK 1000

/* A new state with the standard libraries, the compiler off and the budget's count hook
 * set (it does nothing outside um_lua_sandbox_pcall). NULL when out of memory. The caller
 * closes it with lua_close. Any thread; a state is used by one thread at a time. */
lua_State *um_lua_sandbox_new(void);

/* lua_pcall(L, nargs, nresults, errfunc) with at most budget instructions (counted in
 * UM_LUA_TICK steps). Past the budget the call fails with "SOURCE:LINE: instruction budget
 * of N exceeded (endless loop?)", naming the line the code was at, and from then on the
 * count hook fires at every instruction, so that a pcall inside the script cannot carry
 * on. The next call of this function sets it back. Returns what lua_pcall returns. */
int um_lua_sandbox_pcall(lua_State *L, int nargs, int nresults, int errfunc, unsigned budget);

/* Takes away what request-time code must not have: file and process access (io, dofile,
 * loadfile, require, module, package; os keeps only time, clock, date and difftime), for
 * hooks must never block the worker, and whatever would give those back or lift the
 * budget: debug (but debug.traceback, for xpcall), since debug.getregistry() reaches every
 * loaded library and debug.sethook() removes the count hook, and jit, since jit.on()
 * compiles traces, which do not run it. */
void um_lua_sandbox_restrict(lua_State *L);

#endif
