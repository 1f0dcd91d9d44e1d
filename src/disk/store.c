/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store: one preallocated file written as a log at a cursor that cycles around.
 *
 * The design (after Traffic Server's cyclone buffer and Squid's rock store; no code of
 * theirs):
 *
 * Layout. Block 0 (4 KiB) is the superblock: magic, format version, file size, a random
 * store id drawn at each initialisation, the log position of the last index snapshot and
 * the end of the log at the last sync, with an XXH3 of those fields. The rest of the
 * file, the data region of `span` bytes, is the log. A record is a 64-byte header (magic,
 * version, flags, store id, 128-bit key hash, log position, metadata and body lengths,
 * write time), the metadata blob, the body, the XXH3-64 of all of these (8 bytes), then
 * zeros up to the next 4 KiB block.
 *
 * Log positions. The cursor is a 64-bit log position that only grows; a record at
 * position p lives at file offset 4096 + p % span. A record never wraps: one that would
 * cross the region's end starts at the next lap's beginning instead (the tail is skipped).
 * The position doubles as the write sequence number, and is written in the header, so a
 * record of an earlier lap (or of an earlier life of the file: the store id) is told from
 * the one the index expects. A record [p, p+len) stays whole while the cursor is at most
 * p + span; reserving space for a write moves the cursor first, so the index drops (and
 * counts as evicted) every entry below cursor - span before any byte of them is
 * overwritten. The index keeps its entries in log order, so that is a pop from a list.
 *
 * Writes. um_disk_write copies the record into a block-aligned buffer on the caller's
 * thread (um_disk_write_rec takes one the caller built the record in: a fill of known
 * length is gathered there as it passes, no copy), then, under the mutex, reserves its position and queues it for the one writer
 * thread, in the same critical section, so the queue is in log order and the writer
 * writes the log front to back with no holes. The queue is bounded in bytes (opts
 * queue_max, at most a quarter of the span, so a pending write is never lapped): a write
 * that does not fit is dropped and counted, memory never grows. The writer computes the
 * checksum, pwrites the record, and only then puts it in the index: a lookup never finds
 * a record still being written. It fdatasyncs at most every sync_ms while records
 * complete, so a power cut loses at most the last sync_ms of writes; a kill -9 loses only
 * what was still queued (the page cache keeps what pwrite returned).
 *
 * Reads. A lookup is memory only. um_disk_read queues the record's position and length to
 * the reader threads, which pread it and check magic, version, store id, key, position,
 * lengths and checksum; the callback is posted to the caller's loop (um_loop_post). A bad
 * record that the index still holds at that position is dropped from it and counted (a
 * checksum failure) and the caller gets a miss; one the cursor reached meanwhile is a miss
 * and no failure. A wrong body is never handed out.
 *
 * Removal. um_disk_remove drops the entry, marks queued writes of the key so that they do
 * not enter the index, and queues a tombstone record (a header with no body) so that a
 * rebuild that scans the log after the snapshot does not bring the key back.
 *
 * Snapshots. Every snapshot_ms while the index changed, at um_disk_sync(.., true) and at
 * close, the writer syncs the file, then writes every index entry to path.index.tmp with
 * the snapshot's cursor C (the position of the oldest write still queued, else the
 * cursor), fsyncs it, renames it over path.index, fsyncs the directory, and writes C in
 * the superblock. Every record below C is reflected in the snapshot: records complete in
 * log order, and only the writer adds entries (it is busy writing the snapshot), so an
 * entry removed or evicted while the snapshot is copied, chunk by chunk under the mutex,
 * is removed again by its tombstone or by the cursor at the rebuild.
 *
 * Rebuild (um_disk_open). Load the snapshot when it belongs to this file (store id, size,
 * checksums) and is less than a lap behind the log's synced end (superblock); then scan
 * the log from C: at position q a record must carry position q and a good checksum; when
 * not, the writer may have skipped to the next lap, so try its beginning; else the log
 * ends at q (a torn or never-written record) and the cursor resumes there. A record of a
 * later lap where q's should be means the log went round since: then, as without a
 * usable snapshot, every block of the region is probed (a whole-store read) and the
 * valid records are applied in log order. Then entries below cursor - span are evicted.
 * (An entry a reader dropped as bad while a snapshot was copied may come back with it:
 * its next read drops it again; it is never served.)
 *
 * Refusals. A file that is not a store, has another format version, or another size, is
 * refused with a message that names the path and says what differs, or reinitialised
 * (new store id, emptied) when reset_incompatible is set.
 *
 * Limits. A record is at most min(4 GiB, queue_max) bytes (the cache stores larger objects
 * in slices). The index takes about 44 bytes an object (40 an entry, 4 a bucket, chunks of
 * 1024 entries), under one mutex per store: several stores spread the keys (um_disk_pick)
 * and the contention. The rebuild from a snapshot reads 32 bytes an object plus the log
 * after it; without a snapshot it reads the whole store. The I/O is buffered (page cache),
 * not O_DIRECT, though records and buffers are aligned for it. The store is in the host's
 * byte order. A remove or an overwrite is as durable as its tombstone or record: one not
 * synced before a power cut may come undone. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <sys/uio.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "umbra/disk.h"
