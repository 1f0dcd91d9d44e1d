/* SPDX-License-Identifier: BSD-2-Clause */
/* Operating the server: log_level and admin = { listen, allow }. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "umbra/log.h"

static const char *const LOG_LEVELS[] = {"error", "warn", "info", "debug", NULL};
const char *const um__cfg_admin_keys[] = {"listen", "allow", NULL};

bool um__cfg_load_log_level(struct um_settings_load *ld, lua_State *L)
{
    static const int levels[] = {UM_LOG_ERR, UM_LOG_WARN, UM_LOG_INFO, UM_LOG_DEBUG};
    int t = um_settings_get_global(L, "log_level");
    if (t == LUA_TNIL)
        return true;
    if (t == LUA_TSTRING)
        for (size_t i = 0; LOG_LEVELS[i] != NULL; i++)
            if (strcmp(lua_tostring(L, -1), LOG_LEVELS[i]) == 0) {
                ld->c->log_level = levels[i];
                return true;
            }
    return um_settings_fail(ld, L, "log_level", "log_level: expected one of: %s",
                            um_settings_join(L, LOG_LEVELS));
}

/* admin = { listen = "HOST:PORT", allow = { ... } } */
bool um__cfg_load_admin(struct um_settings_load *ld, lua_State *L)
{
    struct um_admin_conf *ac = &ld->c->admin;
    const char *s;
    ac->allow = um_calloc(2, sizeof *ac->allow);
    ac->num_allow = 2;
    ac->allow[0] = (struct um_netmask){.family = AF_INET, .addr = {127, 0, 0, 1}, .prefix = 32};
    ac->allow[1] = (struct um_netmask){.family = AF_INET6, .addr = {[15] = 1}, .prefix = 128};
    int t = um_settings_get_global(L, "admin");
    if (t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "admin",
                                "admin: expected a table such as { listen = "
                                "\"127.0.0.1:9145\" }, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    ac->line = um_settings_line_of(ld, L, "admin");
    if (!um_settings_check_keys(ld, L, idx, "admin", um__cfg_admin_keys)) return false;
    if (um_settings_get_field(L, idx, "listen") == LUA_TNIL)
        return um_settings_fail(ld, L, "admin",
                                "admin: missing listen (e.g. listen = \"127.0.0.1:9145\")");
    if (!um_settings_get_string(ld, L, -1, "admin.listen", "a \"HOST:PORT\" string", &s) ||
        !um__cfg_parse_listen(ld, L, "admin.listen", s, &ac->listen))
        return false;
    ac->enabled = true;
    lua_pop(L, 1);
    const struct sockaddr_storage *a = &ac->listen.addr;
    in_port_t port = a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                              : ((const struct sockaddr_in *)a)->sin_port;
    for (size_t i = 0; i < ld->c->num_listen && port != 0; i++)
        if (ld->c->listen[i].addrlen == ac->listen.addrlen &&
            memcmp(&ld->c->listen[i].addr, a, ac->listen.addrlen) == 0)
            return um_settings_fail(ld, L, "admin.listen", "admin.listen: '%s' is also in listen",
                                    ac->listen.text);
    if (um_settings_get_field(L, idx, "allow") != LUA_TNIL &&
        !um_settings_netmask_list(ld, L, lua_gettop(L), "admin.allow", &ac->allow, &ac->num_allow))
        return false;
    lua_pop(L, 1);
    return true;
}
