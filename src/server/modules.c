/* SPDX-License-Identifier: BSD-2-Clause */
/* The list of modules (umbra/module.h): the one place that names them all. */
#include "umbra/module.h"

#include <stdatomic.h>

#include "internal.h"
#include "umbra/metrics.h"
#include "umbra/settings.h"

extern const struct um_module um_cache_module;
extern const struct um_module um_upstream_module;
extern const struct um_module um_static_module;
extern const struct um_module um_cgi_module;
extern const struct um_module um_accesslog_module;
extern const struct um_module um_l2_module;
extern const struct um_module um_compress_module;
extern const struct um_module um_lua_module;
extern const struct um_module um_tls_module;
extern const struct um_module um_disk_module;
extern const struct um_module um_cluster_module;
extern const struct um_module um_access_module;
extern const struct um_module um_limits_module;
extern const struct um_module um_shared_module;
extern const struct um_module um_grpcweb_module;

const struct um_module *const um_modules[] = {
    &um_cache_module,     &um_upstream_module, &um_static_module,   &um_cgi_module,
    &um_accesslog_module, &um_l2_module,       &um_compress_module, &um_lua_module,
    &um_tls_module,       &um_disk_module,     &um_cluster_module,  &um_access_module,
    &um_limits_module,    &um_shared_module,   &um_grpcweb_module,  NULL,
};

void um_modules_init(void)
{
    static bool done;
    if (done) return;
    done = true;
    static const struct um_settings *settings[UM_SETTINGS_MAX + 1];
    size_t n = 0;
    for (size_t m = 0; um_modules[m]; m++)
        if (um_modules[m]->settings) settings[n++] = um_modules[m]->settings;
    settings[n] = NULL;
    um_settings_use(settings);
    for (size_t m = 0; um_modules[m]; m++)
        for (size_t s = 0; um_modules[m]->slots && um_modules[m]->slots[s]; s++)
            (void)um_context_slot_index(um_modules[m]->slots[s]);
    for (size_t m = 0; um_modules[m]; m++)
        if (um_modules[m]->counters)
            um_metrics_register(um_modules[m]->counters);
}

bool um__modules_configure(const struct um_config *c, char *err, size_t errlen)
{
    for (size_t m = 0; um_modules[m]; m++)
        if (um_modules[m]->configure && !um_modules[m]->configure(c, err, errlen)) return false;
    return true;
}

bool um_modules_verify(const struct um_config *c, char *err, size_t errlen)
{
    for (size_t m = 0; um_modules[m]; m++)
        if (um_modules[m]->verify && !um_modules[m]->verify(c, err, errlen)) return false;
    return true;
}

bool um_modules_try(const struct um_config *c, char *err, size_t errlen)
{
    for (size_t m = 0; um_modules[m]; m++) {
        if (!um_modules[m]->make) continue;
        err[0] = '\0';
        void *state = um_modules[m]->make(c, NULL, NULL, 0, err, errlen); /* a trial */
        if (state == NULL && err[0] != '\0') return false;
        if (state != NULL) um_modules[m]->drop(state);
    }
    return true;
}

static _Atomic(void *) running[UM_MODULES_MAX];

size_t um_module_index(const struct um_module *m)
{
    for (size_t i = 0; um_modules[i]; i++)
        if (um_modules[i] == m) {
            UM_ASSERT(i < UM_MODULES_MAX);
            return i;
        }
    UM_ASSERT(!"a module not in um_modules");
    return 0;
}

void um_module_run(const struct um_module *m, void *state)
{
    atomic_store(&running[um_module_index(m)], state);
}

void *um_module_running(const struct um_module *m)
{
    return atomic_load(&running[um_module_index(m)]);
}