#include "umbra/log.h"
#include "umbra/loop.h"

#include "store_internal.h"

struct um_disk_key um_disk_key_of(const void *p, size_t n)
{
    XXH128_hash_t h = XXH3_128bits(p, n);
    return (struct um_disk_key){h.high64, h.low64};
}

/* ---------------------------------------------------------------- superblock */

int um__disk_write_super(struct um_disk *d, uint64_t cursor, uint64_t synced)
{
    static const char zero[UM__DISK_BLOCK];
    struct um__disk_super s;
    memset(&s, 0, sizeof(s));
    memcpy(s.magic, UM__DISK_SUPER_MAGIC, 8);
    s.version = UM__DISK_VERSION;
    s.block = UM__DISK_BLOCK;
    s.size = d->size;
    s.store_id = d->store_id;
    s.cursor = cursor;
    s.synced = synced;
    s.check = XXH3_64bits(&s, offsetof(struct um__disk_super, check));
    /* The fields sit in the block's first sector, which a device writes whole. */
    if (pwrite_all(d->fd, &s, sizeof(s), 0) != UM_OK ||
        pwrite_all(d->fd, zero, sizeof(zero) - sizeof(s), sizeof(s)) != UM_OK)
        return UM_ERR;
    d->super_cursor = cursor;
    d->super_synced = synced;
    return UM_OK;
}

/* Why the superblock s (of a file of file_size bytes) is not a store this build can open
 * at d->size, or NULL. */
static char *super_refusal(const struct um_disk *d, const struct um__disk_super *s,
                           uint64_t file_size)
{
    if (memcmp(s->magic, UM__DISK_SUPER_MAGIC, 8) != 0)
        return fmt("it is not an Umbra disk store (no superblock)");
    if (s->version != UM__DISK_VERSION)
        return fmt("it was written by store format version %u; this build uses version %u",
                   s->version, UM__DISK_VERSION);
    if (s->check != XXH3_64bits(s, offsetof(struct um__disk_super, check)))
        return fmt("its superblock is damaged (checksum)");
    if (s->block != UM__DISK_BLOCK)
        return fmt("its block size is %u, not %u", s->block, UM__DISK_BLOCK);
    if (s->size != d->size || file_size != d->size)
        return fmt("it was made with size %llu (the file has %llu bytes); the configuration "
                   "says %llu",
                   (unsigned long long)s->size, (unsigned long long)file_size,
                   (unsigned long long)d->size);
    return NULL;
}

/* Empties the store: a new id (so nothing of the file's past matches), cursor 0. */
static char *initialise(struct um_disk *d, uint64_t file_size)
{
    if (file_size > d->size && ftruncate(d->fd, (off_t)d->size) != 0)
        return fmt("cannot truncate it: %s", strerror(errno));
    int e = posix_fallocate(d->fd, 0, (off_t)d->size);
    if (e != 0)
        return fmt("cannot allocate %llu bytes: %s", (unsigned long long)d->size, strerror(e));
    if (getrandom(&d->store_id, sizeof(d->store_id), 0) != (ssize_t)sizeof(d->store_id))
        return fmt("getrandom: %s", strerror(errno));
    if (um__disk_write_super(d, 0, 0) != UM_OK || fdatasync(d->fd) != 0)
        return fmt("cannot write its superblock: %s", strerror(errno));
    if (unlink(d->snap_path) != 0 && errno != ENOENT)
        return fmt("cannot remove %s: %s", d->snap_path, strerror(errno));
    fsync_dir(d->path);
    d->cursor = 0;
    return NULL;
}

