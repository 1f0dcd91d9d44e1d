/* SPDX-License-Identifier: BSD-2-Clause */
/* The access log's settings (umbra/settings.h). */
#include <stdlib.h>
#include <string.h>

#include "umbra/accesslog.h"
#include "umbra/settings.h"

static const char *const keys[] = {"path", "format", NULL};
/* In the order of enum um_access_format. */
static const char *const ACCESS_FORMATS[] = {"combined", "json", NULL};

/* access_log = { path = "FILE" or "stderr", format = "combined" or "json" }, or false. The
 * file's folder must exist; the file is opened (created) by the server. */
static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part)
{
    struct um_access_log_conf *al = part;
    const char *s;
    (void)path;
    int t = lua_type(L, idx);
    if (t == LUA_TBOOLEAN && !lua_toboolean(L, idx)) return true;
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "access_log",
                                "access_log: expected a table such as { path = "
                                "\"logs/access.log\", format = \"combined\" } or false, got %s",
                                lua_typename(L, t));
    al->line = um_settings_line_of(ld, L, "access_log");
    if (!um_settings_check_keys(ld, L, idx, "access_log", keys)) return false;
    if (um_settings_get_field(L, idx, "path") == LUA_TNIL)
        return um_settings_fail(ld, L, "access_log",
                                "access_log: missing path (a file, or \"stderr\")");
    if (!um_settings_get_string(ld, L, -1, "access_log.path", "a file name or \"stderr\"", &s))
        return false;
    if (strcmp(s, "stderr") != 0) {
        /* The folder must exist (the file need not): resolve it, keep the name. */
        const char *slash = strrchr(s, '/');
        const char *base = slash ? slash + 1 : s;
        if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
            return um_settings_fail(ld, L, "access_log.path",
                                    "access_log.path: '%s' names a folder, "
                                    "not a file",
                                    s);
        char *dir = NULL;
        char *folder = slash == NULL ? um_strndup(".", 1)
                       : slash == s  ? um_strndup("/", 1)
                                     : um_strndup(s, (size_t)(slash - s));
        bool ok = um_settings_resolve_path(ld, L, "access_log.path", folder, true, &dir);
        free(folder);
        if (!ok) return false;
        size_t dl = strlen(dir), bl = strlen(base);
        al->path = um_malloc(dl + 1 + bl + 1);
        memcpy(al->path, dir, dl);
        al->path[dl] = '/';
        memcpy(al->path + dl + 1, base, bl + 1);
        free(dir);
    }
    lua_pop(L, 1);
    t = um_settings_get_field(L, idx, "format");
    if (t != LUA_TNIL) {
        bool found = false;
        if (t == LUA_TSTRING)
            for (size_t i = 0; ACCESS_FORMATS[i] != NULL && !found; i++)
                if (strcmp(lua_tostring(L, -1), ACCESS_FORMATS[i]) == 0) {
                    al->format = (enum um_access_format)i;
                    found = true;
                }
        if (!found)
            return um_settings_fail(ld, L, "access_log.format",
                                    "access_log.format: expected one of: %s",
                                    um_settings_join(L, ACCESS_FORMATS));
    }
    lua_pop(L, 1);
    al->enabled = true;
    return true;
}

static void dispose(void *part)
{
    free(((struct um_access_log_conf *)part)->path);
}

static const struct um_settings_table tables[] = {{"access_log", keys}, {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_access_log_settings = {
    .index = &index_in_list,
    .global = "access_log",
    .size = sizeof(struct um_access_log_conf),
    .read = read,
    .dispose = dispose,
    .tables = tables,
};
