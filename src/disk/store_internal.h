/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the disk store share (store.c's note describes the design): the
 * store's state, its jobs, and small helpers. store.c: open, close, the superblock, the
 * writer, the API; snapshot.c: index snapshots and the rebuild at open; read.c: reads. */
#ifndef UMBRA_DISK_STORE_INTERNAL_H
#define UMBRA_DISK_STORE_INTERNAL_H

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "umbra/disk.h"
#include "umbra/log.h"
#include "umbra/loop.h"

#include "internal.h"

#define BLOCK ((uint64_t)UM__DISK_BLOCK)
#define MIN_SIZE (256u * 1024u)
#define DEFAULT_QUEUE (64u * 1024u * 1024u)

/* A record queued for the writer, or a barrier (buf NULL) for um_disk_sync. */
struct wjob {
    struct wjob *next;
    char *buf;
    uint64_t pos;
    uint64_t hi, lo;
    uint32_t len, alen;
    bool tomb, cancelled;
    bool snapshot, done; /* barrier */
};

/* A read; task first, so the posted task is the job. */
struct rjob {
    struct um_task task;
    struct rjob *next;
    struct um_disk *d;
    uint64_t hi, lo, pos;
    uint32_t len;
    struct um_loop *loop;
    um_disk_read_cb cb;
    void *arg;
    int status;
    char *buf;
    um_str meta, body;
    uint64_t t0; /* when the read was asked for (microseconds, monotonic) */
};

/* Kept record buffers: classes of 1 to UM__DISK_POOL_CLASSES blocks, and at most
 * UM__DISK_POOL_BYTES in all. */
#define UM__DISK_POOL_CLASSES 64
#define UM__DISK_POOL_BYTES (4u << 20)

struct um_disk {
    char *path, *snap_path, *snap_tmp;
    int fd;
    uint64_t size, span;
    uint64_t store_id, seed;
    uint32_t sync_ms, snapshot_ms, delay_ms;
    uint64_t queue_max;

    pthread_mutex_t mu;
    pthread_cond_t wcond; /* the writer: a job, or closing (CLOCK_MONOTONIC) */
    pthread_cond_t rcond; /* the readers */
    pthread_cond_t done;  /* barriers done */
    /* Under mu: */
    struct um__disk_index idx;
    uint64_t cursor;
    struct wjob *wq_head, *wq_tail;
    struct rjob *rq_head, *rq_tail;
    bool closing;
    bool changed; /* the index changed since the last snapshot */
    struct um_disk_stats st;
    /* Record buffers kept for the next write or read of their size (um__disk_buf_take):
     * pool[k] holds buffers of k blocks, linked through their first word. */
    void *pool[UM__DISK_POOL_CLASSES + 1];
    uint64_t pool_bytes;

    /* The writer's own (and close's, after the writer is joined): */
    bool dirty; /* written since the last fdatasync */
    uint64_t last_sync_ms, last_snap_ms;
    uint64_t super_cursor, super_synced; /* what the superblock says */
    uint64_t written; /* the end of the last record written */

    pthread_t writer;
    pthread_t *readers;
    unsigned nreaders;
};

/* ---------------------------------------------------------------- helpers */

static inline uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void sleep_ms(uint32_t ms)
{
    if (!ms)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A buffer of at least alen bytes (a multiple of BLOCK), BLOCK-aligned, for a record:
 * one kept by the store, or a new one. Either way free() may free it; given back with
 * um__disk_buf_give it is kept (up to UM__DISK_POOL_BYTES a store) for the next taker,
 * which saves the worker an aligned malloc of tens of KiB and the writer its free in
 * another thread's arena per miss, and a disk hit its read buffer's. Both under d->mu. */
char *um__disk_buf_take(struct um_disk *d, uint64_t alen);
void um__disk_buf_give(struct um_disk *d, char *buf, uint64_t alen);

static inline uint64_t round_up(uint64_t n, uint64_t to)
{
    return (n + to - 1) / to * to;
}

static inline char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static inline char *fmt(const char *f, ...)
{
    char *s = um_malloc(1024);
    va_list ap;
    va_start(ap, f);
    vsnprintf(s, 1024, f, ap);
    va_end(ap);
    return s;
}

/* pread or pwrite all n bytes at off, through short counts and EINTR; a zero count
 * (end of file) is EIO. */
static inline int io_all(int fd, void *buf, size_t n, uint64_t off, bool write)
{
    char *p = buf;
    while (n) {
        ssize_t r = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? (errno = EIO, UM_ERR) : UM_ERR;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return UM_OK;
}

static inline int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    return io_all(fd, buf, n, off, false);
}

static inline int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    return io_all(fd, (void *)buf, n, off, true);
}

/* The file offset of log position pos. */
static inline uint64_t phys(const struct um_disk *d, uint64_t pos)
{
    return BLOCK + pos % d->span;
}

static inline void fsync_dir(const char *path)
{
    char *copy = um_strndup(path, strlen(path));
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(copy);
}


/* store.c */
int um__disk_write_super(struct um_disk *d, uint64_t cursor, uint64_t synced);
/* read.c: a reader thread's loop (arg: the store) */
void *um__disk_reader_main(void *arg);
/* snapshot.c */
void um__disk_do_sync(struct um_disk *d);
int um__disk_write_snapshot(struct um_disk *d);
void um__disk_rebuild(struct um_disk *d);

#endif
