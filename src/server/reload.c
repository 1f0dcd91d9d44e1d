/* SPDX-License-Identifier: BSD-2-Clause */
/* Configuration reload (SIGHUP), on the main thread.
 *
 * Everything that can fail happens before anything changes: load and validate the file
 * (and have the modules verify what the loader cannot: umbra/module.h), build the new
 * snapshot's runtime (the modules' states for it, such as the workers' Lua states and the
 * certificate store, then its origins: umbra/runtime.h), bind the listen addresses that
 * are new, have the modules configure the process (the access log's file). Then the
 * switch:
 *   1. the listener thread stops (sockets keep queueing in the kernel's backlog: nothing
 *      is refused), the listening sockets are swapped (unchanged addresses keep theirs;
 *      the admin listener's too, when admin.listen changed),
 *      s->runtime becomes the new one, and the listener starts again;
 *   2. each worker gets the new runtime through its mailbox, and takes it before it
 *      handles the next accepted socket; open connections finish on theirs.
 * The old runtime is retired, not released: the main thread keeps its reference until
 * every other one is gone, to it (workers, connections) and to its snapshot (cache fills
 * that outlive their client), then frees it here. So the origins of a snapshot are always
 * destroyed on the main thread, after the last request that used them. (What the upstream
 * origin keeps per worker, its CURLM and pooled handles, belongs to the worker thread, not
 * to an origin: it outlives every runtime and goes with the worker. A transfer in flight
 * points at its origin, but only lives as long as the connection or cache fill it serves,
 * and those hold the runtime or its snapshot.)
 *
 * The shared cache is the server's, not a runtime's: it keeps its contents. Settings that
 * cannot change while running (workers, cache memory, cache.l2, user and group) keep their old
 * value, with a warning. A new listener is bound by the user the process runs as: once it
 * has dropped root, a port below 1024 fails to bind (unless it kept CAP_NET_BIND_SERVICE),
 * and the reload is refused whole, with the reason (server.c, um__bind_listen). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/module.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/runtime.h"

static bool same_addr(const struct um_listen *a, const struct um_listen *b)
{
    return a->addrlen == b->addrlen && memcmp(&a->addr, &b->addr, a->addrlen) == 0;
}

/* True when fd is bound to l's address (an old "HOST:0" entry now written with the port
 * it got keeps its socket). */
static bool bound_to(int fd, const struct um_listen *l)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 || len != l->addrlen)
        return false;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        const struct sockaddr_in *b = (const struct sockaddr_in *)&l->addr;
        return b->sin_family == AF_INET && a->sin_port == b->sin_port &&
               a->sin_addr.s_addr == b->sin_addr.s_addr;
    }
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)&l->addr;
    return b->sin6_family == AF_INET6 && a->sin6_port == b->sin6_port &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0;
}

static void failed(struct um_server *s, const char *msg)
{
    atomic_fetch_add(&um_metrics_reload_failures, 1);
    um_log_err("SIGHUP: %s", msg);
    um_log_err("SIGHUP: configuration not reloaded; still running on the previous one of %s",
               s->config->file);
}

/* What a reload cannot change keeps its running value, with a warning: the server's own
 * settings, then every module's (umbra/module.h). */
static void warn_restart_only(struct um_server *s, const struct um_config *old,
                             const struct um_config *nc)
{
    /* Who the process runs as was settled at start (privileges.c): like workers, a reload
     * keeps it, and says so. */
    if (nc->user.set != old->user.set || nc->user.uid != old->user.uid ||
        nc->user.gid != old->user.gid)
        um_log_warn("SIGHUP: %s: user and group take a restart; still running as uid %u "
                    "gid %u", nc->file, (unsigned)geteuid(), (unsigned)getegid());
    /* The pid file was locked at start; a reload keeps it, like workers. */
    const char *was = s->pid_path ? s->pid_path : "none";
    const char *now = nc->pid_file ? nc->pid_file : "none";
    if (strcmp(was, now) != 0)
        um_log_warn("SIGHUP: a change of pid (%s) takes a restart; keeping %s", now, was);
    if (nc->workers != s->num_workers)
        um_log_warn("SIGHUP: workers = %d takes a restart; keeping %d", nc->workers,
                    s->num_workers);
    /* The modules' own rules (umbra/module.h). */
    for (size_t m = 0; um_modules[m]; m++)
        if (um_modules[m]->check_reload)
            um_modules[m]->check_reload(old, nc, um_module_running(um_modules[m]));
}

