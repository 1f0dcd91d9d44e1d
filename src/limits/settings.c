/* SPDX-License-Identifier: BSD-2-Clause */
/* The settings of the limits module (umbra/limits.h): the globals `rate_limits` and
 * `shared`, and a route's `rate_limit`.
 *
 * Reading a limit or a dictionary takes a reference on its store in the registry
 * (store.c): the one the running snapshot has when the settings are the same, so that a
 * reload keeps it. dispose releases them. A part is consistent at every step (a count is
 * raised only once its entry is whole), so a load that fails halfway disposes of what it
 * read and nothing more. A route's part is a memcpy of the global one and owns nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "umbra/config.h"
#include "umbra/limits.h"
#include "umbra/settings.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN
#define NAME_MAX_LEN 64
#define SIZE_MIN (16u << 10)
#define SIZE_MAX_BYTES (1ull << 40)

/* Names go into metric labels and Lua field names: letters, digits, '_' and '-'. */
static bool good_name(const char *s, size_t n)
{
    if (n == 0 || n > NAME_MAX_LEN) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Counts the pairs of the table at idx; fails on a key that is not a good name. */
static bool count_names(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        const char *example, size_t *n)
{
    char kb[64], el[PATH_LEN];
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path, "%s: expected a table such as %s, got %s", path,
                                example, lua_typename(L, lua_type(L, idx)));
    *n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        size_t kl = 0;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &kl) : NULL;
        if (k == NULL || !good_name(k, kl)) {
            um_settings_subpath(el, sizeof el, path, um_settings_key_text(L, -2, kb, sizeof kb));
            lua_pop(L, 2);
            return um_settings_fail(ld, L, el,
                                    "%s: a name of 1 to 64 letters, digits, '_' or '-' is "
                                    "expected as the key",
                                    el);
        }
        (*n)++;
        lua_pop(L, 1);
    }
    return true;
}

/* ---------------------------------------------------------------- rate_limits */

static const char *const limit_keys[] = {"rate", "burst", "key", "size", NULL};

static void limits_defaults(void *part)
{
    memset(part, 0, sizeof(struct um_limits_conf));
}

static void limits_dispose(void *part)
{
    struct um_limits_conf *c = part;
    for (size_t i = 0; i < c->num_limits; i++) {
        um__limits_store_unref(c->limits[i].store);
        free(c->limits[i].name);
        free(c->limits[i].header);
    }
    free(c->limits);
    c->limits = NULL;
    c->num_limits = 0;
}

static bool positive(lua_State *L, int idx, double *out)
{
    if (lua_type(L, idx) != LUA_TNUMBER) return false;
    double v = lua_tonumber(L, idx);
    if (!(v > 0 && v <= 1e9)) return false;
    *out = v;
    return true;
}

/* One limit: the table at idx (path "rate_limits.api"). */
static bool read_limit(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       const char *name, struct um_limit_def *d)
{
    char sub[PATH_LEN];
    if (!lua_istable(L, idx))
        return um_settings_fail(ld, L, path,
                                "%s: expected a table such as { rate = 10, burst = 20, key = "
                                "\"client\" }, got %s",
                                path, lua_typename(L, lua_type(L, idx)));
    if (!um_settings_check_keys(ld, L, idx, path, limit_keys)) return false;
    um_settings_subpath(sub, sizeof sub, path, "rate");
    if (um_settings_get_field(L, idx, "rate") == LUA_TNIL)
        return um_settings_fail(ld, L, sub, "%s: missing (requests a second)", sub);
    if (!positive(L, -1, &d->rate))
        return um_settings_fail(ld, L, sub, "%s: a number of requests a second above 0", sub);
    lua_pop(L, 1);
    d->burst = d->rate < 1 ? 1 : d->rate;
    um_settings_subpath(sub, sizeof sub, path, "burst");
    if (um_settings_get_field(L, idx, "burst") != LUA_TNIL &&
        (!positive(L, -1, &d->burst) || d->burst < 1))
        return um_settings_fail(ld, L, sub, "%s: a number of requests of at least 1", sub);
    lua_pop(L, 1);
    d->key = UM_LIMIT_KEY_CLIENT;
    um_settings_subpath(sub, sizeof sub, path, "key");
    if (um_settings_get_field(L, idx, "key") != LUA_TNIL) {
        const char *k;
        if (!um_settings_get_string(ld, L, -1, sub, "\"client\", \"host\" or \"header:NAME\"", &k))
            return false;
        if (strcmp(k, "client") == 0) {
            d->key = UM_LIMIT_KEY_CLIENT;
        } else if (strcmp(k, "host") == 0) {
            d->key = UM_LIMIT_KEY_HOST;
        } else if (strncmp(k, "header:", 7) == 0 && good_name(k + 7, strlen(k + 7))) {
            d->key = UM_LIMIT_KEY_HEADER;
            d->header = um_strndup(k + 7, strlen(k + 7));
            um_settings_lower(d->header);
        } else {
            return um_settings_fail(ld, L, sub,
                                    "%s: '%s' is not \"client\", \"host\" or \"header:NAME\" (a "
                                    "field name)",
                                    sub, k);
        }
    }
    lua_pop(L, 1);
    d->size = 10u << 20;
    um_settings_subpath(sub, sizeof sub, path, "size");
    if (um_settings_get_field(L, idx, "size") != LUA_TNIL &&
        !um_settings_get_size(ld, L, -1, sub, SIZE_MIN, SIZE_MAX_BYTES, &d->size))
        return false;
    lua_pop(L, 1);
    d->name = um_strndup(name, strlen(name));
    d->store = um__limits_store_ref(UM__STORE_LIMIT, name, d->size, d->rate, d->burst,
                                    (int)d->key, d->header);
    return true;
}

