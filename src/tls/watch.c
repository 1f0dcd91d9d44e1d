/* SPDX-License-Identifier: BSD-2-Clause */
/* The TLS store's file watching: inotify on the certificates' folders, a reload after a burst of changes. */
#include "umbra/tls.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "umbra/config.h"
#include "umbra/log.h"
#include "internal.h"

void um__tls_sig_of(const char *file, struct file_sig *s)
{
    struct stat st;
    memset(s, 0, sizeof *s);
    if (stat(file, &st) != 0)
        return;
    s->exists = true;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->size = st.st_size;
    s->mtime = st.st_mtim;
    s->ctime = st.st_ctim;
}

bool um__tls_sig_eq(const struct file_sig *a, const struct file_sig *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
           a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
           a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static void add_dir(struct um_tls *t, const char *file)
{
    const char *slash = strrchr(file, '/');
    if (slash == NULL)
        return;
    size_t n = slash == file ? 1 : (size_t)(slash - file);
    for (size_t i = 0; i < t->num_dirs; i++)
        if (strlen(t->dirs[i]) == n && memcmp(t->dirs[i], file, n) == 0)
            return;
    t->dirs = um_realloc(t->dirs, (t->num_dirs + 1) * sizeof *t->dirs);
    t->dirs[t->num_dirs++] = um_strndup(file, n);
}

/* (Re)adds the watches; a directory that was removed and created again gets a new one. */
static void add_watches(struct um_tls *t, bool log)
{
    for (size_t i = 0; i < t->num_dirs; i++)
        if (inotify_add_watch(t->inofd, t->dirs[i],
                              IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                  IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF) < 0 &&
            log)
            um_log_warn("tls: cannot watch %s for certificate changes: %s", t->dirs[i],
                        strerror(errno));
}

void um__tls_start_watching(struct um_tls *t)
{
    for (size_t i = 0; i < t->num_entries; i++) {
        const char *files[] = {t->entries[i].cert, t->entries[i].key};
        for (size_t j = 0; j < 2; j++) {
            add_dir(t, files[j]);
            char *real = realpath(files[j], NULL);
            if (real != NULL) {
                add_dir(t, real);
                free(real);
            }
        }
    }
    struct epoll_event ev = {.events = EPOLLIN};
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->inofd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    t->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (t->epfd < 0 || t->inofd < 0 || t->timerfd < 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->inofd, &ev) != 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->timerfd, &ev) != 0) {
        um_log_warn("tls: cannot watch certificate files (%s); they reload on HUP only",
                    strerror(errno));
        if (t->epfd >= 0)
            close(t->epfd);
        if (t->inofd >= 0)
            close(t->inofd);
        if (t->timerfd >= 0)
            close(t->timerfd);
        t->epfd = t->inofd = t->timerfd = -1;
        return;
    }
    add_watches(t, true);
}

void um__tls_stop_watching(struct um_tls *t)
{
    if (t->epfd >= 0) {
        close(t->epfd);
        close(t->inofd);
        close(t->timerfd);
    }
    t->epfd = t->inofd = t->timerfd = -1;
}

int um_tls_watch_fd(struct um_tls *t)
{
    return t->epfd;
}

static int64_t ns_of(const struct timespec *ts)
{
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

int um_tls_on_watch(struct um_tls *t)
{
    if (t->epfd < 0)
        return 0;
    /* inotify events are only a hint that something in a directory changed: the file
     * identities decide. So their content (and an overflow of the queue) does not matter. */
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool changed = false;
    for (;;) {
        ssize_t r = read(t->inofd, buf, sizeof buf);
        if (r > 0) {
            changed = true;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    if (changed) {
        /* UM_TLS_WATCH_DELAY_MS after the last change, but no later than
         * WATCH_MAX_DELAY_MS after the first: a directory that never stays quiet (some
         * other file rewritten all the time) must not hold a reload back forever. */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!t->pending)
            t->first = now;
        t->pending = true;
        int64_t at = ns_of(&now) + UM_TLS_WATCH_DELAY_MS * 1000000LL;
        int64_t cap = ns_of(&t->first) + WATCH_MAX_DELAY_MS * 1000000LL;
        if (at > cap)
            at = cap;
        struct itimerspec its = {{0, 0}, {(time_t)(at / 1000000000), (long)(at % 1000000000)}};
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1; /* zero would disarm */
        timerfd_settime(t->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
        return 0;
    }
    uint64_t expirations;
    if (read(t->timerfd, &expirations, sizeof expirations) != (ssize_t)sizeof expirations ||
        !t->pending)
        return 0;
    t->pending = false;
    /* A directory that was replaced needs a new watch. */
    add_watches(t, false);
    return um__tls_reload(t, true, NULL, 0);
}

