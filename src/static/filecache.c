/* SPDX-License-Identifier: BSD-2-Clause */
/* The worker's small-file cache (internal.h): the bytes and the fields of small files,
 * so that asking for one again costs one stat instead of openat2, fstat, sendfile and
 * close.
 *
 * An entry is found by its origin's generation (never reused, unlike an address: a reload
 * makes new origins), whether a directory was asked for, and the path asked for. Every use
 * checks it first with one fstatat of the path it was read from (following symlinks, from
 * the root's descriptor): a different device, inode, size, mtime or ctime (a write, a
 * rename over it, a chmod) drops it, and the request takes the full path again, whose
 * openat2(RESOLVE_BENEATH) is what decides what may be served. A path that now leads
 * somewhere else (a symlink swapped in) names another inode, so the check never serves
 * what the root does not hold. As git does with its index, a file changed too recently
 * for its timestamps to tell the next change apart is not kept. Entries live in a table per worker, oldest evicted first
 * past a byte budget. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/context.h"
#include "umbra/loop.h"
#include "umbra/module.h"

/* The worker's small-file cache (struct files). */
static void on_stop(struct um_context *ctx, void *state);
static struct um_context_slot files_slot = {.name = "small-file cache", .stop = on_stop};

const struct um_module um_static_module = {
    .name = "static",
    .slots = (struct um_context_slot *const[]){&files_slot, NULL},
};

#define BUCKETS 512          /* a power of two */
#define BUDGET (8u << 20)    /* bytes of bodies and paths per worker */

struct files {
    struct um_context *ctx;
    struct um__file *buckets[BUCKETS];
    struct um__file *oldest, *newest; /* in order of insertion */
    size_t bytes;
};

static uint64_t hash_of(uint64_t gen, bool dir, const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (gen * 0x9e3779b97f4a7c15ull) ^ dir;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static size_t cost(const struct um__file *e)
{
    return sizeof(*e) + e->key_len + e->path_len + (size_t)e->st.st_size;
}

static void unlink_entry(struct files *fs, struct um__file *e)
{
    struct um__file **p = &fs->buckets[e->hash & (BUCKETS - 1)];
    while (*p != e)
        p = &(*p)->h_next;
    *p = e->h_next;
    if (e->older) e->older->newer = e->newer;
    else fs->oldest = e->newer;
    if (e->newer) e->newer->older = e->older;
    else fs->newest = e->older;
    fs->bytes -= cost(e);
    free(e);
}

static void on_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct files *fs = state;
    while (fs->oldest)
        unlink_entry(fs, fs->oldest);
    um_context_set(fs->ctx, &files_slot, NULL);
    free(fs);
}

static struct files *files_of(struct um_context *ctx)
{
    struct files *fs = um_context_get(ctx, &files_slot);
    if (fs) return fs;
    fs = um_calloc(1, sizeof(*fs));
    fs->ctx = ctx;
    um_context_set(ctx, &files_slot, fs);
    return fs;
}

/* Whether b is still the regular file a was. */
static bool same_file(const struct stat *a, const struct stat *b)
{
    return S_ISREG(b->st_mode) && b->st_dev == a->st_dev && b->st_ino == a->st_ino &&
           b->st_size == a->st_size && b->st_mtim.tv_sec == a->st_mtim.tv_sec &&
           b->st_mtim.tv_nsec == a->st_mtim.tv_nsec && b->st_ctim.tv_sec == a->st_ctim.tv_sec &&
           b->st_ctim.tv_nsec == a->st_ctim.tv_nsec;
}

const struct um__file *um__static_file_find(struct um_context *ctx, uint64_t gen, int root_fd,
                                           bool dir, const char *key, size_t key_len)
{
    struct files *fs = um_context_get(ctx, &files_slot);
    if (fs == NULL) return NULL;
    uint64_t h = hash_of(gen, dir, key, key_len);
    for (struct um__file *e = fs->buckets[h & (BUCKETS - 1)]; e; e = e->h_next) {
        if (e->hash != h || e->gen != gen || e->dir != dir || e->key_len != key_len ||
            memcmp(e->key, key, key_len) != 0)
            continue;
        struct stat st;
        if (fstatat(root_fd, e->path, &st, 0) == 0 && same_file(&e->st, &st)) return e;
        unlink_entry(fs, e); /* changed or gone: the full path decides */
        return NULL;
    }
    return NULL;
}

struct um__file *um__static_file_add(struct um_context *ctx, uint64_t gen, bool dir,
                                          const char *key, size_t key_len, const char *path,
                                          size_t path_len, int fd, const struct stat *st)
{
    if (!S_ISREG(st->st_mode) || st->st_size > UM__STATIC_SMALL_FILE) return NULL;
    /* A file changed in the last second or two is not kept: its next change could get
     * the same (coarse) timestamps and go unseen. One older than that gets a later ctime
     * from any change after this read. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (st->st_mtim.tv_sec >= now.tv_sec - 1 || st->st_ctim.tv_sec >= now.tv_sec - 1)
        return NULL;
    size_t size = (size_t)st->st_size;
    struct um__file *e = um_malloc(sizeof(*e) + size + key_len + 1 + path_len + 1);
    char *body = (char *)(e + 1);
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, body + got, size - got, (off_t)got);
        if (r <= 0) {
            free(e);
            return NULL;
        }
        got += (size_t)r;
    }
    /* Read after the bytes: a file written meanwhile has another mtime than this. */
    struct stat after;
    if (fstat(fd, &after) != 0 || !same_file(st, &after)) {
        free(e);
        return NULL;
    }
    e->body = body;
    e->key = body + size;
    memcpy(e->key, key, key_len);
    e->key[key_len] = '\0';
    e->key_len = key_len;
    e->path = e->key + key_len + 1;
    memcpy(e->path, path, path_len);
    e->path[path_len] = '\0';
    e->path_len = path_len;
    e->gen = gen;
    e->dir = dir;
    e->st = *st;
    e->hash = hash_of(gen, dir, key, key_len);

    struct files *fs = files_of(ctx);
    fs->bytes += cost(e);
    while (fs->bytes > BUDGET && fs->oldest)
        unlink_entry(fs, fs->oldest);
    struct um__file **b = &fs->buckets[e->hash & (BUCKETS - 1)];
    e->h_next = *b;
    *b = e;
    e->older = fs->newest;
    e->newer = NULL;
    if (fs->newest) fs->newest->newer = e;
    else fs->oldest = e;
    fs->newest = e;
    return e;
}
