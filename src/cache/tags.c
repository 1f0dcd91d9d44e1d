/* SPDX-License-Identifier: BSD-2-Clause */
/* The store's surrogate keys: tags on objects, the index from a tag to the objects it
 * tags, and the purges (by tag, by key prefix, soft).
 *
 * Design
 * - A tag is a node in a hash table (chained, doubled when it fills, like a shard's). Each
 *   node heads a doubly linked list of links, one per object it tags; an object owns one
 *   array of links (one per tag), made when the filler tags it, before the head is
 *   published, and never changed after. So an object with n tags costs one allocation,
 *   and a node lives exactly as long as some object holds a link to it.
 * - One mutex guards the whole index. It is taken when an object is tagged (a fill), when
 *   a tagged object is freed (its last unref) and by purges; never on a hit, which reads
 *   nothing here: hits on tagged objects cost what hits on untagged ones cost.
 * - Memory: links arrays, nodes and the bucket array are charged against the store's cap
 *   like everything else. Tagging charges the worst case first (a new node for every tag),
 *   outside the lock, since charging may evict and eviction frees objects, which takes
 *   this lock; what was not needed is given back once the lock is released. The bucket
 *   array grows only with memory found without evicting (try_charge), like a shard's.
 * - Lifetimes: an object's links leave the index in obj_free, before its memory goes, and
 *   under the lock. A purge walks a node's list under the lock and takes a reference to
 *   each linked object with a compare-and-swap that refuses a count of zero (an object
 *   whose last reference is gone is on its way to obj_free, which waits for the lock), so
 *   it never resurrects a dying object. Unlinking and unref'ing happen after the lock is
 *   released: the objects a purge frees take the lock again one at a time, so other fills
 *   and purges interleave, and hits (shard locks only) are never held up.
 * - An object tagged by several of the tags of one purge is counted once: each purge has a
 *   generation number, and an object remembers (under the lock) the last one that saw it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_internal.h"
#include "umbra/disktier.h"
#include "umbra/purge.h"

#define TAG_BUCKETS_INIT 64

struct um__tag_node {
    struct um__tag_node *next; /* bucket chain */
    uint64_t hash;
    struct um__tag_link *head; /* the objects it tags */
    size_t acct;
    size_t len;
    char name[];
};

static uint64_t tag_hash(const struct um_cache *c, const char *s, size_t n)
{
    /* FNV-1a, seeded with the store's random key and finished with a multiply-xorshift, so
     * that the chains an origin can lengthen on purpose are not predictable. */
    uint64_t h = 0xcbf29ce484222325ULL ^ c->sipkey[1];
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

static size_t node_acct(size_t len)
{
    return um_cache_alloc_size(sizeof(struct um__tag_node) + len);
}

void um__tags_init(struct um_cache *c)
{
    struct um__tags *t = &c->tags;
    /* The buckets are made by the first tagging: a store without tags costs nothing. */
    pthread_mutex_init(&t->lock, NULL);
    t->buckets = NULL;
    t->mask = 0;
    t->acct = 0;
}

/* Makes the bucket array if there is none yet; false when there is no room. No lock held. */
static bool tags_ensure_buckets(struct um_cache *c)
{
    struct um__tags *t = &c->tags;
    pthread_mutex_lock(&t->lock);
    bool have = t->buckets != NULL;
    pthread_mutex_unlock(&t->lock);
    if (have) return true;
    size_t acct = um_cache_alloc_size(TAG_BUCKETS_INIT * sizeof(struct um__tag_node *));
    if (!um__store_charge(c, acct)) return false;
    struct um__tag_node **b = um_calloc(TAG_BUCKETS_INIT, sizeof(*b));
    pthread_mutex_lock(&t->lock);
    if (t->buckets == NULL) {
        t->buckets = b;
        t->mask = TAG_BUCKETS_INIT - 1;
        t->acct = acct;
        b = NULL;
    }
    pthread_mutex_unlock(&t->lock);
    if (b != NULL) {
        free(b);
        uncharge(c, acct);
    }
    return true;
}

void um__tags_dispose(struct um_cache *c)
{
    struct um__tags *t = &c->tags;
    UM_ASSERT(t->count == 0 && "tags left at destroy");
    free(t->buckets);
    if (t->acct > 0) uncharge(c, t->acct);
    pthread_mutex_destroy(&t->lock);
}

/* Under the lock. */
static void tags_grow(struct um_cache *c)
{
    struct um__tags *t = &c->tags;
    size_t oldn = t->mask + 1, n = oldn * 2;
    size_t acct = um_cache_alloc_size(n * sizeof(struct um__tag_node *));
    if (!try_charge(c, acct)) return;
    struct um__tag_node **nb = um_calloc(n, sizeof(*nb));
    for (size_t i = 0; i < oldn; i++) {
        for (struct um__tag_node *nd = t->buckets[i], *next; nd != NULL; nd = next) {
            next = nd->next;
            struct um__tag_node **b = &nb[nd->hash & (n - 1)];
            nd->next = *b;
            *b = nd;
        }
    }
    free(t->buckets);
    uncharge(c, t->acct);
    t->buckets = nb;
    t->mask = n - 1;
    t->acct = acct;
}

/* Under the lock. */
static struct um__tag_node *tags_find(struct um__tags *t, uint64_t hash, um_str name)
{
    if (t->buckets == NULL) return NULL;
    for (struct um__tag_node *nd = t->buckets[hash & t->mask]; nd != NULL; nd = nd->next)
        if (nd->hash == hash && nd->len == name.len && memcmp(nd->name, name.base, name.len) == 0)
            return nd;
    return NULL;
}

/* Whether the tag is one to keep: non-empty, not too long, no control bytes or spaces. */
static bool tag_ok(um_str s)
{
    if (s.len == 0 || s.len > UM_CACHE_TAG_MAX_LEN) return false;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.base[i];
        if (ch <= 0x20 || ch == 0x7f) return false;
    }
    return true;
}

