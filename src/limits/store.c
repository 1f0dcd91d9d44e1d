/* SPDX-License-Identifier: BSD-2-Clause */
/* The stores of the rate limits and of the shared dictionary (umbra/limits.h), and the
 * process-wide registry that keeps them across a reload.
 *
 * A store is 64 stripes. A key's hash picks its stripe; everything about the key (its
 * chain, its place in the least-recently-used list, the bytes charged for it) belongs to
 * that stripe and changes only under the stripe's mutex. An operation takes one stripe's
 * lock, does no I/O and calls nothing that could wait inside it, and lets it go: so no
 * worker ever waits on another for longer than one slot's operation, and workers touching
 * different keys mostly take different locks.
 *
 * Memory: each stripe gets a 64th of the store's size, and an entry is charged its
 * header, key and string value before it is allocated; what does not fit evicts the
 * stripe's least recently used entries first (counted). The hash is FNV-1a over a seed
 * drawn at start, so a client choosing keys (a header) cannot aim them at one chain.
 *
 * The registry: a list under its own mutex, keyed by kind, name and settings (a limit's
 * rate, burst, key and size; a dictionary's size), each store with a count of the
 * snapshots that name it. The settings' readers take references (main thread, while a
 * configuration loads) and a snapshot's dispose drops them; the store is freed with the
 * last. A reload that keeps a setting thus finds the very store the running snapshot has. */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "internal.h"
#include "umbra/buf.h"
#include "umbra/http1.h"
#include "umbra/limits.h"

#define STRIPES 64

struct entry {
    struct entry *hnext;           /* the chain of its hash bucket */
    struct entry *newer, *older;   /* the stripe's LRU list */
    uint64_t hash;
    double expires;                /* 0: never */
    double num, t;                 /* a number (or boolean); a bucket's tokens and time */
    size_t charge;
    uint32_t klen, vlen;
    uint8_t type;                  /* enum um_shared_type; a bucket: UM_SHARED_NUM */
    char data[];                   /* the key, then a string value */
};

/* What every operation writes (the lock, the counters of a rate limit's requests) shares
 * one cache line; the rest is written only when entries come, go or change places. A hot
 * key taken by both workers in turn thus moves two lines between their CPUs (this one and
 * its entry's first), not five. */
struct stripe {
    pthread_mutex_t lock;
    uint64_t passed, limited;
    _Alignas(64) struct entry **heads;
    size_t mask;
    struct entry *newest, *oldest;
    size_t bytes, cap, count;
    uint64_t evicted;
} __attribute__((aligned(64)));

struct um_store {
    struct stripe stripes[STRIPES];
    uint64_t size;
    /* the registry's */
    struct um_store *next;
    unsigned refs;
    int kind;
    char *name;
    double rate, burst;
    int key;
    char *header;
};

_Static_assert(offsetof(struct stripe, limited) + sizeof(uint64_t) <= 64,
               "a stripe's lock and counters share a cache line");
_Static_assert(offsetof(struct entry, t) + sizeof(double) <= 64,
               "a bucket's tokens and time are in its entry's first line");

static uint64_t seed;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void)
{
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
}

static uint64_t hash_of(um_str k)
{
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < k.len; i++) {
        h ^= (unsigned char)k.base[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

struct um_store *um_store_create(uint64_t size)
{
    pthread_once(&seed_once, seed_init);
    struct um_store *s = um_calloc(1, sizeof(*s));
    s->size = size;
    size_t cap = (size_t)(size / STRIPES);
    /* A bucket per 128 bytes of the share, about an entry: chains stay short. */
    size_t n = 16;
    while (n < cap / 128 && n < (1u << 20))
        n <<= 1;
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];
        pthread_mutex_init(&st->lock, NULL);
        st->cap = cap;
        st->heads = um_calloc(n, sizeof(*st->heads));
        st->mask = n - 1;
    }
    return s;
}

void um_store_destroy(struct um_store *s)
{
    if (s == NULL) return;
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];
        for (struct entry *e = st->newest, *next; e; e = next) {
            next = e->older;
            free(e);
        }
        free(st->heads);
        pthread_mutex_destroy(&st->lock);
    }
    free(s->name);
    free(s->header);
    free(s);
}

static struct stripe *stripe_of(struct um_store *s, uint64_t h)
{
    return &s->stripes[(h >> 58) & (STRIPES - 1)];
}

