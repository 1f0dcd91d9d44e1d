/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store (src/disk/): a persistent, crash-safe object store on one preallocated
 * file, written as a log at a cursor that cycles around. Its design (layout, recovery,
 * limits) is the note at the top of src/disk/store.c.
 *
 * Objects are named by a 128-bit key hash that the caller makes (um_disk_key_of, or its
 * own); the store never sees a cache key. An object is an opaque metadata blob (the cache
 * keeps its head, times, tags, Vary and coding there) and a body.
 *
 * Threads: every function may be called from any thread, concurrently, except
 * um_disk_open and um_disk_close. Nothing here blocks on the disk but um_disk_open,
 * um_disk_close and um_disk_sync: reads and writes are done by the store's own I/O
 * threads (one writer, opts.readers readers), and a read completes on the loop the caller
 * names. The calls take the store's one mutex for a few instructions (a hash lookup, a
 * queue push). */
#ifndef UMBRA_DISK_H
#define UMBRA_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "umbra/common.h"

struct um_loop;
struct um_disk;

/* An object's name: a 128-bit hash of its key. */
struct um_disk_key {
    uint64_t hi, lo;
};

/* XXH3-128 of the n bytes at p: a key for the store. Pure. */
struct um_disk_key um_disk_key_of(const void *p, size_t n);

struct um_disk_opts {
    const char *path;    /* the store file (copied); the index snapshot is path + ".index" */
    uint64_t size;       /* bytes of the file, rounded down to 4 KiB; at least 256 KiB */
    uint32_t sync_ms;    /* fdatasync at most this often while writes complete; 0: 1000 */
    uint32_t snapshot_ms; /* index snapshot at most this often while it changes; 0: 60000 */
    uint64_t queue_max;  /* bytes of records waiting to be written; 0: 64 MiB. At most a
                          * quarter of the store (lowered to it): a pending write is never
                          * lapped by the cursor. A write that would pass it is dropped. */
    unsigned readers;    /* reader threads; 0: 2 */
    bool reset_incompatible; /* reinitialise (emptying it) a file of another format
                              * version, another size, or not a store, instead of failing */
    uint32_t delay_ms;   /* for tests (a slow disk): each I/O waits this long first */
};

/* Opens (or creates and preallocates) the store at opts->path and rebuilds its index from
 * the snapshot and a scan of the log written after it (see store.c). Blocks for that.
 * Returns the store, or NULL with *errmsg set to a message naming the path (the caller
 * frees it with free()). */
struct um_disk *um_disk_open(const struct um_disk_opts *opts, char **errmsg);

/* For `umbra -t`, touching nothing: whether opts->path could be opened as a store: its
 * size is valid, its directory is there and writable, the file (when it is there) is
 * readable and writable, and its filesystem has room for the bytes still to allocate.
 * Returns UM_OK, or UM_ERR with *errmsg set as um_disk_open's. */
int um_disk_check(const struct um_disk_opts *opts, char **errmsg);

/* Completes the writes queued and the reads under way, syncs, writes the index snapshot
 * and frees d. d may be NULL. The reads' callbacks are posted to their loops: call it
 * after the last um_disk_read, and run those loops (or at least do not destroy them)
 * until the callbacks have run. */
void um_disk_close(struct um_disk *d);

/* Memory only (never any I/O): whether key is in the index, and where. */
struct um_disk_info {
    uint64_t seq;    /* the record's write sequence number (its log position) */
    uint64_t offset; /* byte offset of the record in the file */
    uint32_t length; /* bytes of the record (header, metadata, body, checksum) */
    uint64_t left;   /* bytes the log takes before the cursor reaches the record: a hit
                      * with little left is worth writing again (ahead of the cursor) */
    uint64_t span;   /* bytes of one lap of the log */
};
bool um_disk_lookup(struct um_disk *d, struct um_disk_key key, struct um_disk_info *info);

/* A read's completion, on the loop given to um_disk_read:
 *   UM_OK   meta and body are the object's (checksum verified); they live until cb returns
 *   UM_DONE the object is gone (evicted, removed or found corrupt meanwhile: a miss)
 *   UM_ERR  the read failed (an I/O error, logged); meta and body are empty */
typedef void (*um_disk_read_cb)(void *arg, int status, um_str meta, um_str body);