int um_cache_obj_set_tags(struct um_cache_obj *o, const um_str *tags, size_t n)
{
    struct um_cache *c = o->cache;
    UM_ASSERT(o->tlinks == NULL && "tags set twice");
    /* The tags to keep: valid, distinct, at most UM_CACHE_MAX_TAGS. */
    um_str keep[UM_CACHE_MAX_TAGS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < UM_CACHE_MAX_TAGS; i++) {
        if (!tag_ok(tags[i])) continue;
        bool dup = false;
        for (size_t j = 0; j < k && !dup; j++)
            dup = keep[j].len == tags[i].len && memcmp(keep[j].base, tags[i].base, tags[i].len) == 0;
        if (!dup) keep[k++] = tags[i];
    }
    if (k == 0) return UM_OK;
    if (atomic_load_explicit(&o->state, memory_order_relaxed) != UM_CACHE_FILLING) return UM_ERR;

    size_t links_acct = um_cache_alloc_size(k * sizeof(struct um__tag_link));
    size_t worst = links_acct;
    uint64_t hashes[UM_CACHE_MAX_TAGS];
    for (size_t i = 0; i < k; i++) {
        worst += node_acct(keep[i].len);
        hashes[i] = tag_hash(c, keep[i].base, keep[i].len);
    }
    if (!tags_ensure_buckets(c) || !um__store_charge(c, worst)) {
        atomic_fetch_add_explicit(&c->nospace, 1, memory_order_relaxed);
        return UM_ERR;
    }
    struct um__tag_link *links = um_calloc(k, sizeof(*links));
    /* Nodes are allocated before the lock, for every tag; those that exist already are
     * freed after it. */
    struct um__tag_node *fresh[UM_CACHE_MAX_TAGS];
    for (size_t i = 0; i < k; i++) {
        fresh[i] = um_malloc(sizeof(struct um__tag_node) + keep[i].len);
        fresh[i]->hash = hashes[i];
        fresh[i]->head = NULL;
        fresh[i]->acct = node_acct(keep[i].len);
        fresh[i]->len = keep[i].len;
        memcpy(fresh[i]->name, keep[i].base, keep[i].len);
    }
    size_t unused = 0;
    struct um__tags *t = &c->tags;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < k; i++) {
        struct um__tag_node *nd = tags_find(t, hashes[i], keep[i]);
        if (nd == NULL) {
            if (t->count > t->mask) tags_grow(c);
            nd = fresh[i];
            fresh[i] = NULL;
            struct um__tag_node **b = &t->buckets[nd->hash & t->mask];
            nd->next = *b;
            *b = nd;
            t->count++;
        }
        struct um__tag_link *l = &links[i];
        l->node = nd;
        l->obj = o;
        l->prev = NULL;
        l->next = nd->head;
        if (nd->head) nd->head->prev = l;
        nd->head = l;
    }
    o->tlinks = links;
    o->ntags = k;
    o->tags_acct = links_acct;
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < k; i++) {
        if (fresh[i] == NULL) continue;
        unused += fresh[i]->acct;
        free(fresh[i]);
    }
    if (unused > 0) uncharge(c, unused);
    return UM_OK;
}