void um__server_reload(struct um_server *s)
{
    char err[1024];
    struct um_config *old = s->config;
    atomic_fetch_add(&um_metrics_reloads, 1);
    struct um_config *nc = um_config_load(old->file, err, sizeof(err));
    if (nc == NULL) {
        failed(s, err);
        return;
    }
    if (!um_modules_verify(nc, err, sizeof(err))) {
        um_config_unref(nc);
        failed(s, err);
        return;
    }
    warn_restart_only(s, old, nc);
    int *fds = um_calloc(nc->num_listen + 1, sizeof(int));
    bool *kept = um_calloc(s->num_listen + 1, sizeof(bool));
    size_t bound = 0;
    int admin_fd = -2; /* -2: unchanged */
    for (size_t i = 0; i < nc->num_listen; i++)
        fds[i] = -1;
    struct um_cache_links links = um__server_links(s);
    /* The modules' states are made for the workers that run (one Lua state each), which
     * see them only once their mailbox hands them the runtime, below. */
    struct um_runtime *rt =
        um_runtime_create(nc, s->runtime, s->num_workers, &s->cache, &links, err, sizeof(err));
    if (rt == NULL)
        goto fail;
    for (size_t i = 0; i < nc->num_listen; i++) {
        for (size_t j = 0; j < s->num_listen && j < old->num_listen; j++)
            if (!kept[j] && (same_addr(&nc->listen[i], &old->listen[j]) ||
                             bound_to(s->listen_fds[j], &nc->listen[i]))) {
                kept[j] = true;
                fds[i] = s->listen_fds[j];
                break;
            }
        if (fds[i] >= 0)
            continue;
        char why[900];
        fds[i] = um__bind_listen(&nc->listen[i], why, sizeof(why));
        if (fds[i] < 0) {
            snprintf(err, sizeof(err), "%s: %s", nc->file, why);
            goto fail;
        }
        bound++;
    }
    if (nc->admin.enabled != old->admin.enabled ||
        (nc->admin.enabled && !same_addr(&nc->admin.listen, &old->admin.listen))) {
        admin_fd = -1;
        if (nc->admin.enabled) {
            admin_fd = um__bind_listen(&nc->admin.listen, err, sizeof(err));
            if (admin_fd < 0)
                goto fail;
        }
    }
    if (!um__modules_configure(nc, err, sizeof(err))) goto fail;

    /* The switch: nothing fails from here on. */
    um__listener_stop(s);
    for (size_t j = 0; j < s->num_listen; j++)
        if (!kept[j])
            close(s->listen_fds[j]);
    free(s->listen_fds);
    s->listen_fds = fds;
    s->num_listen = nc->num_listen;
    if (admin_fd != -2) { /* the admin listener moved (or came, or went) */
        if (s->admin_fd >= 0)
            close(s->admin_fd);
        s->admin_fd = admin_fd;
    }
    struct um_runtime *old_rt = s->runtime;
    pthread_mutex_lock(&s->config_lock);
    s->runtime = rt;
    s->config = nc;
    pthread_mutex_unlock(&s->config_lock);
    for (int i = 0; i < s->num_workers; i++)
        um__mailbox_set_runtime(&s->workers[i].mailbox, rt);
    um__listener_start(s);
    if (admin_fd != -2)
        um__log_admin(s);
    um_log_level_set((enum um_log_level)nc->log_level);

    struct um__retired *r = um_calloc(1, sizeof(*r));
    r->runtime = old_rt;
    r->next = s->retired;
    s->retired = r;
    free(kept);
    um_config_unref(nc); /* the runtime holds it */
    um__log_listening(s, "SIGHUP: configuration reloaded");
    return;

fail:
    for (size_t i = 0; i < nc->num_listen && bound > 0; i++) {
        bool ours = fds[i] >= 0;
        for (size_t j = 0; j < s->num_listen && ours; j++)
            if (s->listen_fds[j] == fds[i])
                ours = false;
        if (ours) {
            close(fds[i]);
            bound--;
        }
    }
    if (admin_fd >= 0) close(admin_fd);
    free(fds);
    free(kept);
    um_runtime_unref(rt); /* its origins go with it */
    um_config_unref(nc);
    failed(s, err);
}

size_t um__server_free_retired(struct um_server *s, bool all)
{
    size_t left = 0;
    for (struct um__retired **p = &s->retired; *p;) {
        struct um__retired *r = *p;
        if (!all && !um_runtime_unused(r->runtime)) {
            left++;
            p = &r->next;
            continue;
        }
        *p = r->next;
        um_runtime_unref(r->runtime);
        free(r);
    }
    return left;
}