/* Reads key's object. Returns UM_DONE at once, with no I/O and no callback, when key is
 * not in the index (a miss); UM_AGAIN when the read is queued: cb(arg, ...) then runs once
 * on loop (posted with um_loop_post), and loop and arg must live until it has. */
int um_disk_read(struct um_disk *d, struct um_disk_key key, struct um_loop *loop,
                 um_disk_read_cb cb, void *arg);

/* Reads key's object at once, on the caller's thread, when the whole record is in the
 * page cache (preadv2 with RWF_NOWAIT: never waits for the device): then cb(arg, UM_OK,
 * meta, body) has run before it returns UM_OK. UM_DONE: a miss (not in the index, or the
 * record found bad: dropped and counted); UM_AGAIN: not all in memory (or a slow disk for
 * tests), nothing done: um_disk_read it. */
int um_disk_read_cached(struct um_disk *d, struct um_disk_key key, um_disk_read_cb cb, void *arg);

/* Stores meta and body (copied) under key, replacing what key had once written. The
 * record is queued to the writer and enters the index when its write has completed
 * (write-behind). Returns UM_OK when queued, UM_ERR when dropped (counted): the write
 * queue is full, the record is larger than the queue, or the store is closing. */
int um_disk_write(struct um_disk *d, struct um_disk_key key, um_str meta, const void *body,
                  size_t len);

/* The same without the copy: a record built in place. um_disk_rec_alloc gives a buffer
 * for meta_len bytes of metadata and body_len of body, for store d (NULL when no record
 * can be that large); the caller writes the metadata at buf + *head and the body right
 * after it, then hands buf to um_disk_write_rec on d, which takes it (freed when the write
 * is dropped), or frees it with free(). Any thread. */
char *um_disk_rec_alloc(struct um_disk *d, size_t meta_len, size_t body_len, size_t *head);
int um_disk_write_rec(struct um_disk *d, struct um_disk_key key, char *buf, size_t meta_len,
                      size_t body_len);

/* Forgets key at once (a queued write of it will not enter the index either) and queues
 * a tombstone so that a restart does not bring it back (a tombstone dropped or not synced
 * before a crash may let it come back). Returns whether key was in the index. */
bool um_disk_remove(struct um_disk *d, struct um_disk_key key);

/* Blocks until every write queued before the call has completed, then syncs the file and,
 * when snapshot is set, writes the index snapshot. For shutdown, tests and the admin; not
 * for a worker. */
void um_disk_sync(struct um_disk *d, bool snapshot);

#define UM_DISK_READ_BUCKETS 8
struct um_disk_stats {
    uint64_t size;              /* bytes of the file */
    uint64_t objects;           /* in the index */
    uint64_t bytes;             /* of their records */
    uint64_t index_bytes;       /* memory of the index (entries, buckets, chunk table) */
    uint64_t reads, read_bytes; /* completed with the object */
    uint64_t read_misses;       /* um_disk_read of a key not in the index */
    uint64_t writes, write_bytes;
    uint64_t evictions;         /* objects overwritten by the cursor */
    uint64_t checksum_failures; /* records found bad on a read (dropped) */
    uint64_t io_errors;
    uint64_t queue_bytes, queue_max; /* records waiting to be written, and the bound */
    uint64_t drops;             /* writes and tombstones dropped */
    uint64_t cursor;            /* the log position the next write takes */
    /* The completed reads' latency (from the call to the record checked), by the upper
     * bounds UM_DISK_READ_BOUNDS_US and then +Inf, and its sum in microseconds. */
    uint64_t read_us[UM_DISK_READ_BUCKETS + 1];
    uint64_t read_us_sum;
};
/* The bounds of the read latency histogram, in microseconds. */
extern const uint64_t um_disk_read_bounds_us[];
void um_disk_stats(struct um_disk *d, struct um_disk_stats *st);
/* Adds every figure of one to sum (the stores of a tier counted together). */
void um_disk_stats_add(struct um_disk_stats *sum, const struct um_disk_stats *one);

/* The store of n (n > 0) that holds key: rendezvous hashing on each store's path, so that
 * adding or removing a store moves only the keys it gains or had. */
struct um_disk *um_disk_pick(struct um_disk *const *stores, size_t n, struct um_disk_key key);

#endif