size_t um_cache_obj_tags(const struct um_cache_obj *o, um_str *out, size_t max)
{
    size_t n = o->ntags < max ? o->ntags : max;
    for (size_t i = 0; i < n; i++)
        out[i] = (um_str){o->tlinks[i].node->name, o->tlinks[i].node->len};
    return n;
}

void um__tags_obj_free(struct um_cache *c, struct um_cache_obj *o)
{
    struct um__tags *t = &c->tags;
    size_t freed = 0;
    struct um__tag_node *dead = NULL;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < o->ntags; i++) {
        struct um__tag_link *l = &o->tlinks[i];
        struct um__tag_node *nd = l->node;
        if (l->prev)
            l->prev->next = l->next;
        else
            nd->head = l->next;
        if (l->next) l->next->prev = l->prev;
        if (nd->head == NULL) {
            struct um__tag_node **pp = &t->buckets[nd->hash & t->mask];
            while (*pp != nd)
                pp = &(*pp)->next;
            *pp = nd->next;
            t->count--;
            nd->next = dead;
            dead = nd;
        }
    }
    pthread_mutex_unlock(&t->lock);
    while (dead != NULL) {
        struct um__tag_node *nd = dead;
        dead = nd->next;
        freed += nd->acct;
        free(nd);
    }
    free(o->tlinks);
    o->tlinks = NULL;
    uncharge(c, freed + o->tags_acct);
    o->ntags = 0;
    o->tags_acct = 0;
}

