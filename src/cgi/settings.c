/* SPDX-License-Identifier: BSD-2-Clause */
/* The settings of the cgi routes (umbra/cgi.h): cgi = { max_children = N, timeout = S }
 * (a route's cgi = "DIR" itself is read with the route, in src/config/routes.c). */
#include "umbra/cgi.h"
#include "umbra/settings.h"

static const char *const keys[] = {"max_children", "timeout", NULL};

static void defaults(void *part)
{
    struct um_cgi_conf *cc = part;
    cc->max_children = 64;
    cc->timeout = 30;
}

static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part)
{
    struct um_cgi_conf *cc = part;
    (void)path;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "cgi",
            "cgi: expected a table such as { max_children = 64, timeout = 30 }, "
            "got %s",
            lua_typename(L, t));
    cc->line = um_settings_line_of(ld, L, "cgi");
    if (!um_settings_check_keys(ld, L, idx, "cgi", keys)) return false;
    if (um_settings_get_field(L, idx, "max_children") != LUA_TNIL) {
        long long n;
        if (!um_settings_get_integer(L, -1, 1, 100000, &n))
            return um_settings_fail(ld, L, "cgi.max_children",
                                    "cgi.max_children: expected an integer from 1 to 100000");
        cc->max_children = (int)n;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "timeout") != LUA_TNIL &&
        !um_settings_get_seconds(ld, L, -1, "cgi.timeout", &cc->timeout))
        return false;
    lua_pop(L, 1);
    return true;
}

static const struct um_settings_table tables[] = {{"cgi", keys}, {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_cgi_settings = {
    .index = &index_in_list,
    .global = "cgi",
    .size = sizeof(struct um_cgi_conf),
    .defaults = defaults,
    .read = read,
    .tables = tables,
};