/* --- within one stripe, its lock held --- */

static void lru_unlink(struct stripe *st, struct entry *e)
{
    if (e->newer) e->newer->older = e->older;
    else st->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else st->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_front(struct stripe *st, struct entry *e)
{
    e->older = st->newest;
    e->newer = NULL;
    if (st->newest) st->newest->newer = e;
    st->newest = e;
    if (st->oldest == NULL) st->oldest = e;
}

static void unlink_free(struct stripe *st, struct entry *e)
{
    struct entry **p = &st->heads[e->hash & st->mask];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    lru_unlink(st, e);
    st->bytes -= e->charge;
    st->count--;
    free(e);
}

static struct entry *find(struct stripe *st, uint64_t h, um_str k, double now)
{
    for (struct entry *e = st->heads[h & st->mask]; e; e = e->hnext) {
        if (e->hash != h || e->klen != k.len || memcmp(e->data, k.base, k.len) != 0) continue;
        if (e->expires > 0 && e->expires <= now) {
            unlink_free(st, e);
            return NULL;
        }
        if (st->newest != e) { /* already first: nothing written */
            lru_unlink(st, e);
            lru_front(st, e);
        }
        return e;
    }
    return NULL;
}

/* A new entry for k with room for a string of vlen bytes, charged first: the oldest
 * entries go until it fits. NULL when it could never fit. */
static struct entry *insert(struct stripe *st, uint64_t h, um_str k, size_t vlen)
{
    size_t charge = sizeof(struct entry) + k.len + vlen;
    if (charge > st->cap || k.len > UINT32_MAX || vlen > UINT32_MAX) return NULL;
    while (st->bytes + charge > st->cap && st->oldest) {
        unlink_free(st, st->oldest);
        st->evicted++;
    }
    struct entry *e = um_calloc(1, charge);
    e->hash = h;
    e->charge = charge;
    e->klen = (uint32_t)k.len;
    e->vlen = (uint32_t)vlen;
    memcpy(e->data, k.base, k.len);
    e->hnext = st->heads[h & st->mask];
    st->heads[h & st->mask] = e;
    lru_front(st, e);
    st->bytes += charge;
    st->count++;
    return e;
}

static void put_value(struct entry *e, const struct um_shared_value *v, double ttl, double now)
{
    e->type = (uint8_t)v->type;
    e->num = v->type == UM_SHARED_BOOL ? (v->num != 0) : v->num;
    if (v->type == UM_SHARED_STR && v->str.len) memcpy(e->data + e->klen, v->str.base, v->str.len);
    e->expires = ttl > 0 ? now + ttl : 0;
}

static size_t vlen_of(const struct um_shared_value *v)
{
    return v->type == UM_SHARED_STR ? v->str.len : 0;
}

/* ---------------------------------------------------------------- the token bucket */

double um_limit_bucket_take(double *tokens, double *last, double now, double rate, double burst)
{
    if (now > *last) {
        *tokens += (now - *last) * rate;
        *last = now;
    }
    if (*tokens > burst) *tokens = burst;
    if (*tokens >= 1) {
        *tokens -= 1;
        return 0;
    }
    return (1 - *tokens) / rate;
}

long um_limit_retry_after(double wait)
{
    double s = ceil(wait);
    if (!(s >= 1)) return 1;
    if (s > 86400 * 365) return 86400 * 365;
    return (long)s;
}

double um_limits_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double um_limit_take(const struct um_limit_def *d, um_str key, double now)
{
    struct um_store *s = d->store;
    uint64_t h = hash_of(key);
    struct stripe *st = stripe_of(s, h);
    pthread_mutex_lock(&st->lock);
    struct entry *e = find(st, h, key, now);
    if (e == NULL && (e = insert(st, h, key, 0)) != NULL) {
        e->type = UM_SHARED_NUM;
        e->num = d->burst; /* a new key starts with a full bucket */
        e->t = now;
    }
    double wait = 0;
    if (e != NULL) wait = um_limit_bucket_take(&e->num, &e->t, now, d->rate, d->burst);
    /* A key too long for the store is not limited: it cannot be counted. */
    if (wait > 0) st->limited++;
    else st->passed++;
    pthread_mutex_unlock(&st->lock);
    return wait;
}

bool um_limit_key_of(const struct um_limit_def *d, const struct um_request *req,
                     const char *client_ip, um_str *key)
{
    switch (d->key) {
    case UM_LIMIT_KEY_CLIENT:
        *key = (um_str){client_ip ? client_ip : "", client_ip ? strlen(client_ip) : 0};
        return true;
    case UM_LIMIT_KEY_HOST:
        *key = req->authority;
        if (key->base == NULL) *key = (um_str){"", 0};
        return true;
    case UM_LIMIT_KEY_HEADER: {
        const um_str *v = um_http1_find_header(req, d->header);
        if (v == NULL) return false;
        *key = *v;
        return true;
    }
    }
    return false;
}

/* ---------------------------------------------------------------- the dictionary */

bool um_shared_get(struct um_store *s, um_str key, double now, struct um_shared_value *out,
                   char *buf, size_t cap, size_t *full)
{
    uint64_t h = hash_of(key);
    struct stripe *st = stripe_of(s, h);
    pthread_mutex_lock(&st->lock);
    struct entry *e = find(st, h, key, now);
    if (e != NULL) {
        out->type = e->type;
        out->num = e->num;
        size_t n = e->vlen < cap ? e->vlen : cap;
        if (n) memcpy(buf, e->data + e->klen, n);
        out->str = (um_str){buf, n};
        if (full) *full = e->vlen;
    }
    pthread_mutex_unlock(&st->lock);
    return e != NULL;
}

static enum um_shared_result store_value(struct um_store *s, um_str key,
                                         const struct um_shared_value *v, double ttl, double now,
                                         bool only_new)
{
    uint64_t h = hash_of(key);
    struct stripe *st = stripe_of(s, h);
    enum um_shared_result r = UM_SHARED_OK;
    pthread_mutex_lock(&st->lock);
    struct entry *e = find(st, h, key, now);
    if (e != NULL && only_new) {
        r = UM_SHARED_EXISTS;
    } else {
        if (e != NULL && e->vlen != vlen_of(v)) {
            unlink_free(st, e);
            e = NULL;
        }
        if (e == NULL) e = insert(st, h, key, vlen_of(v));
        if (e == NULL) r = UM_SHARED_TOO_BIG;
        else put_value(e, v, ttl, now);
    }
    pthread_mutex_unlock(&st->lock);
    return r;
}

enum um_shared_result um_shared_set(struct um_store *s, um_str key,
                                    const struct um_shared_value *v, double ttl, double now)
{
    if (v->type == UM_SHARED_NONE) {
        um_shared_delete(s, key, now);
        return UM_SHARED_OK;
    }
    return store_value(s, key, v, ttl, now, false);
}

enum um_shared_result um_shared_add(struct um_store *s, um_str key,
                                    const struct um_shared_value *v, double ttl, double now)
{
    return store_value(s, key, v, ttl, now, true);
}

enum um_shared_result um_shared_incr(struct um_store *s, um_str key, double n, double init,
                                     double ttl, double now, double *out)
{
    uint64_t h = hash_of(key);
    struct stripe *st = stripe_of(s, h);
    enum um_shared_result r = UM_SHARED_OK;
    pthread_mutex_lock(&st->lock);
    struct entry *e = find(st, h, key, now);
    if (e == NULL) {
        e = insert(st, h, key, 0);
        if (e == NULL) {
            r = UM_SHARED_TOO_BIG;
        } else {
            struct um_shared_value v = {.type = UM_SHARED_NUM, .num = init};
            put_value(e, &v, ttl, now);
        }
    } else if (e->type != UM_SHARED_NUM) {
        r = UM_SHARED_NOT_NUM;
    }
    if (r == UM_SHARED_OK) {
        e->num += n;
        *out = e->num;
    }
    pthread_mutex_unlock(&st->lock);
    return r;
}

bool um_shared_delete(struct um_store *s, um_str key, double now)
{
    uint64_t h = hash_of(key);
    struct stripe *st = stripe_of(s, h);
    pthread_mutex_lock(&st->lock);
    struct entry *e = find(st, h, key, now); /* an expired one goes in find */
    if (e) unlink_free(st, e);
    pthread_mutex_unlock(&st->lock);
    return e != NULL;
}

size_t um_shared_keys(struct um_store *s, size_t max, double now,
                      void (*cb)(void *arg, um_str key), void *arg)
{
    size_t n = 0;
    for (int i = 0; i < STRIPES && (max == 0 || n < max); i++) {
        struct stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        for (struct entry *e = st->newest; e && (max == 0 || n < max); e = e->older) {
            if (e->expires > 0 && e->expires <= now) continue;
            cb(arg, (um_str){e->data, e->klen});
            n++;
        }
        pthread_mutex_unlock(&st->lock);
    }
    return n;
}

void um_store_stats(struct um_store *s, struct um_store_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        out->entries += st->count;
        out->bytes += st->bytes;
        out->evicted += st->evicted;
        out->passed += st->passed;
        out->limited += st->limited;
        pthread_mutex_unlock(&st->lock);
    }
}