/* ---------------------------------------------------------------- the writer */

/* Records the writer takes at once: a run that follows each other in the file, written
 * with one pwritev (a miss costs the store one system call in BATCH_MAX, not one each). */
#define BATCH_MAX 64
/* How long the writer, woken by a write, waits for the ones behind it. */
#define GATHER_MS 1

/* Writes the run b[0..n) (checksums first): true when all of it reached the file. */
static bool write_run(struct um_disk *d, struct wjob *const *b, size_t n)
{
    struct iovec iov[BATCH_MAX];
    for (size_t i = 0; i < n; i++) {
        sleep_ms(d->delay_ms);
        uint64_t check = XXH3_64bits(b[i]->buf, b[i]->len - 8);
        memcpy(b[i]->buf + b[i]->len - 8, &check, 8);
        iov[i] = (struct iovec){b[i]->buf, b[i]->alen};
    }
    uint64_t off = phys(d, b[0]->pos);
    size_t first = 0;
    while (first < n) {
        ssize_t r = pwritev(d->fd, iov + first, (int)(n - first), (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            um_log(UM_LOG_ERR, "disk store %s: write at %llu: %s", d->path,
                   (unsigned long long)off, r == 0 ? "no progress" : strerror(errno));
            return false;
        }
        off += (uint64_t)r;
        /* A short write: on from where it stopped. */
        while (first < n && (size_t)r >= iov[first].iov_len)
            r -= (ssize_t)iov[first++].iov_len;
        if (first < n) {
            iov[first].iov_base = (char *)iov[first].iov_base + r;
            iov[first].iov_len -= (size_t)r;
        }
    }
    return true;
}

/* Under mu: the run of records at the queue's head that follow each other in the file
 * (the log's wrap, or a barrier, ends it), at most BATCH_MAX. */
static size_t take_run(struct um_disk *d, struct wjob **b)
{
    size_t n = 0;
    for (struct wjob *k = d->wq_head; k && k->buf && n < BATCH_MAX; k = k->next) {
        if (n && (b[n - 1]->pos + b[n - 1]->alen != k->pos ||
                  phys(d, b[n - 1]->pos) + b[n - 1]->alen != phys(d, k->pos)))
            break;
        b[n++] = k;
    }
    return n;
}

/* Called with mu held, returns with it held: the sync and the snapshot when due. */
static void duties(struct um_disk *d)
{
    uint64_t now = now_ms();
    bool sync = d->dirty && now >= d->last_sync_ms + d->sync_ms;
    bool snap = d->changed && now >= d->last_snap_ms + d->snapshot_ms;
    if (!sync && !snap)
        return;
    pthread_mutex_unlock(&d->mu);
    if (snap)
        um__disk_write_snapshot(d);
    else
        um__disk_do_sync(d);
    pthread_mutex_lock(&d->mu);
}

static void *writer_main(void *arg)
{
    struct um_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        struct wjob *j = d->wq_head;
        if (!j) {
            if (d->closing)
                break;
            uint64_t due = UINT64_MAX;
            if (d->dirty)
                due = d->last_sync_ms + d->sync_ms;
            if (d->changed && d->last_snap_ms + d->snapshot_ms < due)
                due = d->last_snap_ms + d->snapshot_ms;
            if (due == UINT64_MAX) {
                pthread_cond_wait(&d->wcond, &d->mu);
            } else if (due > now_ms()) {
                struct timespec ts = {(time_t)(due / 1000), (long)(due % 1000) * 1000000L};
                pthread_cond_timedwait(&d->wcond, &d->mu, &ts);
            } else {
                duties(d);
            }
            if (d->wq_head && d->wq_head->buf && !d->closing) {
                /* Woken by a write: the ones right behind it are let in first, so that a
                 * run of misses costs the writer one wake-up and one pwritev, not one
                 * each (write-behind: a millisecond changes nothing for a client). */
                pthread_mutex_unlock(&d->mu);
                sleep_ms(GATHER_MS);
                pthread_mutex_lock(&d->mu);
            }
            continue;
        }
        if (!j->buf) {
            pthread_mutex_unlock(&d->mu);
            if (j->snapshot)
                um__disk_write_snapshot(d);
            else
                um__disk_do_sync(d);
            pthread_mutex_lock(&d->mu);
            d->wq_head = j->next;
            if (!d->wq_head)
                d->wq_tail = NULL;
            j->done = true;
            pthread_cond_broadcast(&d->done);
            continue;
        }
        struct wjob *run[BATCH_MAX];
        size_t n = take_run(d, run);
        pthread_mutex_unlock(&d->mu);
        bool ok = write_run(d, run, n);
        pthread_mutex_lock(&d->mu);
        d->wq_head = run[n - 1]->next;
        if (!d->wq_head)
            d->wq_tail = NULL;
        for (size_t i = 0; i < n; i++) {
            j = run[i];
            d->st.queue_bytes -= j->alen;
            if (ok) {
                d->dirty = true;
                d->written = j->pos + j->alen;
                d->st.writes++;
                d->st.write_bytes += j->alen;
                if (!j->tomb && !j->cancelled) {
                    um__disk_index_put(&d->idx, j->hi, j->lo, j->pos, j->len);
                    d->changed = true;
                }
            } else {
                d->st.io_errors++;
            }
            um__disk_buf_give(d, j->buf, j->alen);
            free(j);
        }
        duties(d);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

char *um__disk_buf_take(struct um_disk *d, uint64_t alen)
{
    uint64_t k = alen / BLOCK;
    char *buf = NULL;
    if (k <= UM__DISK_POOL_CLASSES && (buf = d->pool[k]) != NULL) {
        d->pool[k] = *(void **)buf;
        d->pool_bytes -= alen;
        return buf;
    }
    UM_ASSERT(posix_memalign((void **)&buf, BLOCK, alen) == 0);
    return buf;
}

void um__disk_buf_give(struct um_disk *d, char *buf, uint64_t alen)
{
    uint64_t k = alen / BLOCK;
    if (buf == NULL) return;
    if (k > UM__DISK_POOL_CLASSES || d->pool_bytes + alen > UM__DISK_POOL_BYTES) {
        free(buf);
        return;
    }
    *(void **)buf = d->pool[k];
    d->pool[k] = buf;
    d->pool_bytes += alen;
}

char *um_disk_rec_alloc(struct um_disk *d, size_t meta_len, size_t body_len, size_t *head)
{
    uint64_t alen = round_up(UM__DISK_REC_LEN(meta_len, body_len), BLOCK);
    if (alen > UINT32_MAX) return NULL;
    pthread_mutex_lock(&d->mu);
    char *buf = um__disk_buf_take(d, alen);
    pthread_mutex_unlock(&d->mu);
    *head = sizeof(struct um__disk_rec);
    return buf;
}

/* Queues buf (from um_disk_rec_alloc, meta and body in place; taken, freed when refused)
 * as key's record: the header and the checksum's room filled, its place reserved and it
 * queued in one critical section. */
static int submit_rec(struct um_disk *d, struct um_disk_key key, char *buf, size_t meta_len,
                      size_t blen, bool tomb)
{
    uint64_t len = UM__DISK_REC_LEN(meta_len, blen);
    uint64_t alen = round_up(len, BLOCK);
    struct um__disk_rec *h = (struct um__disk_rec *)buf;
    memset(h, 0, sizeof(*h));
    h->magic = UM__DISK_REC_MAGIC;
    h->version = UM__DISK_VERSION;
    h->flags = tomb ? UM__DISK_REC_TOMB : 0;
    h->store_id = d->store_id;
    h->key_hi = key.hi;
    h->key_lo = key.lo;
    h->meta_len = (uint32_t)meta_len;
    h->body_len = (uint32_t)blen;
    h->written = (uint64_t)time(NULL);
    memset(buf + len - 8, 0, alen - len + 8);
    struct wjob *j = um_calloc(1, sizeof(*j));
    j->buf = buf;
    j->hi = key.hi;
    j->lo = key.lo;
    j->len = (uint32_t)len;
    j->alen = (uint32_t)alen;
    j->tomb = tomb;

    pthread_mutex_lock(&d->mu);
    if (d->closing || d->st.queue_bytes + alen > d->queue_max) {
        d->st.drops++;
        pthread_mutex_unlock(&d->mu);
        free(buf);
        free(j);
        return UM_ERR;
    }
    uint64_t at = d->cursor % d->span;
    if (at + alen > d->span)
        d->cursor += d->span - at;
    j->pos = d->cursor;
    h->pos = j->pos;
    d->cursor += alen;
    if (d->cursor > d->span) {
        uint64_t n = um__disk_index_evict(&d->idx, d->cursor - d->span);
        if (n) {
            d->st.evictions += n;
            d->changed = true;
        }
    }
    /* The writer is woken by the write that finds the queue empty; the ones that follow
     * while it gathers join its next run without a wake-up of their own. */
    bool wake = d->wq_tail == NULL;
    if (d->wq_tail)
        d->wq_tail->next = j;
    else
        d->wq_head = j;
    d->wq_tail = j;
    d->st.queue_bytes += alen;
    if (wake)
        pthread_cond_signal(&d->wcond);
    pthread_mutex_unlock(&d->mu);
    return UM_OK;
}

int um_disk_write_rec(struct um_disk *d, struct um_disk_key key, char *rec, size_t meta_len,
                      size_t body_len)
{
    return submit_rec(d, key, rec, meta_len, body_len, false);
}

/* Copies the record into a buffer of its own, then queues it (submit_rec). */
static int submit(struct um_disk *d, struct um_disk_key key, um_str meta, const void *body,
                  size_t blen, bool tomb)
{
    uint64_t alen = round_up(UM__DISK_REC_LEN(meta.len, blen), BLOCK);
    pthread_mutex_lock(&d->mu);
    /* Refused before the copy is made: a full queue costs no allocation. */
    bool refuse = d->closing || meta.len > UINT32_MAX || blen > UINT32_MAX || alen > UINT32_MAX ||
                  d->st.queue_bytes + alen > d->queue_max;
    if (refuse) d->st.drops++;
    pthread_mutex_unlock(&d->mu);
    if (refuse) return UM_ERR;
    size_t head;
    char *buf = um_disk_rec_alloc(d, meta.len, blen, &head);
    UM_ASSERT(buf != NULL);
    if (meta.len) memcpy(buf + head, meta.base, meta.len);
    if (blen) memcpy(buf + head + meta.len, body, blen);
    return submit_rec(d, key, buf, meta.len, blen, tomb);
}

int um_disk_write(struct um_disk *d, struct um_disk_key key, um_str meta, const void *body,
                  size_t len)
{
    return submit(d, key, meta, body, len, false);
}

bool um_disk_remove(struct um_disk *d, struct um_disk_key key)
{
    pthread_mutex_lock(&d->mu);
    bool had = um__disk_index_del(&d->idx, key.hi, key.lo, UINT64_MAX);
    bool queued = false;
    for (struct wjob *j = d->wq_head; j; j = j->next) {
        if (j->buf && !j->tomb && j->hi == key.hi && j->lo == key.lo) {
            j->cancelled = true;
            queued = true;
        }
    }
    if (had)
        d->changed = true;
    pthread_mutex_unlock(&d->mu);
    /* Nothing of the key in the log since the snapshot would need no tombstone, but the
     * snapshot may hold it: a tombstone whenever the key was anywhere. */
    if (had || queued)
        submit(d, key, (um_str){NULL, 0}, NULL, 0, true);
    return had;
}

void um_disk_sync(struct um_disk *d, bool snapshot)
{
    struct wjob b;
    memset(&b, 0, sizeof(b));
    b.snapshot = snapshot;
    pthread_mutex_lock(&d->mu);
    if (!d->closing) {
        if (d->wq_tail)
            d->wq_tail->next = &b;
        else
            d->wq_head = &b;
        d->wq_tail = &b;
        pthread_cond_signal(&d->wcond);
        while (!b.done)
            pthread_cond_wait(&d->done, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
}

/* ---------------------------------------------------------------- the rest */

bool um_disk_lookup(struct um_disk *d, struct um_disk_key key, struct um_disk_info *info)
{
    pthread_mutex_lock(&d->mu);
    const struct um__disk_ent *e = um__disk_index_find(&d->idx, key.hi, key.lo);
    if (e && info)
        *info = (struct um_disk_info){e->pos, phys(d, e->pos), e->len,
                                      e->pos + d->span - d->cursor, d->span};
    pthread_mutex_unlock(&d->mu);
    return e != NULL;
}

void um_disk_stats(struct um_disk *d, struct um_disk_stats *st)
{
    pthread_mutex_lock(&d->mu);
    *st = d->st;
    st->size = d->size;
    st->objects = d->idx.count;
    st->bytes = d->idx.bytes;
    st->index_bytes = um__disk_index_mem(&d->idx);
    st->queue_max = d->queue_max;
    st->cursor = d->cursor;
    pthread_mutex_unlock(&d->mu);
}

void um_disk_stats_add(struct um_disk_stats *sum, const struct um_disk_stats *one)
{
    /* Every field is a uint64_t figure: added as an array, so that a new one is not missed. */
    _Static_assert(sizeof(*sum) % sizeof(uint64_t) == 0, "um_disk_stats holds only uint64_t");
    uint64_t *s = (uint64_t *)(void *)sum;
    const uint64_t *o = (const uint64_t *)(const void *)one;
    for (size_t i = 0; i < sizeof(*sum) / sizeof(uint64_t); i++)
        s[i] += o[i];
}

struct um_disk *um_disk_pick(struct um_disk *const *stores, size_t n, struct um_disk_key key)
{
    UM_ASSERT(n > 0);
    struct um_disk *best = stores[0];
    uint64_t best_score = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t score = XXH3_64bits_withSeed(&key, sizeof(key), stores[i]->seed);
        if (i == 0 || score > best_score) {
            best = stores[i];
            best_score = score;
        }
    }
    return best;
}

int um_disk_check(const struct um_disk_opts *o, char **errmsg)
{
    *errmsg = NULL;
    if (!o->path || !*o->path) {
        *errmsg = fmt("disk store: no path");
        return UM_ERR;
    }
    uint64_t size = o->size / BLOCK * BLOCK;
    if (size < MIN_SIZE) {
        *errmsg = fmt("disk store %s: size %llu is below the minimum, %u bytes", o->path,
                      (unsigned long long)o->size, MIN_SIZE);
        return UM_ERR;
    }
    char *copy = um_strndup(o->path, strlen(o->path));
    const char *dir = dirname(copy);
    uint64_t have = 0;
    struct stat sb;
    struct statvfs vfs;
    if (stat(dir, &sb) != 0) {
        *errmsg = fmt("disk store %s: its directory %s: %s", o->path, dir, strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
        *errmsg = fmt("disk store %s: %s is not a directory", o->path, dir);
    } else if (access(dir, W_OK | X_OK) != 0) {
        *errmsg = fmt("disk store %s: its directory %s is not writable: %s", o->path, dir,
                      strerror(errno));
    } else if (stat(o->path, &sb) == 0 && access(o->path, R_OK | W_OK) != 0) {
        *errmsg = fmt("disk store %s: %s", o->path, strerror(errno));
    } else if (statvfs(dir, &vfs) != 0) {
        *errmsg = fmt("disk store %s: statvfs %s: %s", o->path, dir, strerror(errno));
    } else {
        if (stat(o->path, &sb) == 0)
            have = (uint64_t)sb.st_blocks * 512;
        uint64_t room = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (size > have && size - have > room)
            *errmsg = fmt("disk store %s: size %llu, but its filesystem has room for %llu "
                          "bytes more",
                          o->path, (unsigned long long)size, (unsigned long long)room);
    }
    free(copy);
    return *errmsg ? UM_ERR : UM_OK;
}

static void free_store(struct um_disk *d)
{
    for (size_t k = 0; k <= UM__DISK_POOL_CLASSES; k++)
        for (void *b = d->pool[k], *next; b != NULL; b = next) {
            next = *(void **)b;
            free(b);
        }
    if (d->fd >= 0)
        close(d->fd);
    um__disk_index_dispose(&d->idx);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wcond);
    pthread_cond_destroy(&d->rcond);
    pthread_cond_destroy(&d->done);
    free(d->readers);
    free(d->path);
    free(d->snap_path);
    free(d->snap_tmp);
    free(d);
}

struct um_disk *um_disk_open(const struct um_disk_opts *o, char **errmsg)
{
    *errmsg = NULL;
    if (!o->path || !*o->path) {
        *errmsg = fmt("disk store: no path");
        return NULL;
    }
    uint64_t size = o->size / BLOCK * BLOCK;
    if (size < MIN_SIZE) {
        *errmsg = fmt("disk store %s: size %llu is below the minimum, %u bytes", o->path,
                      (unsigned long long)o->size, MIN_SIZE);
        return NULL;
    }
    struct um_disk *d = um_calloc(1, sizeof(*d));
    size_t plen = strlen(o->path);
    d->path = um_strndup(o->path, plen);
    d->snap_path = um_malloc(plen + 7);
    memcpy(d->snap_path, o->path, plen);
    memcpy(d->snap_path + plen, ".index", 7);
    d->snap_tmp = um_malloc(plen + 11);
    memcpy(d->snap_tmp, o->path, plen);
    memcpy(d->snap_tmp + plen, ".index.tmp", 11);
    d->fd = -1;
    d->size = size;
    d->span = size - BLOCK;
    d->seed = XXH3_64bits(o->path, plen);
    d->sync_ms = o->sync_ms ? o->sync_ms : 1000;
    d->snapshot_ms = o->snapshot_ms ? o->snapshot_ms : 60000;
    d->delay_ms = o->delay_ms;
    d->queue_max = o->queue_max ? o->queue_max : DEFAULT_QUEUE;
    if (d->queue_max > d->span / 4)
        d->queue_max = d->span / 4;
    d->nreaders = o->readers ? o->readers : 2;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->wcond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&d->rcond, NULL);
    pthread_cond_init(&d->done, NULL);
    um__disk_index_init(&d->idx);

    char *why = NULL;
    struct stat sb;
    d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (d->fd < 0 || fstat(d->fd, &sb) != 0) {
        *errmsg = fmt("disk store %s: %s", d->path, strerror(errno));
        goto fail;
    }
    if (sb.st_size == 0) {
        why = initialise(d, 0);
    } else {
        struct um__disk_super s;
        memset(&s, 0, sizeof(s));
        if (pread(d->fd, &s, sizeof(s), 0) < 0) {
            *errmsg = fmt("disk store %s: %s", d->path, strerror(errno));
            goto fail;
        }
        char *refusal = super_refusal(d, &s, (uint64_t)sb.st_size);
        if (refusal && !o->reset_incompatible) {
            *errmsg = fmt("disk store %s: %s; set reset_incompatible to reinitialise it "
                          "(its objects are lost)",
                          d->path, refusal);
            free(refusal);
            goto fail;
        }
        if (refusal) {
            um_log(UM_LOG_WARN, "disk store %s: %s: reinitialised (reset_incompatible)",
                   d->path, refusal);
            free(refusal);
            why = initialise(d, (uint64_t)sb.st_size);
        } else {
            d->store_id = s.store_id;
            d->super_cursor = s.cursor;
            d->super_synced = s.synced;
            um__disk_rebuild(d);
        }
    }
    if (why) {
        *errmsg = fmt("disk store %s: %s", d->path, why);
        free(why);
        goto fail;
    }
    d->last_sync_ms = d->last_snap_ms = now_ms();
    d->readers = um_calloc(d->nreaders, sizeof(pthread_t));
    UM_ASSERT(pthread_create(&d->writer, NULL, writer_main, d) == 0);
    for (unsigned i = 0; i < d->nreaders; i++)
        UM_ASSERT(pthread_create(&d->readers[i], NULL, um__disk_reader_main, d) == 0);
    return d;
fail:
    free_store(d);
    return NULL;
}

void um_disk_close(struct um_disk *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->closing = true;
    pthread_cond_broadcast(&d->wcond);
    pthread_cond_broadcast(&d->rcond);
    pthread_mutex_unlock(&d->mu);
    for (unsigned i = 0; i < d->nreaders; i++)
        pthread_join(d->readers[i], NULL);
    pthread_join(d->writer, NULL);
    um__disk_write_snapshot(d);
    free_store(d);
}
