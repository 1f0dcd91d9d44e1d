/* SPDX-License-Identifier: BSD-2-Clause */
/* What the cache's two settings files share (settings.c: cache; settings_disk.c: its
 * disk table). */
#ifndef UMBRA_CACHE_SETTINGS_INTERNAL_H
#define UMBRA_CACHE_SETTINGS_INTERNAL_H

#include "umbra/cache.h"
#include "umbra/settings.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN

/* cache.disk's keys (a store's and the common ones), and the disk value of the cache
 * table at idx into cc. */
extern const char *const um__cache_disk_keys[];
bool um__cache_load_disk(struct um_settings_load *ld, lua_State *L, int idx,
                         struct um_cache_conf *cc);

/* The cache module's check_reload (umbra/module.h). */
void um__cache_check_reload(const struct um_config *was, const struct um_config *now,
                            void *running);

#endif
