/* SPDX-License-Identifier: BSD-2-Clause */
/* Listening sockets, the listener thread, signals, start and stop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/disktier.h"
#include "umbra/module.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/server.h"
#include "umbra/accesslog.h"
#include "umbra/metrics.h"

#define ACCEPT_BATCH 64
#define PAUSE_MS 100

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(out, len, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(out, len, "[%s]:%u", host, port);
    }
}

int um__bind_listen(const struct um_listen *l, char *err, size_t errlen)
{
    int fd = socket(l->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "listen %s: socket: %s", l->text, strerror(errno));
        return -1;
    }
    int one = 1, defer = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (l->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&l->addr, l->addrlen) != 0 || listen(fd, 4096) != 0) {
        int e = errno;
        in_port_t port = l->addr.ss_family == AF_INET6
                             ? ntohs(((const struct sockaddr_in6 *)&l->addr)->sin6_port)
                             : ntohs(((const struct sockaddr_in *)&l->addr)->sin_port);
        if (e == EACCES && port < 1024 && geteuid() != 0)
            snprintf(err, errlen, "listen %s: %s: a port below 1024 needs root or "
                     "CAP_NET_BIND_SERVICE, and Umbra runs as uid %u (once it has dropped "
                     "root, a new privileged port takes a restart)",
                     l->text, strerror(e), (unsigned)geteuid());
        else
            snprintf(err, errlen, "listen %s: %s", l->text, strerror(e));
        close(fd);
        return -1;
    }
    /* Wake the listener only once a request's first bytes have arrived. */
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
    return fd;
}

/* The signals the main thread takes through its signalfd. */
static void signal_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGQUIT);
    sigaddset(set, SIGUSR1);
}

struct um_cache_links um__server_links(struct um_server *s)
{
    return (struct um_cache_links){
        .disk = s->disk,
        .l2 = s->l2 ? um_l2_cache(s->l2) : NULL,
        .announce = um__purge_announce,
        .announce_arg = s,
    };
}

