/* SPDX-License-Identifier: BSD-2-Clause */
/* Who the process runs as: the user and group settings (umbra/config.h).
 *
 * Started as root, Umbra does what needs root first, on the main thread: it runs the file,
 * binds every listener (ports below 1024) and reads the TLS keys (often readable by root
 * only). Then it becomes the user, before it opens the access log (so that the files it
 * opens are the user's, and SIGUSR1 can open them again after logrotate renamed them) and
 * before the workers, the listener and the admin thread start. The cache's cleaner thread
 * is already running by then: glibc applies setgroups, setgid and setuid to every thread of
 * the process (it signals each to make the same call), and the tests read every thread's
 * ids in /proc to hold it to that.
 *
 * Without user, root is refused: a proxy that parses what any client sends should not do
 * it as root by accident. user = "root" says it is meant. A reload cannot change the user,
 * and, once dropped, cannot bind a port below 1024 (unless the process kept
 * CAP_NET_BIND_SERVICE, as systemd's unit gives it): such a reload is refused whole. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"

bool um__privileges_check(const struct um_config *c, char *err, size_t errlen)
{
    if (geteuid() == 0 && !c->user.set) {
        snprintf(err, errlen,
                 "%s: refusing to serve as root: set user = \"NAME\" (for instance \"umbra\" "
                 "or \"nobody\") to serve as that user once the listeners are bound, or "
                 "user = \"root\" to stay root",
                 c->file);
        return false;
    }
    /* user = "root" started by someone else means: stay who started it, say nothing. */
    if (c->user.set && c->user.uid != 0 && geteuid() != 0 && geteuid() != c->user.uid)
        um_log_warn("%s:%d: user = \"%s\" needs root to switch to; serving as uid %u",
                    c->file, c->user.line, c->user.name, (unsigned)geteuid());
    return true;
}

bool um__privileges_drop(const struct um_config *c, char *err, size_t errlen)
{
    const struct um_user_conf *u = &c->user;
    if (geteuid() != 0 || !u->set)
        return true;
    if (u->uid == 0) {
        um_log_info("%s:%d: serving as root (user = \"%s\")", c->file, u->line, u->name);
        return true;
    }
    /* The user's supplementary groups too (as login would give them), with the group
     * setting, or else the user's own, as the primary one. */
    if (initgroups(u->name, u->gid) != 0) {
        snprintf(err, errlen, "%s:%d: user = \"%s\": initgroups: %s", c->file, u->line, u->name,
                 strerror(errno));
        return false;
    }
    if (setgid(u->gid) != 0 || setuid(u->uid) != 0) {
        snprintf(err, errlen, "%s:%d: user = \"%s\": cannot switch to uid %u gid %u: %s",
                 c->file, u->line, u->name, (unsigned)u->uid, (unsigned)u->gid,
                 strerror(errno));
        return false;
    }
    /* Gone for good: no saved id to come back to. */
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (setuid(0) == 0 || getresuid(&r, &e, &s) != 0 || getresgid(&rg, &eg, &sg) != 0 ||
        r != u->uid || e != u->uid || s != u->uid || rg != u->gid || eg != u->gid ||
        sg != u->gid) {
        snprintf(err, errlen, "%s:%d: user = \"%s\": the switch did not take", c->file,
                 u->line, u->name);
        return false;
    }
    um_log_info("serving as user %s (uid %u, gid %u)", u->name, (unsigned)u->uid,
                (unsigned)u->gid);
    return true;
}