/* ---------------------------------------------------------------- the registry */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct um_store *registry;

static bool same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

struct um_store *um__limits_store_ref(int kind, const char *name, uint64_t size, double rate,
                                      double burst, int key, const char *header)
{
    pthread_mutex_lock(&registry_lock);
    struct um_store *s = registry;
    for (; s; s = s->next)
        if (s->kind == kind && strcmp(s->name, name) == 0 && s->size == size &&
            s->rate == rate && s->burst == burst && s->key == key && same(s->header, header))
            break;
    if (s == NULL) {
        s = um_store_create(size);
        s->kind = kind;
        s->name = um_strndup(name, strlen(name));
        s->rate = rate;
        s->burst = burst;
        s->key = key;
        s->header = header ? um_strndup(header, strlen(header)) : NULL;
        s->next = registry;
        registry = s;
    }
    s->refs++;
    pthread_mutex_unlock(&registry_lock);
    return s;
}

void um__limits_store_unref(struct um_store *s)
{
    if (s == NULL) return;
    pthread_mutex_lock(&registry_lock);
    UM_ASSERT(s->refs > 0);
    bool last = --s->refs == 0;
    if (last) {
        struct um_store **p = &registry;
        while (*p != s)
            p = &(*p)->next;
        *p = s->next;
    }
    pthread_mutex_unlock(&registry_lock);
    if (last) um_store_destroy(s);
}