size_t um_cache_tag_count(const struct um_cache *c)
{
    struct um__tags *t = (struct um__tags *)&c->tags;
    pthread_mutex_lock(&t->lock);
    size_t n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

/* ---- soft marks and refreshes ------------------------------------------------------------ */

void um_cache_obj_mark_stale(struct um_cache_obj *o)
{
    atomic_fetch_or_explicit(&o->cdn_flags, OBJ_F_SOFT_PURGED, memory_order_relaxed);
}

bool um_cache_obj_marked_stale(const struct um_cache_obj *o)
{
    return (atomic_load_explicit(&o->cdn_flags, memory_order_relaxed) & OBJ_F_SOFT_PURGED) != 0;
}

bool um_cache_obj_claim_refresh(struct um_cache_obj *o)
{
    return (atomic_fetch_or_explicit(&o->cdn_flags, OBJ_F_REFRESHING, memory_order_acq_rel) &
            OBJ_F_REFRESHING) == 0;
}

void um_cache_obj_release_refresh(struct um_cache_obj *o)
{
    atomic_fetch_and_explicit(&o->cdn_flags, (unsigned char)~OBJ_F_REFRESHING,
                              memory_order_release);
}

/* ---- purges ---------------------------------------------------------------------------- */

/* A growable array of referenced objects (transient, not charged: it lives for one purge). */
struct objvec {
    struct um_cache_obj **v;
    size_t n, cap;
};

static void objvec_push(struct objvec *ov, struct um_cache_obj *o)
{
    if (ov->n == ov->cap) {
        ov->cap = ov->cap ? ov->cap * 2 : 256;
        ov->v = realloc(ov->v, ov->cap * sizeof(*ov->v));
        if (ov->v == NULL) um_panic(__FILE__, __LINE__, "out of memory");
    }
    ov->v[ov->n++] = o;
}

/* A reference to o unless its count already reached zero (it is being freed). */
static bool try_ref(struct um_cache_obj *o)
{
    size_t r = atomic_load_explicit(&o->refcnt, memory_order_relaxed);
    while (r > 0)
        if (atomic_compare_exchange_weak_explicit(&o->refcnt, &r, r + 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* Unlinks (or, soft, marks stale) the collected objects and gives their references back.
 * Returns how many were affected: unlinked by this call, or marked. */
static size_t purge_collected(struct um_cache *c, struct objvec *ov, unsigned flags)
{
    bool soft = (flags & UM_CACHE_PURGE_SOFT) != 0;
    /* A soft purge ends the objects' freshness now: their expires becomes the purge's time
     * (when later), so that how long they have been stale, which the stale windows and
     * Cache-Status's ttl count, is counted from the purge. */
    int64_t now = soft ? c->o.now(c->o.now_arg) : 0;
    size_t n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < ov->n; i++) {
        struct um_cache_obj *o = ov->v[i];
        if ((flags & UM_CACHE_PURGE_PACED) && i > 0 && i % 1024 == 0) {
            /* Twice as long asleep as at work: a third of a CPU at most. */
            struct timespec t1, d;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            int64_t ns = 2 * ((int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 +
                              (t1.tv_nsec - t0.tv_nsec));
            if (ns > 0) {
                d.tv_sec = (time_t)(ns / 1000000000);
                d.tv_nsec = (long)(ns % 1000000000);
                nanosleep(&d, NULL);
            }
            clock_gettime(CLOCK_MONOTONIC, &t0);
        }
        if (soft) {
            if (atomic_load_explicit(&o->linked, memory_order_relaxed)) {
                um_cache_obj_mark_stale(o);
                if (um_cache_obj_expires(o) > now)
                    um_cache_obj_set_expires(o, now);
                n++;
            }
        } else if (um__store_index_remove(c, o)) {
            um__store_queue_remove(c, o);
            um_cache_obj_unref(o); /* the index's */
            n++;
        }
        um_cache_obj_unref(o);
    }
    free(ov->v);
    return n;
}

/* Whether an object counts for a purge: a stored response that is complete, or one still
 * filling (a hard purge also drops a fill in progress, as um_cache_purge does). */
static bool purgeable(const struct um_cache_obj *o, bool soft)
{
    int st = atomic_load_explicit(&o->state, memory_order_relaxed);
    return st == UM_CACHE_COMPLETE || (!soft && st == UM_CACHE_FILLING);
}

/* The objects in memory tagged with any of tags[0..ntags), referenced, into ov. */
static void collect_tagged(struct um_cache *c, const um_str *tags, size_t ntags, bool soft,
                           struct objvec *ov);

size_t um_cache_purge_tags(struct um_cache *c, const um_str *tags, size_t ntags, unsigned flags)
{
    um_disk_tier_purge_all(c->links.disk);
    struct objvec ov = {0};
    collect_tagged(c, tags, ntags, (flags & UM_CACHE_PURGE_SOFT) != 0, &ov);
    return purge_collected(c, &ov, flags);
}

size_t um__cache_purge_slices(struct um_cache *c, um_str key, unsigned flags)
{
    uint64_t size = atomic_load_explicit(&c->slice_size, memory_order_relaxed);
    if (size == 0) return 0;
    char tag[UM_CACHE_SLICE_TAG_LEN];
    um__cache_slice_tag(key, tag);
    um_str t = {tag, strlen(tag)};
    struct objvec ov = {0};
    collect_tagged(c, &t, 1, (flags & UM_CACHE_PURGE_SOFT) != 0, &ov);
    /* Not the disk tier's purge by tag (it would retire every record written before it):
     * the keys of the slices in memory, and slice 0's, which every answer starts from
     * (a slice still on disk of an older version is told from the new slice 0 by its
     * validator, slice.c). */
    for (size_t i = 0; i < ov.n; i++)
        um_disk_tier_purge_key(c->links.disk, (um_str){ov.v[i]->key, ov.v[i]->key_len});
    char buf[512];
    size_t cap = key.len + 64;
    char *k0 = cap <= sizeof(buf) ? buf : um_malloc(cap);
    size_t n0 = um__cache_slice_key(key, size, 0, k0, cap);
    size_t n = (flags & UM_CACHE_PURGE_SOFT) ? 0 : um_cache_purge(c, (um_str){k0, n0});
    if (k0 != buf) free(k0);
    return n + purge_collected(c, &ov, flags);
}

static void collect_tagged(struct um_cache *c, const um_str *tags, size_t ntags, bool soft,
                           struct objvec *ovp)
{
    struct um__tags *t = &c->tags;
    struct objvec ov = *ovp;
    pthread_mutex_lock(&t->lock);
    uint64_t gen = ++t->gen;
    for (size_t i = 0; i < ntags; i++) {
        if (tags[i].len == 0) continue;
        struct um__tag_node *nd = tags_find(t, tag_hash(c, tags[i].base, tags[i].len), tags[i]);
        if (nd == NULL) continue;
        for (struct um__tag_link *l = nd->head; l != NULL; l = l->next) {
            struct um_cache_obj *o = l->obj;
            if (o->purge_gen == gen) continue;
            o->purge_gen = gen;
            if (!atomic_load_explicit(&o->linked, memory_order_relaxed) || !purgeable(o, soft))
                continue;
            if (try_ref(o)) objvec_push(&ov, o);
        }
    }
    pthread_mutex_unlock(&t->lock);
    *ovp = ov;
}

size_t um_cache_purge_prefix(struct um_cache *c, um_str host, um_str prefix, unsigned flags)
{
    um_disk_tier_purge_all(c->links.disk);

    bool soft = (flags & UM_CACHE_PURGE_SOFT) != 0;
    struct objvec ov = {0};
    for (unsigned i = 0; i < (1u << c->shard_bits); i++) {
        struct shard *sh = &c->shards[i];
        pthread_mutex_lock(&sh->lock);
        for (size_t b = 0; b <= sh->mask; b++) {
            for (struct um_cache_obj *o = sh->buckets[b]; o != NULL; o = o->h_next) {
                /* Keys are "host target": the host (when given) and the target's start. */
                const char *k = o->key, *sp = memchr(k, ' ', o->key_len);
                if (sp == NULL || !purgeable(o, soft)) continue;
                size_t hl = (size_t)(sp - k), tl = o->key_len - hl - 1;
                if (host.len > 0 && (hl != host.len || memcmp(k, host.base, hl) != 0)) continue;
                if (tl < prefix.len || memcmp(sp + 1, prefix.base, prefix.len) != 0) continue;
                atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
                objvec_push(&ov, o);
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    return purge_collected(c, &ov, flags);
}

size_t um_cache_purge_soft(struct um_cache *c, um_str key)
{
    um_disk_tier_purge_key(c->links.disk, key);

    struct objvec ov = {0};
    uint64_t hash = um__store_key_hash(c, key);
    struct shard *sh = shard_of(c, hash);
    pthread_mutex_lock(&sh->lock);
    for (struct um_cache_obj *o = sh->buckets[hash & sh->mask]; o != NULL; o = o->h_next) {
        if (o->hash != hash || o->key_len != key.len ||
            (key.len > 0 && memcmp(o->key, key.base, key.len) != 0) || !purgeable(o, true))
            continue;
        atomic_fetch_add_explicit(&o->refcnt, 1, memory_order_relaxed);
        objvec_push(&ov, o);
    }
    pthread_mutex_unlock(&sh->lock);
    return purge_collected(c, &ov, UM_CACHE_PURGE_SOFT);
}

size_t um_cache_purge_apply(struct um_cache *c, const struct um_purge *p, unsigned flags)
{
    if (p->soft)
        flags |= UM_CACHE_PURGE_SOFT;
    switch (p->kind) {
    case UM_PURGE_URL: {
        /* The URL's object, and the slices of it when it was fetched in slices
         * (slice.c). */
        size_t n = p->soft ? um_cache_purge_soft(c, p->key) : um_cache_purge(c, p->key);
        return n + um__cache_purge_slices(c, p->key, flags);
    }
    case UM_PURGE_PREFIX:
        return um_cache_purge_prefix(c, p->host, p->prefix, flags);
    case UM_PURGE_TAGS:
        return p->ntags > 0 ? um_cache_purge_tags(c, p->tags, p->ntags, flags) : 0;
    }
    return 0;
}
