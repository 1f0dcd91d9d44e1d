/* SPDX-License-Identifier: BSD-2-Clause */
/* The list of modules (umbra/module.h): the one place that names them all. */
#include "umbra/module.h"

extern const struct um_module um_cache_module;
extern const struct um_module um_upstream_module;
extern const struct um_module um_static_module;
extern const struct um_module um_cgi_module;
extern const struct um_module um_log_module;
extern const struct um_module um_cluster_module;

const struct um_module *const um_modules[] = {
    &um_cache_module, &um_upstream_module, &um_static_module, &um_cgi_module,
    &um_log_module,   &um_cluster_module,  NULL,
};

void um_modules_init(void)
{
    for (size_t m = 0; um_modules[m]; m++)
        for (size_t s = 0; um_modules[m]->slots && um_modules[m]->slots[s]; s++)
            (void)um_context_slot_index(um_modules[m]->slots[s]);
}