struct um_server *um_server_create(struct um_config *config, char *err, size_t errlen)
{
    /* Blocked before any thread starts (the cache's cleaner starts below), so that every
     * thread inherits the mask and the signals reach the main thread's signalfd only, not
     * a thread where their default action would end the process. */
    sigset_t set;
    signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (!um__privileges_check(config, err, errlen)) {
        um_config_unref(config);
        return NULL;
    }
    struct um_server *s = um_calloc(1, sizeof(*s));
    s->config = config;
    s->admin_fd = -1;
    s->pid_fd = -1;
    /* Before any listener is bound: a second Umbra on the same pid file stops here, not
     * sharing the ports through SO_REUSEPORT. */
    if (config->pid_file != NULL) {
        s->pid_fd = um__pidfile_lock(config->pid_file, err, errlen);
        if (s->pid_fd < 0)
            goto fail;
        s->pid_path = um_strndup(config->pid_file, strlen(config->pid_file));
    }
    pthread_mutex_init(&s->config_lock, NULL);
    s->listen_fds = um_calloc(config->num_listen, sizeof(int));
    /* The disk stores, their indexes rebuilt before anything is served. */
    if (um_cache_conf(config)->num_disks > 0) {
        s->disk = um_disk_tier_open(config, err, errlen);
        if (s->disk == NULL) goto fail;
    }
    um_module_run(&um_disk_module, s->disk);
    /* The second-level cache, before the runtime whose cache uses it (a reload does not
     * change it: cache.l2 is read at start). */
    if (um_cache_conf(config)->l2.enabled) s->l2 = um_l2_create(config, um__purge_apply, s);
    um_module_run(&um_l2_module, s->l2);
    /* The TLS module's renderers read its ACME clients' list. */
    um_module_run(&um_tls_module, um_tls_acme_registry());
    struct um_cache_links links = um__server_links(s);
    /* With the modules' states: the workers' Lua states made here rather than on each
     * worker's first request (the file's top level must not run inside a worker's loop
     * turn), and the certificates read while the process may still be root. */
    s->runtime = um_runtime_create(config, NULL, config->workers, &s->cache, &links, err, errlen);
    if (s->runtime == NULL)
        goto fail;
    for (size_t i = 0; i < config->num_listen; i++) {
        int fd = um__bind_listen(&config->listen[i], err, errlen);
        if (fd < 0)
            goto fail;
        s->listen_fds[s->num_listen++] = fd;
    }
    if (config->admin.enabled) {
        s->admin_fd = um__bind_listen(&config->admin.listen, err, errlen);
        if (s->admin_fd < 0)
            goto fail;
    }
    /* What needs root is done (the ports are bound, the keys read): the access log is
     * opened as the user, as SIGUSR1 will reopen it. */
    if (!um__privileges_drop(config, err, errlen))
        goto fail;
    if (!um__modules_configure(config, err, errlen)) goto fail;
    s->listener_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    UM_ASSERT(s->listener_efd >= 0);
    um_config_unref(config); /* the caller's: the runtime holds one of its own */
    return s;
fail:
    um__pidfile_release(s->pid_fd, s->pid_path);
    free(s->pid_path);
    for (size_t i = 0; i < s->num_listen; i++)
        close(s->listen_fds[i]);
    if (s->admin_fd >= 0) close(s->admin_fd);
    free(s->listen_fds);
    pthread_mutex_destroy(&s->config_lock);
    um_runtime_unref(s->runtime); /* the routes' origins go with it, then the cache they use */
    um_config_unref(config);
    if (s->cache) {
        um_module_run(&um_cache_module, NULL);
        um_cache_stop_cleaner(s->cache);
        um_cache_destroy(s->cache);
    }
    um_module_run(&um_disk_module, NULL);
    um_disk_tier_close(s->disk);
    um_module_run(&um_l2_module, NULL);
    um_module_run(&um_tls_module, NULL);
    um_l2_destroy(s->l2);
    free(s);
    return NULL;
}

static void set_accepting(struct um_server *s, int epfd, bool on)
{
    for (size_t i = 0; i < s->num_listen; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
        epoll_ctl(epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->listen_fds[i], &ev);
    }
}

#define ADMIN_EVENT (UINT64_MAX - 1) /* the admin listener's, in the listener's epoll set */

/* Accepts a batch from the admin listener and hands it to the workers in turn, marked
 * UM__ACCEPT_F_ADMIN (plain HTTP/1.1, or HTTP/2 with prior knowledge). Neither paused at
 * limits.max_connections nor counted in it (s->num_conns): it is how an operator looks at
 * an overloaded server. The rest waits for the next wake-up (level-triggered). */
static void accept_admin(struct um_server *s, unsigned *next_worker)
{
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        int fd = accept4(s->admin_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                um_log_err("admin: accept: %s", strerror(errno));
            return;
        }
        int entry = fd * UM__ACCEPT_SHIFT + (UM__ACCEPT_F_ADMIN | UM__ACCEPT_F_H2);
        um__mailbox_push(&s->workers[*next_worker % (unsigned)s->num_workers].mailbox, &entry, 1);
        *next_worker = (*next_worker + 1) % (unsigned)s->num_workers;
    }
}

/* Accepts until EAGAIN and hands the sockets to the workers in turn. Returns false when
 * accepting must pause (connection limit, or out of descriptors: then *no_fds is the errno).
 * A peer outside the listener's proxy_from is closed here, unanswered: it may not say
 * whose connection it is. */
