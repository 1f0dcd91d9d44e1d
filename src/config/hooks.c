/* SPDX-License-Identifier: BSD-2-Clause */
/* The request hooks a file defines: on_request and on_response functions (a route's own
 * are read with the route, in routes.c). */
#include "internal.h"

/* Request hooks: functions, global or per route. */
const char *const um__cfg_hooks[] = {"on_request", "on_response", NULL};

/* on_request = function(req) ... end, on_response = function(req, res) ... end */
bool um__cfg_load_hooks(struct um_settings_load *ld, lua_State *L)
{
    for (const char *const *h = um__cfg_hooks; *h; h++) {
        int t = um_settings_get_global(L, *h);
        if (t != LUA_TNIL && t != LUA_TFUNCTION)
            return um_settings_fail(ld, L, *h, "%s: expected a function, got %s", *h,
                                    lua_typename(L, t));
        if (t == LUA_TFUNCTION)
            *(h == um__cfg_hooks ? &ld->c->lua.on_request : &ld->c->lua.on_response) = true;
        lua_pop(L, 1);
    }
    return true;
}
