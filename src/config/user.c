/* SPDX-License-Identifier: BSD-2-Clause */
/* The process's identity: user = "NAME", group = "NAME" and pid = "FILE". Started as root, Umbra binds
 * its listeners and reads its keys, then becomes this user (the server does the switch:
 * src/server/privileges.c). The names are looked up here, so that an unknown one is an
 * error with its line like any other bad value. */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *const um__cfg_process[] = {"user", "group", "pid", NULL};

/* pid = "FILE": the folder must exist (the file need not); kept as an absolute path, so
 * that the server finds it whatever its working directory. */
static bool load_pid(struct um_settings_load *ld, lua_State *L)
{
    const char *s;
    if (um_settings_get_global(L, "pid") == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (!um_settings_get_string(ld, L, -1, "pid", "a file name such as \"/run/umbra/umbra.pid\"",
                                &s))
        return false;
    const char *slash = strrchr(s, '/');
    const char *base = slash ? slash + 1 : s;
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return um_settings_fail(ld, L, "pid", "pid: '%s' names a folder, not a file", s);
    char *dir = NULL;
    char *folder = slash == NULL ? um_strndup(".", 1)
                   : slash == s  ? um_strndup("/", 1)
                                 : um_strndup(s, (size_t)(slash - s));
    bool ok = um_settings_resolve_path(ld, L, "pid", folder, true, &dir);
    free(folder);
    if (!ok)
        return false;
    size_t dl = strlen(dir), bl = strlen(base);
    ld->c->pid_file = um_malloc(dl + 1 + bl + 1);
    memcpy(ld->c->pid_file, dir, dl);
    ld->c->pid_file[dl] = '/';
    memcpy(ld->c->pid_file + dl + 1, base, bl + 1);
    free(dir);
    ld->c->pid_line = um_settings_line_of(ld, L, "pid");
    lua_pop(L, 1);
    return true;
}

bool um__cfg_load_user(struct um_settings_load *ld, lua_State *L)
{
    struct um_user_conf *u = &ld->c->user;
    const char *name;
    int t = um_settings_get_global(L, "user");
    if (t != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, "user", "a user name such as \"umbra\"", &name))
            return false;
        struct passwd *pw = getpwnam(name);
        if (pw == NULL) return um_settings_fail(ld, L, "user", "user: no such user '%s'", name);
        u->set = true;
        u->name = um_strndup(name, strlen(name));
        u->uid = pw->pw_uid;
        u->gid = pw->pw_gid;
        u->line = um_settings_line_of(ld, L, "user");
    }
    lua_pop(L, 1);
    t = um_settings_get_global(L, "group");
    if (t != LUA_TNIL) {
        if (!um_settings_get_string(ld, L, -1, "group", "a group name such as \"umbra\"", &name))
            return false;
        if (!u->set)
            return um_settings_fail(ld, L, "group",
                                    "group: set user too (group = \"%s\" changes "
                                    "the group of user = \"...\")",
                                    name);
        struct group *gr = getgrnam(name);
        if (gr == NULL) return um_settings_fail(ld, L, "group", "group: no such group '%s'", name);
        u->gid = gr->gr_gid;
        u->group = um_strndup(name, strlen(name));
    }
    lua_pop(L, 1);
    return load_pid(ld, L);
}