static bool accept_some(struct um_server *s, int lfd, const struct um_listen *l,
                        unsigned *next_worker, int *no_fds)
{
    int flags = um__accept_flags(l);
    size_t max = s->config->limits.max_connections;
    for (;;) {
        int batch[ACCEPT_BATCH];
        size_t n = 0;
        bool pause = false, drained = false;
        while (n < ACCEPT_BATCH) {
            if (atomic_load(&s->num_conns) >= max) {
                pause = true;
                break;
            }
            struct sockaddr_storage peer;
            socklen_t peerlen = sizeof(peer);
            int fd = accept4(lfd, (struct sockaddr *)&peer, &peerlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0 && l->proxy_from &&
                !um_netmask_match(l->proxy_from, l->num_proxy_from, (struct sockaddr *)&peer)) {
                close(fd);
                um_counter_add(&um_metrics_worker()->proxy_refused, 1);
                continue;
            }
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    pause = true;
                    *no_fds = errno;
                } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                    um_log_err("accept: %s", strerror(errno));
                }
                drained = true;
                break;
            }
            atomic_fetch_add(&s->num_conns, 1);
            batch[n++] = fd * UM__ACCEPT_SHIFT + flags;
        }
        /* Spread the batch: one mailbox push (one wake-up) per worker. */
        for (int k = 0; k < s->num_workers && n > 0; k++) {
            int mine[ACCEPT_BATCH];
            size_t m = 0;
            unsigned w = (*next_worker + (unsigned)k) % (unsigned)s->num_workers;
            for (size_t i = (size_t)k; i < n; i += (size_t)s->num_workers)
                mine[m++] = batch[i];
            if (m)
                um__mailbox_push(&s->workers[w].mailbox, mine, m);
        }
        *next_worker = (*next_worker + (unsigned)n) % (unsigned)s->num_workers;
        if (pause)
            return false;
        if (drained)
            return true;
    }
}

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *listener_main(void *arg)
{
    struct um_server *s = arg;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    UM_ASSERT(epfd >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    UM_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, s->listener_efd, &ev) == 0);
    set_accepting(s, epfd, true);
    if (s->admin_fd >= 0) {
        struct epoll_event aev = {.events = EPOLLIN, .data.u64 = ADMIN_EVENT};
        UM_ASSERT(epoll_ctl(epfd, EPOLL_CTL_ADD, s->admin_fd, &aev) == 0);
    }
    bool paused = false;
    /* Out of descriptors, accepting resumes only after PAUSE_MS: resuming at once (the
     * connection count is low) would spin on EMFILE with the backlog still full. */
    int64_t resume_ms = 0, quiet_until = 0;
    unsigned next_worker = 0;
    for (;;) {
        struct epoll_event evs[16];
        int n = epoll_wait(epfd, evs, 16, paused ? PAUSE_MS : -1);
        if (n < 0 && errno != EINTR)
            break;
        bool stop = false;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == UINT64_MAX) {
                stop = true;
                break;
            }
            if (evs[i].data.u64 == ADMIN_EVENT) {
                accept_admin(s, &next_worker);
                continue;
            }
            size_t li = evs[i].data.u64;
            int no_fds = 0;
            if (!paused &&
                !accept_some(s, s->listen_fds[li], &s->config->listen[li], &next_worker, &no_fds)) {
                paused = true;
                set_accepting(s, epfd, false);
                if (no_fds) {
                    int64_t now = monotonic_ms();
                    resume_ms = now + PAUSE_MS;
                    if (now >= quiet_until) {
                        /* Once per 10 s: an attack that keeps us out of descriptors must not
                         * also fill the log at 10 lines a second. */
                        um_log_warn("accept: %s; pausing accepts (for %d ms at a time; logged "
                                    "at most every 10 s)", strerror(no_fds), PAUSE_MS);
                        quiet_until = now + 10000;
                    }
                }
            }
        }
        if (stop)
            break;
        if (paused && atomic_load(&s->num_conns) < s->config->limits.max_connections &&
            monotonic_ms() >= resume_ms) {
            paused = false;
            set_accepting(s, epfd, true);
        }
    }
    close(epfd);
    return NULL;
}

void um__listener_start(struct um_server *s)
{
    UM_ASSERT(pthread_create(&s->listener, NULL, listener_main, s) == 0);
}

