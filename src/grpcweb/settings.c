/* SPDX-License-Identifier: BSD-2-Clause */
/* The gRPC-Web module's settings (umbra/grpcweb.h): grpc_web = true for every route, or a
 * route's own grpc_web = true or false over it. */
#include "umbra/grpcweb.h"
#include "umbra/module.h"
#include "umbra/settings.h"

static void defaults(void *part)
{
    ((struct um_grpcweb_conf *)part)->enabled = false;
}

/* The global's value or a route's (at idx; path names it): a boolean. */
static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part)
{
    if (lua_type(L, idx) != LUA_TBOOLEAN)
        return um_settings_fail(ld, L, path, "%s: expected true or false, got %s", path,
                                lua_typename(L, lua_type(L, idx)));
    ((struct um_grpcweb_conf *)part)->enabled = lua_toboolean(L, idx);
    return true;
}

static unsigned index_in_list;

const struct um_settings um_grpcweb_settings = {
    .index = &index_in_list,
    .global = "grpc_web",
    .size = sizeof(struct um_grpcweb_conf),
    .defaults = defaults,
    .read = read,
    .route_key = "grpc_web",
    .read_route = read,
};

bool um_grpcweb_enabled(const struct um_route *r)
{
    const struct um_grpcweb_conf *g = um_route_part(r, &um_grpcweb_settings);
    return g != NULL && g->enabled;
}

const struct um_module um_grpcweb_module = {
    .name = "grpcweb",
    .settings = &um_grpcweb_settings,
};
