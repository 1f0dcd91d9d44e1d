/* SPDX-License-Identifier: BSD-2-Clause */
/* cache.disk = { path = DIR, size = SIZE, sync = S, reset_incompatible = BOOL }, or
 * { { path = DIR, size = SIZE }, { ... }, sync = S, reset_incompatible = BOOL } for several
 * stores (objects spread by key hash). Whether each directory can hold its store is checked
 * where the store is opened (umbra -t and the start), not here: a config is read by other
 * users too (the docs test, a reload). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings_internal.h"

const char *const um__cache_disk_keys[] = {"path",  "size", "sync", "reset_incompatible",
                                           "slice", NULL};

#define DISK_MIN_SIZE (1u << 20) /* a store smaller than this holds next to nothing */

/* One store's { path = DIR, size = SIZE } at idx (what names it in messages). */
static bool load_store(struct um_settings_load *ld, lua_State *L, int idx, const char *what,
                       struct um_disk_conf *dc)
{
    char p[PATH_LEN];
    const char *s;
    uint64_t v;
    dc->line = um_settings_line_of(ld, L, what);
    if (um_settings_get_field(L, idx, "path") == LUA_TNIL)
        return um_settings_fail(ld, L, what,
                                "%s: path is required, such as path = "
                                "\"/var/cache/umbra\"",
                                what);
    um_settings_subpath(p, sizeof p, what, "path");
    if (!um_settings_get_string(ld, L, -1, p, "a directory such as \"/var/cache/umbra\"", &s))
        return false;
    dc->path = um_settings_dir_join(ld, s);
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "size") == LUA_TNIL)
        return um_settings_fail(ld, L, what, "%s: size is required, such as size = \"100GB\"",
                                what);
    um_settings_subpath(p, sizeof p, what, "size");
    if (!um_settings_get_size(ld, L, -1, p, 0, UINT64_MAX, &v)) return false;
    if (v < DISK_MIN_SIZE)
        return um_settings_fail(ld, L, p, "%s: at least 1MB, got %llu bytes", p,
                                (unsigned long long)v);
    dc->size = v;
    lua_pop(L, 1);
    return true;
}

bool um__cache_load_disk(struct um_settings_load *ld, lua_State *L, int idx,
                         struct um_cache_conf *cc)
{
    cc->disk_sync = 1;
    cc->disk_slice = UM_CACHE_DISK_SLICE_DEFAULT;
    int t = um_settings_get_field(L, idx, "disk");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, "cache.disk",
            "cache.disk: expected a table such as { path = \"/var/cache/umbra\", "
            "size = \"100GB\" }, got %s",
            lua_typename(L, t));
    int didx = lua_gettop(L);
    /* The keys of the table itself, whatever the list part holds. */
    lua_pushnil(L);
    while (lua_next(L, didx) != 0) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) continue;
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        bool known = false;
        for (const char *const *a = um__cache_disk_keys; k && *a && !known; a++)
            known = strcmp(k, *a) == 0;
        if (!known) {
            char kb[64];
            const char *kt = um_settings_key_text(L, -1, kb, sizeof kb);
            lua_pop(L, 1);
            return um_settings_fail(
                ld, L, "cache.disk",
                "cache.disk: unknown setting %s (settings are: path, size, sync, "
                "reset_incompatible, slice; several stores: a list of { path = ..., "
                "size = ... })",
                kt);
        }
    }
    size_t n = lua_objlen(L, didx);
    bool has_path = um_settings_get_field(L, didx, "path") != LUA_TNIL;
    lua_pop(L, 1);
    if (n > 0 && has_path)
        return um_settings_fail(ld, L, "cache.disk",
                                "cache.disk: either one store (path = ..., size = ...) or a list "
                                "of them, not both");
    cc->num_disks = n > 0 ? n : 1;
    cc->disks = um_calloc(cc->num_disks, sizeof *cc->disks);
    if (n == 0) {
        if (!load_store(ld, L, didx, "cache.disk", &cc->disks[0])) return false;
    }
    for (size_t i = 0; i < n; i++) {
        char el[PATH_LEN];
        um_settings_subpath_i(el, sizeof el, "cache.disk", i + 1);
        lua_rawgeti(L, didx, (int)i + 1);
        if (lua_type(L, -1) != LUA_TTABLE)
            return um_settings_fail(ld, L, el,
                                    "%s: expected a table such as { path = "
                                    "\"/srv/ssd1/umbra\", size = \"500GB\" }, got %s",
                                    el, lua_typename(L, lua_type(L, -1)));
        int sidx = lua_gettop(L);
        if (!um_settings_check_keys(ld, L, sidx, el, um__cache_disk_keys) ||
            !load_store(ld, L, sidx, el, &cc->disks[i]))
            return false;
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < cc->num_disks; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(cc->disks[i].path, cc->disks[j].path) == 0)
                return um_settings_fail(ld, L, "cache.disk",
                                        "cache.disk: the directory %s is given twice (one store a "
                                        "directory)",
                                        cc->disks[i].path);
    if (um_settings_get_field(L, didx, "sync") != LUA_TNIL &&
        !um_settings_get_seconds(ld, L, -1, "cache.disk.sync", &cc->disk_sync))
        return false;
    lua_pop(L, 1);
    if (cc->disk_sync > 60)
        return um_settings_fail(ld, L, "cache.disk.sync",
                                "cache.disk.sync: at most 60 seconds, got %g", cc->disk_sync);
    if (um_settings_get_field(L, didx, "slice") != LUA_TNIL) {
        uint64_t v;
        if (!um_settings_get_size(ld, L, -1, "cache.disk.slice", 0, UINT64_MAX, &v)) return false;
        /* Below 64 KiB the requests cost more than the bytes; above 1 GiB a slice is no
         * longer a bounded piece of memory. */
        if (v != 0 && (v < (64u << 10) || v > (1ull << 30)))
            return um_settings_fail(ld, L, "cache.disk.slice",
                                    "cache.disk.slice: 0 (off) or between \"64KB\" and "
                                    "\"1GB\", got %llu bytes",
                                    (unsigned long long)v);
        cc->disk_slice = v;
    }
    lua_pop(L, 1);
    if (!um_settings_opt_bool(ld, L, didx, "cache.disk.reset_incompatible", "reset_incompatible",
                              &cc->disk_reset_incompatible, NULL))
        return false;
    lua_pop(L, 1);
    return true;
}