void um__listener_stop(struct um_server *s)
{
    uint64_t v = 1;
    ssize_t w = write(s->listener_efd, &v, sizeof(v));
    (void)w;
    pthread_join(s->listener, NULL);
    w = read(s->listener_efd, &v, sizeof(v)); /* ready for the next start */
    (void)w;
}

void um__log_listening(struct um_server *s, const char *what)
{
    char line[1024];
    size_t off = 0;
    for (size_t i = 0; i < s->num_listen && off < sizeof(line) - 100; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char addr[80];
        getsockname(s->listen_fds[i], (struct sockaddr *)&ss, &len);
        format_addr(&ss, addr, sizeof(addr));
        off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s", i ? ", " : "", addr);
    }
    um_log_info("%s: now listening on %s", what, line);
}

void um__log_admin(struct um_server *s)
{
    if (s->admin_fd < 0) {
        um_log_info("admin: listener closed");
        return;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char addr[80];
    getsockname(s->admin_fd, (struct sockaddr *)&ss, &len);
    format_addr(&ss, addr, sizeof(addr));
    um_log_info("admin: serving /metrics and /status on %s", addr);
}

static void log_start(struct um_server *s)
{
    if (s->admin_fd >= 0)
        um__log_admin(s);
    char line[1024];
    size_t off = 0;
    for (size_t i = 0; i < s->num_listen && off < sizeof(line) - 100; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        char addr[80];
        getsockname(s->listen_fds[i], (struct sockaddr *)&ss, &len);
        format_addr(&ss, addr, sizeof(addr));
        off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s", i ? ", " : "", addr);
    }
    um_log_info("umbra %s listening on %s with %d workers (config %s)", UMBRA_VERSION, line,
                s->num_workers, s->config->file);
}

int um_server_run(struct um_server *s)
{
    sigset_t set;
    signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads inherit the mask */
    signal(SIGPIPE, SIG_IGN);

    s->num_workers = s->config->workers;
    s->started = time(NULL);
    um_metrics_init(s->num_workers);
    um_modules_init(); /* the slots of the worker contexts, in the list's order */
    s->workers = um_calloc((size_t)s->num_workers, sizeof(*s->workers));
    for (int i = 0; i < s->num_workers; i++) {
        um__worker_init(&s->workers[i], s, i);
        UM_ASSERT(pthread_create(&s->workers[i].thread, NULL, um__worker_main, &s->workers[i]) == 0);
    }
    /* Every descriptor the process needs for itself is made before the listener accepts:
     * clients may use up the rest at once (a test that starts under a low RLIMIT_NOFILE
     * crashed here when the admin's eventfd came after them). */
    s->admin = um__admin_start(s); /* its purges and samples; the listener accepts its socket */
    /* Signals arrive through a signalfd, beside the certificate watch, in one poll loop. */
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    UM_ASSERT(sfd >= 0);
    um__listener_start(s);
    /* Started: a signal sent to the PID in the file now finds the signalfd. Written before
     * the start-up line, so that whoever waits for that line finds the file. */
    if (s->pid_fd >= 0)
        um__pidfile_write(s->pid_fd, s->pid_path);
    log_start(s);
    um__notify("READY=1");
    bool quit = false;
    for (;;) {
        /* The signals, and what the running runtime's module states watch (umbra/module.h). */
        struct pollfd pfd[1 + UM_MODULES_MAX] = {{.fd = sfd, .events = POLLIN}};
        const struct um_module *watcher[1 + UM_MODULES_MAX];
        nfds_t npfd = 1;
        for (size_t m = 0; um_modules[m]; m++) {
            void *state = um_runtime_state(s->runtime, um_modules[m]);
            int fd = state && um_modules[m]->watch_fd ? um_modules[m]->watch_fd(state) : -1;
            if (fd < 0) continue;
            watcher[npfd] = um_modules[m];
            pfd[npfd++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        /* Snapshots a reload replaced are freed once unused: look every second. */
        int wait_ms = s->retired ? 1000 : -1;
        int pr = poll(pfd, npfd, wait_ms);
        if (s->retired)
            um__server_free_retired(s, false);
        if (pr <= 0)
            continue;
        for (nfds_t i = 1; i < npfd; i++)
            if (pfd[i].revents & POLLIN)
                watcher[i]->on_watch(um_runtime_state(s->runtime, watcher[i]));
        if (!(pfd[0].revents & POLLIN))
            continue;
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof(si)) != sizeof(si))
            continue;
        int sig = (int)si.ssi_signo;
        if (sig == SIGTERM || sig == SIGINT) {
            um_log_info("signal %d: stopping gracefully (up to %gs)", sig, s->config->timeouts.shutdown);
            break;
        }
        if (sig == SIGQUIT) {
            um_log_info("SIGQUIT: stopping now");
            quit = true;
            break;
        }
        if (sig == SIGHUP) {
            um__notify("RELOADING=1");
            for (size_t m = 0; um_modules[m]; m++) {
                void *state = um_runtime_state(s->runtime, um_modules[m]);
                if (state && um_modules[m]->reread) um_modules[m]->reread(state);
            }
            um__server_reload(s);
            um__notify("READY=1");
        }
        if (sig == SIGUSR1) {
            char msg[512];
            if (um_access_log_reopen(msg, sizeof(msg)))
                um_log_info("SIGUSR1: log files reopened");
            else
                um_log_err("SIGUSR1: %s", msg);
        }
    }
    close(sfd);
    um__notify("STOPPING=1");

    /* Stop accepting first, so that no socket arrives at a worker that is draining. */
    um__listener_stop(s);
    for (size_t i = 0; i < s->num_listen; i++)
        close(s->listen_fds[i]);
    s->num_listen = 0;
    if (s->admin_fd >= 0)
        close(s->admin_fd);
    s->admin_fd = -1;
    for (int i = 0; i < s->num_workers; i++)
        um__mailbox_signal(&s->workers[i].mailbox, true, quit);
    /* A second TERM/INT or a QUIT while draining stops at once. */
    for (int i = 0; i < s->num_workers; i++) {
        for (;;) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (pthread_timedjoin_np(s->workers[i].thread, NULL, &ts) == 0)
                break;
            struct timespec zero = {0, 0};
            int sig = sigtimedwait(&set, NULL, &zero);
            if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
                um_log_info("signal %d while draining: stopping now", sig);
                for (int k = 0; k < s->num_workers; k++)
                    um__mailbox_signal(&s->workers[k].mailbox, true, true);
            }
        }
    }
    um__admin_stop(s->admin);
    s->admin = NULL;
    um_log_info("stopped");
    return 0;
}

void um_server_destroy(struct um_server *s)
{
    /* The disk's last reads post to the workers' loops: closed while those still exist
     * (stopped, so what they would have run is freed with them). */
    um_module_run(&um_disk_module, NULL);
    um_disk_tier_close(s->disk);
    s->disk = NULL;
    for (int i = 0; i < s->num_workers; i++)
        um__worker_dispose(&s->workers[i]);
    free(s->workers);
    um_module_run(&um_l2_module, NULL);
    um_module_run(&um_tls_module, NULL);
    um_l2_destroy(s->l2);
    s->l2 = NULL;
    for (size_t i = 0; i < s->num_listen; i++)
        close(s->listen_fds[i]);
    free(s->listen_fds);
    close(s->listener_efd);
    if (s->admin_fd >= 0)
        close(s->admin_fd);
    um__server_free_retired(s, true);
    um_runtime_unref(s->runtime); /* the routes' origins go with it */
    pthread_mutex_destroy(&s->config_lock);
    um__pidfile_release(s->pid_fd, s->pid_path);
    free(s->pid_path);
    if (s->cache) {
        um_module_run(&um_cache_module, NULL);
        um_cache_stop_cleaner(s->cache);
        um_cache_destroy(s->cache);
    }
    free(s);
}
