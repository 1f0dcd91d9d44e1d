/* The Lua sandbox and the instruction budget (umbra/luasandbox.h).
 *
 * The budget's state is a userdata in the state's registry, so that the count hook (which
 * only gets the lua_State) finds it, and it goes with the state. The hook fires every
 * UM_LUA_TICK instructions whether a budgeted call runs or not: setting and clearing it
 * around each call is not free in LuaJIT (the dispatch table is rebuilt), so between
 * calls it finds counting off and returns. */
#include "umbra/luasandbox.h"

#include <stdbool.h>

#include <lauxlib.h>
#include <luajit.h>
#include <lualib.h>

struct budget {
    unsigned ticks, max_ticks;
    bool counting; /* a budgeted call runs */
    bool every;    /* the hook fires at every instruction (a budget ran out) */
};

static const char BUDGET_KEY = 'b'; /* its address: the registry's key of the budget */

static struct budget *budget_of(lua_State *L)
{
    lua_pushlightuserdata(L, (void *)&BUDGET_KEY);
    lua_rawget(L, LUA_REGISTRYINDEX);
    struct budget *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return b;
}

static void on_count(lua_State *L, lua_Debug *ar)
{
    struct budget *b = budget_of(L);
    if (b == NULL || !b->counting || ++b->ticks <= b->max_ticks)
        return;
    /* From now on at every instruction, so that a pcall in the script cannot carry on. */
    lua_sethook(L, on_count, LUA_MASKCOUNT, 1);
    b->every = true;
    /* The line the script is at (luaL_error would name its caller's: none for the file's
     * top level), so that the message reads FILE:LINE like every other. */
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        lua_pushfstring(L, "%s:%d: ", ar->short_src, ar->currentline);
    else
        lua_pushliteral(L, "");
    lua_pushfstring(L, "instruction budget of %d exceeded (endless loop?)",
                    (int)(b->max_ticks * UM_LUA_TICK));
    lua_concat(L, 2);
    lua_error(L);
}

lua_State *um_lua_sandbox_new(void)
{
    lua_State *L = luaL_newstate();
    if (L == NULL)
        return NULL;
    luaL_openlibs(L);
    /* Compiled traces do not run count hooks: keep everything in the interpreter. (After
     * luaL_openlibs, whose "jit" library turns the compiler on.) */
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
    lua_pushlightuserdata(L, (void *)&BUDGET_KEY);
    struct budget *b = lua_newuserdata(L, sizeof(*b));
    *b = (struct budget){0};
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_sethook(L, on_count, LUA_MASKCOUNT, UM_LUA_TICK);
    return L;
}

int um_lua_sandbox_pcall(lua_State *L, int nargs, int nresults, int errfunc, unsigned budget)
{
    struct budget *b = budget_of(L);
    b->ticks = 0;
    b->max_ticks = budget / UM_LUA_TICK;
    b->counting = true;
    if (b->every) {
        lua_sethook(L, on_count, LUA_MASKCOUNT, UM_LUA_TICK);
        b->every = false;
    }
    int r = lua_pcall(L, nargs, nresults, errfunc);
    b->counting = false;
    return r;
}

/* Replaces the library table called name by one with only the fields in keep. */
static void keep_only(lua_State *L, const char *name, const char *const *keep)
{
    lua_getfield(L, LUA_GLOBALSINDEX, name);
    lua_newtable(L);
    for (const char *const *k = keep; *k; k++) {
        if (lua_istable(L, -2)) {
            lua_getfield(L, -2, *k);
            lua_setfield(L, -2, *k);
        }
    }
    lua_setfield(L, LUA_GLOBALSINDEX, name);
    lua_pop(L, 1);
}

void um_lua_sandbox_restrict(lua_State *L)
{
    static const char *const gone[] = {"io",     "dofile",  "loadfile", "require",
                                       "module", "package", "jit",      NULL};
    for (const char *const *g = gone; *g; g++) {
        lua_pushnil(L);
        lua_setfield(L, LUA_GLOBALSINDEX, *g);
    }
    static const char *const os_keep[] = {"time", "clock", "date", "difftime", NULL};
    keep_only(L, "os", os_keep);
    static const char *const debug_keep[] = {"traceback", NULL}; /* for xpcall */
    keep_only(L, "debug", debug_keep);
}
