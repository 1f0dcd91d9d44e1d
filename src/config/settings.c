/* SPDX-License-Identifier: BSD-2-Clause */
/* Every setting the loader knows, named as the documentation names them. The lists are
 * the ones the readers check keys against (internal.h), so a key added to a reader is a
 * key listed here, and tests/docs fails until umbra.lua(5) and the README describe it. */
#include <stdio.h>

#include "internal.h"

static const struct {
    const char *table; /* where the table sits, as documented */
    const char *const *keys;
} tables[] = {
    {"listen[N]", um__cfg_listen_keys},
    {"upstreams.NAME", um__cfg_upstream_keys},
    {"upstreams.NAME.tls", um__cfg_upstream_tls_keys},
    {"upstreams.NAME.health", um__cfg_upstream_health_keys},
    {"routes[N]", um__cfg_route_keys},
    {"limits", um__cfg_limit_keys},
    {"timeouts", um__cfg_timeout_keys},
    {"admin", um__cfg_admin_keys},
    {"http2", um__cfg_http2_keys},
};

void um_config_settings(void (*cb)(const char *setting, void *arg), void *arg)
{
    static const char *const *const globals[] = {um__cfg_settings, um__cfg_process,
                                                 um__cfg_hooks, um__cfg_yunying};
    char path[PATH_LEN];
    for (size_t i = 0; i < UM_NELEMS(globals); i++)
        for (const char *const *g = globals[i]; *g; g++)
            cb(*g, arg);
    for (size_t i = 0; i < UM_NELEMS(tables); i++)
        for (const char *const *k = tables[i].keys; *k; k++) {
            snprintf(path, sizeof path, "%s.%s", tables[i].table, *k);
            cb(path, arg);
        }
    /* The modules': their globals, their route keys, their tables. */
    for (size_t i = 0; um_settings_registered(i); i++) {
        const struct um_settings *s = um_settings_registered(i);
        cb(s->global, arg);
        if (s->route_key) {
            snprintf(path, sizeof path, "routes[N].%s", s->route_key);
            cb(path, arg);
        }
        for (const char *const *k = s->route_keys; k && *k; k++) {
            snprintf(path, sizeof path, "routes[N].%s", *k);
            cb(path, arg);
        }
        for (const struct um_settings_table *t = s->tables; t && t->table; t++)
            for (const char *const *k = t->keys; *k; k++) {
                snprintf(path, sizeof path, "%s.%s", t->table, *k);
                cb(path, arg);
            }
    }
}
