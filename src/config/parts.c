/* SPDX-License-Identifier: BSD-2-Clause */
/* The modules' parts of a snapshot (umbra/settings.h): the list of the modules' settings,
 * the step that reads each module's global with the module's reader, a route's parts, and
 * their lookups and freeing. The loader names no module: it walks the list. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct um_settings *const *list;
static size_t count;

void um_settings_use(const struct um_settings *const *l)
{
    size_t n = 0;
    while (l[n])
        n++;
    UM_ASSERT(n <= UM_SETTINGS_MAX);
    for (size_t i = 0; i < n; i++) {
        UM_ASSERT(l[i]->route_key == NULL || l[i]->route_keys == NULL);
        *l[i]->index = (unsigned)i + 1;
    }
    list = l;
    count = n;
}

const struct um_settings *um_settings_registered(size_t i)
{
    return i < count ? list[i] : NULL;
}

static size_t index_of(const struct um_settings *s)
{
    UM_ASSERT(*s->index > 0 && "a module's settings not in the list (um_settings_use)");
    return *s->index - 1;
}

const void *um_config_part(const struct um_config *c, const struct um_settings *s)
{
    return c->parts[index_of(s)];
}

const void *um_route_part(const struct um_route *r, const struct um_settings *s)
{
    return r->parts[index_of(s)];
}

void um_config_set_part(struct um_config *c, const struct um_settings *s, void *part)
{
    c->parts[index_of(s)] = part;
}

void um_route_set_part(struct um_route *r, const struct um_settings *s, void *part)
{
    r->parts[index_of(s)] = part;
}

bool um__cfg_is_part_global(const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(list[i]->global, name) == 0) return true;
    return false;
}

bool um__cfg_is_route_key(const char *name)
{
    for (size_t i = 0; i < count; i++)
        if ((list[i]->route_key && strcmp(list[i]->route_key, name) == 0) ||
            (list[i]->route_keys && um_settings_in_list(list[i]->route_keys, name)))
            return true;
    return false;
}

const char *const *um__cfg_part_globals(void)
{
    static const char *names[UM_SETTINGS_MAX + 1];
    for (size_t i = 0; i < count; i++)
        names[i] = list[i]->global;
    names[count] = NULL;
    return names;
}

const char *const *um__cfg_route_keys_all(void)
{
    static const char *keys[64];
    size_t n = 0;
    for (const char *const *k = um__cfg_route_keys; *k && n < 48; k++)
        keys[n++] = *k;
    for (size_t i = 0; i < count; i++) {
        if (list[i]->route_key) keys[n++] = list[i]->route_key;
        for (const char *const *k = list[i]->route_keys; k && *k && n < 63; k++)
            keys[n++] = *k;
    }
    keys[n] = NULL;
    return keys;
}

bool um__cfg_load_parts(struct um_settings_load *ld, lua_State *L)
{
    for (size_t i = 0; i < count; i++) {
        const struct um_settings *s = list[i];
        void *part = um_calloc(1, s->size);
        ld->c->parts[i] = part;
        if (s->defaults) s->defaults(part);
        if (um_settings_get_global(L, s->global) != LUA_TNIL &&
            !s->read(ld, L, lua_gettop(L), s->global, part))
            return false;
        lua_settop(L, 0);
    }
    return true;
}

bool um__cfg_check_parts(struct um_settings_load *ld, lua_State *L)
{
    for (size_t i = 0; i < count; i++)
        if (list[i]->check && !list[i]->check(ld, L, ld->c, ld->c->parts[i])) return false;
    return true;
}

bool um__cfg_load_route_parts(struct um_settings_load *ld, lua_State *L, int idx, const char *rpath,
                              struct um_route *r)
{
    char sub[PATH_LEN];
    for (size_t i = 0; i < count; i++) {
        const struct um_settings *s = list[i];
        if (s->route_key == NULL && s->route_keys == NULL) continue;
        r->parts[i] = um_malloc(s->size);
        memcpy(r->parts[i], ld->c->parts[i], s->size);
        if (s->route_keys) {
            bool set = false;
            for (const char *const *k = s->route_keys; *k && !set; k++) {
                set = um_settings_get_field(L, idx, *k) != LUA_TNIL;
                lua_pop(L, 1);
            }
            if (set && !s->read_route(ld, L, idx, rpath, r->parts[i])) return false;
            continue;
        }
        if (um_settings_get_field(L, idx, s->route_key) != LUA_TNIL) {
            um_settings_subpath(sub, sizeof sub, rpath, s->route_key);
            if (!s->read_route(ld, L, lua_gettop(L), sub, r->parts[i])) return false;
        }
        lua_pop(L, 1);
    }
    return true;
}

void um__cfg_free_parts(struct um_config *c)
{
    for (size_t k = 0; k < c->num_routes; k++)
        for (size_t i = 0; i < UM_SETTINGS_MAX; i++)
            free(c->routes[k].parts[i]);
    for (size_t i = 0; i < UM_SETTINGS_MAX; i++) {
        if (c->parts[i] && i < count && list[i]->dispose) list[i]->dispose(c->parts[i]);
        free(c->parts[i]);
    }
}
