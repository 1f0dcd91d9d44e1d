/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store's insides: the on-disk format (store.c's design note explains it) and
 * the in-memory index (index.c). Module-internal (um__disk_); the unit test reads it. */
#ifndef UMBRA_DISK_INTERNAL_H
#define UMBRA_DISK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every record starts on a block; the superblock is block 0. */
#define UM__DISK_BLOCK 4096u
/* The format version: a store of another is refused (or reinitialised). */
#define UM__DISK_VERSION 1u

#define UM__DISK_SUPER_MAGIC "UMBRADSK"
#define UM__DISK_SNAP_MAGIC "UMBRAIDX"
#define UM__DISK_REC_MAGIC 0x4352424du /* "MBRC" in the file's first bytes */

#define UM__DISK_REC_TOMB 1u /* flags: a tombstone (no body: key removed) */

/* The superblock, at offset 0 (the rest of block 0 is zero). Fields in the host's byte
 * order: a store is not moved between machines of different byte orders. */
struct um__disk_super {
    char magic[8];
    uint32_t version;
    uint32_t block;    /* UM__DISK_BLOCK */
    uint64_t size;     /* bytes of the file */
    uint64_t store_id; /* random, new at each initialisation: records and snapshots of an
                        * earlier life of the file do not match it */
    uint64_t cursor;   /* the log position of the last snapshot */
    uint64_t synced;   /* the end of the log at the last sync: tells a rebuild whether the
                        * log went round since the snapshot */
    uint64_t check;    /* XXH3-64 of the bytes above */
};

/* A record's header, at the start of its first block; then the metadata, the body, and
 * the XXH3-64 of header, metadata and body (8 bytes); then zeros to the next block. */
struct um__disk_rec {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint64_t store_id;
    uint64_t key_hi, key_lo;
    uint64_t pos; /* the log position: the write sequence number */
    uint32_t meta_len;
    uint32_t body_len;
    uint64_t written; /* wall-clock seconds at the write, for the curious */
    uint64_t reserved;
};
_Static_assert(sizeof(struct um__disk_rec) == 64, "record header is 64 bytes");
/* Bytes of a record that holds m bytes of metadata and b of body, before the padding. */
#define UM__DISK_REC_LEN(m, b) ((uint64_t)sizeof(struct um__disk_rec) + (m) + (b) + 8u)

/* The index snapshot file: this header, then count entries; check covers the header's
 * bytes before it, entries_check the entries. */
struct um__disk_snap {
    char magic[8];
    uint32_t version;
    uint32_t pad;
    uint64_t store_id;
    uint64_t size;
    uint64_t cursor; /* every record at a lower log position is reflected in the entries */
    uint64_t count;
    uint64_t entries_check;
    uint64_t check;
};
struct um__disk_snap_ent {
    uint64_t key_hi, key_lo, pos;
    uint32_t len;
    uint32_t pad;
};

/* ---------------------------------------------------------------- the index */

/* One object. Entries live in chunks of UM__DISK_CHUNK and are named by id + 1 (0: none)
 * in the bucket chains and the log-order list. len 0: a free entry. */
struct um__disk_ent {
    uint64_t hi, lo;
    uint64_t pos;   /* log position of the record */
    uint32_t len;   /* bytes of the record before padding */
    uint32_t hnext; /* next in the bucket, or in the free list */
    uint32_t lprev, lnext; /* log order (ascending pos): eviction takes the head */
};
_Static_assert(sizeof(struct um__disk_ent) <= 64, "an index entry is at most 64 bytes");

#define UM__DISK_CHUNK 1024u

struct um__disk_index {
    struct um__disk_ent **chunks;
    uint32_t nchunks, chunks_cap;
    uint32_t *buckets; /* ids + 1 */
    uint32_t mask;     /* buckets - 1 */
    uint32_t free_head;
    uint32_t used; /* ids below this were handed out */
    uint32_t count;
    uint32_t lhead, ltail;
    uint64_t bytes; /* sum of the entries' len */
};

void um__disk_index_init(struct um__disk_index *x);
void um__disk_index_dispose(struct um__disk_index *x);
struct um__disk_ent *um__disk_index_ent(const struct um__disk_index *x, uint32_t id1);
struct um__disk_ent *um__disk_index_find(const struct um__disk_index *x, uint64_t hi, uint64_t lo);
/* Puts key at pos: 1 added, 0 replaced an older record of key, -1 ignored (key has a
 * record at pos or later). */
int um__disk_index_put(struct um__disk_index *x, uint64_t hi, uint64_t lo, uint64_t pos,
                       uint32_t len);
/* Removes key when its record is older than before (UINT64_MAX: whatever it is). */
bool um__disk_index_del(struct um__disk_index *x, uint64_t hi, uint64_t lo, uint64_t before);
/* Removes the entries whose pos is below `below`, oldest first; returns how many. */
uint64_t um__disk_index_evict(struct um__disk_index *x, uint64_t below);
/* Bytes of memory the index holds. */
size_t um__disk_index_mem(const struct um__disk_index *x);

#endif