/* Whether an earlier store of the list (a newer one: stores are pushed at its head) has
 * s's kind and name: while a reload that changed a limit runs, the old store and the new
 * one both exist, and a series must appear once. */
static bool shadowed(const struct um_store *s)
{
    for (const struct um_store *o = registry; o != s; o = o->next)
        if (o->kind == s->kind && strcmp(o->name, s->name) == 0) return true;
    return false;
}

static const struct {
    const char *metric, *type, *help;
} families[] = {
    {"requests_total", "counter", "Requests counted by a rate limit, passed or limited (429)."},
    {"evicted_total", "counter", "Keys dropped to make room (the least recently used)."},
    {"entries", "gauge", "Keys held."},
};

/* Label values are names the loader checked (letters, digits, '_', '-'): no escaping. */
void um__limits_render(struct um_buf *b, int kind)
{
    const char *what = kind == UM__STORE_LIMIT ? "rate_limit" : "shared";
    const char *label = kind == UM__STORE_LIMIT ? "limit" : "dict";
    pthread_mutex_lock(&registry_lock);
    for (size_t f = kind == UM__STORE_LIMIT ? 0 : 1; f < UM_NELEMS(families); f++) {
        bool first = true;
        for (struct um_store *s = registry; s; s = s->next) {
            if (s->kind != kind || shadowed(s)) continue;
            struct um_store_stats st;
            um_store_stats(s, &st);
            if (first)
                um_buf_printf(b, "# HELP umbra_%s_%s %s\n# TYPE umbra_%s_%s %s\n", what,
                              families[f].metric, families[f].help, what, families[f].metric,
                              families[f].type);
            first = false;
            if (f == 0)
                um_buf_printf(b,
                              "umbra_%s_%s{%s=\"%s\",result=\"passed\"} %llu\n"
                              "umbra_%s_%s{%s=\"%s\",result=\"limited\"} %llu\n",
                              what, families[f].metric, label, s->name,
                              (unsigned long long)st.passed, what, families[f].metric, label,
                              s->name, (unsigned long long)st.limited);
            else
                um_buf_printf(b, "umbra_%s_%s{%s=\"%s\"} %llu\n", what, families[f].metric,
                              label, s->name,
                              (unsigned long long)(f == 1 ? st.evicted : st.entries));
        }
    }
    pthread_mutex_unlock(&registry_lock);
}
