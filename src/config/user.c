/* SPDX-License-Identifier: BSD-2-Clause */
/* The process's identity: user = "NAME" and group = "NAME". Started as root, Umbra binds
 * its listeners and reads its keys, then becomes this user (the server does the switch:
 * src/server/privileges.c). The names are looked up here, so that an unknown one is an
 * error with its line like any other bad value. */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *const um__cfg_process[] = {"user", "group", NULL};

bool um__cfg_load_user(struct um__cfg_load *ld, lua_State *L)
{
    struct um_user_conf *u = &ld->c->user;
    const char *name;
    int t = um__cfg_get_global(L, "user");
    if (t != LUA_TNIL) {
        if (!um__cfg_get_string(ld, L, -1, "user", "a user name such as \"umbra\"", &name))
            return false;
        struct passwd *pw = getpwnam(name);
        if (pw == NULL)
            return um__cfg_fail(ld, L, "user", "user: no such user '%s'", name);
        u->set = true;
        u->name = um_strndup(name, strlen(name));
        u->uid = pw->pw_uid;
        u->gid = pw->pw_gid;
        u->line = um__cfg_line_of(ld, L, "user");
    }
    lua_pop(L, 1);
    t = um__cfg_get_global(L, "group");
    if (t != LUA_TNIL) {
        if (!um__cfg_get_string(ld, L, -1, "group", "a group name such as \"umbra\"", &name))
            return false;
        if (!u->set)
            return um__cfg_fail(ld, L, "group", "group: set user too (group = \"%s\" changes "
                                "the group of user = \"...\")", name);
        struct group *gr = getgrnam(name);
        if (gr == NULL)
            return um__cfg_fail(ld, L, "group", "group: no such group '%s'", name);
        u->gid = gr->gr_gid;
        u->group = um_strndup(name, strlen(name));
    }
    lua_pop(L, 1);
    return true;
}