static bool limits_read(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        void *part)
{
    struct um_limits_conf *c = part;
    char el[PATH_LEN];
    size_t n;
    if (!count_names(ld, L, idx, path, "{ api = { rate = 10, burst = 20 } }", &n)) return false;
    c->limits = um_calloc(n ? n : 1, sizeof(*c->limits));
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        const char *name = lua_tostring(L, -2);
        um_settings_subpath(el, sizeof el, path, name);
        struct um_limit_def d;
        memset(&d, 0, sizeof d);
        if (!read_limit(ld, L, lua_gettop(L), el, name, &d)) {
            free(d.header);
            return false;
        }
        c->limits[c->num_limits++] = d;
        lua_pop(L, 1);
    }
    return true;
}

static bool limits_read_route(struct um_settings_load *ld, lua_State *L, int idx,
                              const char *path, void *part)
{
    struct um_limits_conf *c = part;
    const char *name;
    if (!um_settings_get_string(ld, L, idx, path, "the name of one of rate_limits", &name))
        return false;
    for (size_t i = 0; i < c->num_limits; i++)
        if (strcmp(c->limits[i].name, name) == 0) {
            c->route = &c->limits[i];
            return true;
        }
    return um_settings_fail(ld, L, path, "%s: no rate limit '%s' in rate_limits", path, name);
}

static const struct um_settings_table limit_tables[] = {
    {"rate_limits.NAME", limit_keys},
    {NULL, NULL},
};

static unsigned limits_index;

const struct um_settings um_limits_settings = {
    .index = &limits_index,
    .global = "rate_limits",
    .size = sizeof(struct um_limits_conf),
    .defaults = limits_defaults,
    .read = limits_read,
    .dispose = limits_dispose,
    .route_key = "rate_limit",
    .read_route = limits_read_route,
    .tables = limit_tables,
};

const struct um_limits_conf *um_limits_conf(const struct um_config *c, const struct um_route *r)
{
    if (r) return um_route_part(r, &um_limits_settings);
    return um_config_part(c, &um_limits_settings);
}

const struct um_limit_def *um_limits_find(const struct um_config *c, const char *name, size_t n)
{
    const struct um_limits_conf *lc = um_config_part(c, &um_limits_settings);
    for (size_t i = 0; lc && i < lc->num_limits; i++)
        if (strlen(lc->limits[i].name) == n && memcmp(lc->limits[i].name, name, n) == 0)
            return &lc->limits[i];
    return NULL;
}

/* ---------------------------------------------------------------- shared */

static void shared_defaults(void *part)
{
    memset(part, 0, sizeof(struct um_shared_conf));
}

static void shared_dispose(void *part)
{
    struct um_shared_conf *c = part;
    for (size_t i = 0; i < c->num_dicts; i++) {
        um__limits_store_unref(c->dicts[i].store);
        free(c->dicts[i].name);
    }
    free(c->dicts);
    c->dicts = NULL;
    c->num_dicts = 0;
}

static bool shared_read(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        void *part)
{
    struct um_shared_conf *c = part;
    char el[PATH_LEN];
    size_t n;
    if (!count_names(ld, L, idx, path, "{ counters = \"1MB\" }", &n)) return false;
    c->dicts = um_calloc(n ? n : 1, sizeof(*c->dicts));
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        const char *name = lua_tostring(L, -2);
        um_settings_subpath(el, sizeof el, path, name);
        struct um_shared_def d = {0};
        if (!um_settings_get_size(ld, L, -1, el, SIZE_MIN, SIZE_MAX_BYTES, &d.size)) return false;
        d.name = um_strndup(name, strlen(name));
        d.store = um__limits_store_ref(UM__STORE_SHARED, name, d.size, 0, 0, 0, NULL);
        c->dicts[c->num_dicts++] = d;
        lua_pop(L, 1);
    }
    return true;
}

static unsigned shared_index;

const struct um_settings um_shared_settings = {
    .index = &shared_index,
    .global = "shared",
    .size = sizeof(struct um_shared_conf),
    .defaults = shared_defaults,
    .read = shared_read,
    .dispose = shared_dispose,
};

const struct um_shared_conf *um_shared_conf(const struct um_config *c)
{
    return um_config_part(c, &um_shared_settings);
}

struct um_store *um_shared_find(const struct um_config *c, const char *name, size_t n)
{
    const struct um_shared_conf *sc = um_config_part(c, &um_shared_settings);
    for (size_t i = 0; sc && i < sc->num_dicts; i++)
        if (strlen(sc->dicts[i].name) == n && memcmp(sc->dicts[i].name, name, n) == 0)
            return sc->dicts[i].store;
    return NULL;
}
