/* SPDX-License-Identifier: BSD-2-Clause */
/* cgi = { max_children = N, timeout = S }: the limits of the cgi routes (a route's
 * cgi = "DIR" itself is read with the route, in routes.c). */
#include "internal.h"

const char *const um__cfg_cgi_keys[] = {"max_children", "timeout", NULL};

bool um__cfg_load_cgi(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    c->cgi.max_children = 64;
    c->cgi.timeout = 30;
    int t = um_settings_get_global(L, "cgi");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "cgi",
            "cgi: expected a table such as { max_children = 64, timeout = 30 }, "
            "got %s",
            lua_typename(L, t));
    int idx = lua_gettop(L);
    c->cgi.line = um_settings_line_of(ld, L, "cgi");
    if (!um_settings_check_keys(ld, L, idx, "cgi", um__cfg_cgi_keys)) return false;
    if (um_settings_get_field(L, idx, "max_children") != LUA_TNIL) {
        long long n;
        if (!um_settings_get_integer(L, -1, 1, 100000, &n))
            return um_settings_fail(ld, L, "cgi.max_children",
                                    "cgi.max_children: expected an integer from 1 to 100000");
        c->cgi.max_children = (int)n;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "timeout") != LUA_TNIL &&
        !um_settings_get_seconds(ld, L, -1, "cgi.timeout", &c->cgi.timeout))
        return false;
    lua_pop(L, 1);
    return true;
}
