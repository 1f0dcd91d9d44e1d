/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store's in-memory index: key hash -> record. Not thread-safe: the store calls
 * it under its mutex.
 *
 * Why this shape: 40 bytes an entry, in chunks that never move (an entry's id stays
 * valid, so chains and the log list are 32-bit ids instead of pointers), plus a bucket
 * array of 4-byte ids kept between one and two entries a bucket: at most about 44 bytes
 * an object beyond the last chunk's unused tail. Entries are also linked in log order,
 * because the cursor overwrites records in that order: eviction pops the head of that
 * list instead of searching the table. The key hash is already uniform, so its low word
 * picks the bucket. */
#include <stdlib.h>
#include <string.h>

#include "umbra/common.h"

#include "internal.h"

#define MIN_BUCKETS 1024u

void um__disk_index_init(struct um__disk_index *x)
{
    memset(x, 0, sizeof(*x));
    x->buckets = um_calloc(MIN_BUCKETS, sizeof(uint32_t));
    x->mask = MIN_BUCKETS - 1;
}

void um__disk_index_dispose(struct um__disk_index *x)
{
    for (uint32_t i = 0; i < x->nchunks; i++)
        free(x->chunks[i]);
    free(x->chunks);
    free(x->buckets);
    memset(x, 0, sizeof(*x));
}

struct um__disk_ent *um__disk_index_ent(const struct um__disk_index *x, uint32_t id1)
{
    uint32_t id = id1 - 1;
    return &x->chunks[id / UM__DISK_CHUNK][id % UM__DISK_CHUNK];
}

static uint32_t *bucket_of(const struct um__disk_index *x, uint64_t lo)
{
    return &x->buckets[lo & x->mask];
}

struct um__disk_ent *um__disk_index_find(const struct um__disk_index *x, uint64_t hi, uint64_t lo)
{
    for (uint32_t id1 = *bucket_of(x, lo); id1;) {
        struct um__disk_ent *e = um__disk_index_ent(x, id1);
        if (e->lo == lo && e->hi == hi)
            return e;
        id1 = e->hnext;
    }
    return NULL;
}

static uint32_t id_of(const struct um__disk_index *x, const struct um__disk_ent *e)
{
    /* Entries do not know their id; the bucket chain does. */
    for (uint32_t id1 = *bucket_of(x, e->lo); id1;) {
        struct um__disk_ent *c = um__disk_index_ent(x, id1);
        if (c == e)
            return id1;
        id1 = c->hnext;
    }
    UM_ASSERT(!"entry not in its bucket");
    return 0;
}

static void grow_buckets(struct um__disk_index *x)
{
    uint32_t n = (x->mask + 1) * 2;
    uint32_t *b = um_calloc(n, sizeof(uint32_t));
    uint32_t *old = x->buckets;
    uint32_t old_n = x->mask + 1;
    x->buckets = b;
    x->mask = n - 1;
    for (uint32_t i = 0; i < old_n; i++) {
        for (uint32_t id1 = old[i]; id1;) {
            struct um__disk_ent *e = um__disk_index_ent(x, id1);
            uint32_t next = e->hnext;
            uint32_t *h = bucket_of(x, e->lo);
            e->hnext = *h;
            *h = id1;
            id1 = next;
        }
    }
    free(old);
}

static uint32_t alloc_ent(struct um__disk_index *x)
{
    if (x->free_head) {
        uint32_t id1 = x->free_head;
        x->free_head = um__disk_index_ent(x, id1)->hnext;
        return id1;
    }
    if (x->used == x->nchunks * UM__DISK_CHUNK) {
        UM_ASSERT(x->used < UINT32_MAX - UM__DISK_CHUNK);
        if (x->nchunks == x->chunks_cap) {
            x->chunks_cap = x->chunks_cap ? x->chunks_cap * 2 : 16;
            x->chunks = um_realloc(x->chunks, x->chunks_cap * sizeof(*x->chunks));
        }
        x->chunks[x->nchunks++] = um_calloc(UM__DISK_CHUNK, sizeof(struct um__disk_ent));
    }
    return ++x->used;
}

static void unlink_ent(struct um__disk_index *x, struct um__disk_ent *e, uint32_t id1)
{
    uint32_t *p = bucket_of(x, e->lo);
    while (*p != id1)
        p = &um__disk_index_ent(x, *p)->hnext;
    *p = e->hnext;
    if (e->lprev)
        um__disk_index_ent(x, e->lprev)->lnext = e->lnext;
    else
        x->lhead = e->lnext;
    if (e->lnext)
        um__disk_index_ent(x, e->lnext)->lprev = e->lprev;
    else
        x->ltail = e->lprev;
    x->count--;
    x->bytes -= e->len;
    memset(e, 0, sizeof(*e));
    e->hnext = x->free_head;
    x->free_head = id1;
}

int um__disk_index_put(struct um__disk_index *x, uint64_t hi, uint64_t lo, uint64_t pos,
                       uint32_t len)
{
    UM_ASSERT(len > 0);
    int added = 1;
    struct um__disk_ent *old = um__disk_index_find(x, hi, lo);
    if (old) {
        if (old->pos >= pos)
            return -1;
        unlink_ent(x, old, id_of(x, old));
        added = 0;
    }
    if (x->count >= 2 * (x->mask + 1))
        grow_buckets(x);
    uint32_t id1 = alloc_ent(x);
    struct um__disk_ent *e = um__disk_index_ent(x, id1);
    e->hi = hi;
    e->lo = lo;
    e->pos = pos;
    e->len = len;
    uint32_t *h = bucket_of(x, lo);
    e->hnext = *h;
    *h = id1;
    /* Records complete in log order, so this is the tail but during a rebuild's merge. */
    uint32_t after = x->ltail;
    while (after && um__disk_index_ent(x, after)->pos > pos)
        after = um__disk_index_ent(x, after)->lprev;
    e->lprev = after;
    e->lnext = after ? um__disk_index_ent(x, after)->lnext : x->lhead;
    if (after)
        um__disk_index_ent(x, after)->lnext = id1;
    else
        x->lhead = id1;
    if (e->lnext)
        um__disk_index_ent(x, e->lnext)->lprev = id1;
    else
        x->ltail = id1;
    x->count++;
    x->bytes += len;
    return added;
}

bool um__disk_index_del(struct um__disk_index *x, uint64_t hi, uint64_t lo, uint64_t before)
{
    struct um__disk_ent *e = um__disk_index_find(x, hi, lo);
    if (!e || e->pos >= before)
        return false;
    unlink_ent(x, e, id_of(x, e));
    return true;
}

uint64_t um__disk_index_evict(struct um__disk_index *x, uint64_t below)
{
    uint64_t n = 0;
    while (x->lhead) {
        uint32_t id1 = x->lhead;
        struct um__disk_ent *e = um__disk_index_ent(x, id1);
        if (e->pos >= below)
            break;
        unlink_ent(x, e, id1);
        n++;
    }
    return n;
}

size_t um__disk_index_mem(const struct um__disk_index *x)
{
    return (size_t)x->nchunks * UM__DISK_CHUNK * sizeof(struct um__disk_ent) +
           (size_t)(x->mask + 1) * sizeof(uint32_t) + (size_t)x->chunks_cap * sizeof(void *);
}
