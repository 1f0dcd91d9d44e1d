/* SPDX-License-Identifier: BSD-2-Clause */
/* How much the server takes on: workers, limits = { ... } and timeouts = { ... }. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/luavm.h"

const char *const um__cfg_limit_keys[] = {"max_connections", "max_header_bytes",
                                         "max_body_bytes", "max_request_line", "lua_memory",
                                         NULL};
const char *const um__cfg_timeout_keys[] = {"header", "idle", "send", "shutdown", "tunnel", NULL};

bool um__cfg_load_workers(struct um_settings_load *ld, lua_State *L)
{
    long long n;
    int t = um_settings_get_global(L, "workers");
    if (t == LUA_TNIL) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        ld->c->workers = cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus;
        return true;
    }
    if (!um_settings_get_integer(L, -1, 1, MAX_WORKERS, &n)) {
        char got[64];
        if (t == LUA_TNUMBER)
            snprintf(got, sizeof got, "%g", lua_tonumber(L, -1));
        else
            snprintf(got, sizeof got, "%s", lua_typename(L, t));
        return um_settings_fail(ld, L, "workers",
                                "workers: expected an integer from 1 to %d, got %s", MAX_WORKERS,
                                got);
    }
    ld->c->workers = (int)n;
    return true;
}

bool um__cfg_load_limits(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    uint64_t v;
    long long n;
    int t = um_settings_get_global(L, "limits");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "limits", "limits: expected a table, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, idx, "limits", um__cfg_limit_keys)) return false;

    if ((t = um_settings_get_field(L, idx, "max_connections")) != LUA_TNIL) {
        if (!um_settings_get_integer(L, -1, 1, INT_MAX, &n))
            return um_settings_fail(ld, L, "limits.max_connections",
                                    "limits.max_connections: expected an integer from 1 to %d",
                                    INT_MAX);
        c->limits.max_connections = (size_t)n;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "max_header_bytes") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "limits.max_header_bytes", 1, SIZE_MAX, &v))
            return false;
        c->limits.max_header_bytes = (size_t)v;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "max_request_line") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "limits.max_request_line", 1, SIZE_MAX, &v))
            return false;
        c->limits.max_request_line = (size_t)v;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "max_body_bytes") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "limits.max_body_bytes", 0, UINT64_MAX, &v))
            return false;
        c->limits.max_body_bytes = v;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "lua_memory") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "limits.lua_memory", 1u << 20, UM_LUA_LOAD_MEMORY, &v))
            return false;
        c->limits.lua_memory = (size_t)v;
    }
    lua_pop(L, 1);
    return true;
}

bool um__cfg_load_timeouts(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    double *fields[] = {&c->timeouts.header, &c->timeouts.idle, &c->timeouts.send,
                        &c->timeouts.shutdown, &c->timeouts.tunnel};
    char sub[PATH_LEN];
    int t = um_settings_get_global(L, "timeouts");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "timeouts", "timeouts: expected a table, got %s",
                                lua_typename(L, t));
    int idx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, idx, "timeouts", um__cfg_timeout_keys)) return false;
    for (size_t i = 0; i < UM_NELEMS(fields); i++) {
        um_settings_subpath(sub, sizeof sub, "timeouts", um__cfg_timeout_keys[i]);
        if (um_settings_get_field(L, idx, um__cfg_timeout_keys[i]) != LUA_TNIL &&
            !um_settings_get_seconds(ld, L, -1, sub, fields[i]))
            return false;
        lua_pop(L, 1);
    }
    return true;
}
