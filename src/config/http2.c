/* SPDX-License-Identifier: BSD-2-Clause */
/* http2 = { max_concurrent_streams = N, initial_window = SIZE, max_header_list = SIZE }:
 * the settings every HTTP/2 client connection announces (RFC 9113 section 6.5.2). */
#include <stdint.h>

#include "internal.h"

const char *const um__cfg_http2_keys[] = {"max_concurrent_streams", "initial_window",
                                          "max_header_list", NULL};

bool um__cfg_load_http2(struct um_settings_load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    uint64_t v;
    long long n;
    int t = um_settings_get_global(L, "http2");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "http2", "http2: expected a table, got %s",
                                lua_typename(L, t));
    c->http2.line = um_settings_line_of(ld, L, "http2");
    int idx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, idx, "http2", um__cfg_http2_keys)) return false;
    if (um_settings_get_field(L, idx, "max_concurrent_streams") != LUA_TNIL) {
        if (!um_settings_get_integer(L, -1, 1, 65536, &n))
            return um_settings_fail(ld, L, "http2.max_concurrent_streams",
                                    "http2.max_concurrent_streams: expected an integer from 1 to "
                                    "65536");
        c->http2.max_concurrent_streams = (uint32_t)n;
    }
    lua_pop(L, 1);
    /* RFC 9113 section 6.5.2: a window is at most 2^31-1; below 16 KiB a stream moves one
     * small frame per round trip. */
    if (um_settings_get_field(L, idx, "initial_window") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "http2.initial_window", 16384, INT32_MAX, &v))
            return false;
        c->http2.initial_window = (uint32_t)v;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "max_header_list") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "http2.max_header_list", 1024, 16u << 20, &v))
            return false;
        c->http2.max_header_list = (uint32_t)v;
    }
    lua_pop(L, 1);
    return true;
}
