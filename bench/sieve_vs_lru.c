/* Hit ratio of Umbra's cache store (SIEVE) against LRU on one Zipf trace. Part of the
 * "cache" benchmark (bench/cache.sh, which builds it against build-bench/libumbra_core.a).
 *
 * usage: sieve_vs_lru [OBJECTS [REQUESTS [ALPHA [CACHE_PCT [SEED]]]]]
 *        (defaults: 100000 1000000 0.9 10 42)
 *
 * The trace: REQUESTS requests drawn from a Zipf(ALPHA) popularity over OBJECTS objects of
 * 1 KiB each, from a fixed seed (the same trace on every run and machine). The cache holds
 * CACHE_PCT % of the objects: K = OBJECTS * CACHE_PCT / 100 objects.
 *
 * - LRU: a plain LRU of K objects (hash table + doubly linked list), in this program.
 * - SIEVE: the trace replayed through the real store by um_cache_sim() (index, SIEVE
 *   queue, memory cap). The store's cap counts bytes (object structs, keys, body chunks,
 *   index tables), so the cap is calibrated first: the memory the store uses to hold
 *   exactly K of these objects. With the store's default watermarks (as Umbra runs it), an
 *   allocation that would pass the cap evicts down to 90% of it, so the store holds
 *   between about 0.9 K and K objects ("sieve"); "sieve-exact" sets both watermarks to
 *   100% so that it evicts just enough and holds K, as the LRU does. "fifo" is the store
 *   with its FIFO switch (the visited bits ignored), for reference.
 *
 * Prints one "policy NAME hits N ratio R objects M" line per policy, after a "trace:" line.
 * The hit counts include the cold start (the first request of every object is a miss
 * under any policy). */
#include "store_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

/* splitmix64: small, good enough, and the same sequence everywhere. */
static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1). */
static double uniform(void)
{
    return (double)(rng() >> 11) / 9007199254740992.0;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "sieve_vs_lru: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- LRU: a chained hash table over a fixed pool of K nodes, and a recency list ------- */

struct lru_node {
    uint64_t key;
    uint32_t prev, next; /* recency list; NIL at the ends */
    uint32_t hnext;      /* hash chain */
};

#define NIL UINT32_MAX

struct lru {
    struct lru_node *nodes;
    uint32_t *buckets;
    uint32_t mask;
    uint32_t cap, used;
    uint32_t head, tail; /* head: most recently used */
};

static uint32_t lru_hash(const struct lru *l, uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (uint32_t)key & l->mask;
}

static void lru_init(struct lru *l, uint32_t cap)
{
    uint32_t nb = 1;
    while (nb < 2 * cap)
        nb <<= 1;
    l->nodes = xmalloc((size_t)cap * sizeof(*l->nodes));
    l->buckets = xmalloc((size_t)nb * sizeof(*l->buckets));
    for (uint32_t i = 0; i < nb; i++)
        l->buckets[i] = NIL;
    l->mask = nb - 1;
    l->cap = cap;
    l->used = 0;
    l->head = l->tail = NIL;
}

static void lru_unlink_list(struct lru *l, uint32_t i)
{
    struct lru_node *n = &l->nodes[i];
    if (n->prev != NIL)
        l->nodes[n->prev].next = n->next;
    else
        l->head = n->next;
    if (n->next != NIL)
        l->nodes[n->next].prev = n->prev;
    else
        l->tail = n->prev;
}

static void lru_push_front(struct lru *l, uint32_t i)
{
    struct lru_node *n = &l->nodes[i];
    n->prev = NIL;
    n->next = l->head;
    if (l->head != NIL) l->nodes[l->head].prev = i;
    l->head = i;
    if (l->tail == NIL) l->tail = i;
}

/* Returns true on a hit (and makes the key the most recent); on a miss inserts it,
 * evicting the least recently used key when full. */
static bool lru_access(struct lru *l, uint64_t key)
{
    uint32_t b = lru_hash(l, key);
    for (uint32_t i = l->buckets[b]; i != NIL; i = l->nodes[i].hnext) {
        if (l->nodes[i].key == key) {
            if (l->head != i) {
                lru_unlink_list(l, i);
                lru_push_front(l, i);
            }
            return true;
        }
    }
    uint32_t i;
    if (l->used < l->cap) {
        i = l->used++;
    } else {
        i = l->tail;
        lru_unlink_list(l, i);
        uint32_t *pp = &l->buckets[lru_hash(l, l->nodes[i].key)];
        while (*pp != i)
            pp = &l->nodes[*pp].hnext;
        *pp = l->nodes[i].hnext;
    }
    l->nodes[i].key = key;
    l->nodes[i].hnext = l->buckets[b];
    l->buckets[b] = i;
    lru_push_front(l, i);
    return false;
}

static void lru_free(struct lru *l)
{
    free(l->nodes);
    free(l->buckets);
}

/* ---- main ------------------------------------------------------------------------------ */

static double arg_num(int argc, char **argv, int i, double def, double min, double max)
{
    if (argc <= i) return def;
    char *end;
    double v = strtod(argv[i], &end);
    if (*argv[i] == '\0' || *end != '\0' || !(v >= min && v <= max)) {
        fprintf(stderr, "usage: sieve_vs_lru [OBJECTS [REQUESTS [ALPHA [CACHE_PCT [SEED]]]]]\n"
                        "bad argument %d: '%s'\n",
                i, argv[i]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const uint32_t nobj = (uint32_t)arg_num(argc, argv, 1, 100000, 10, 50000000);
    const size_t nreq = (size_t)arg_num(argc, argv, 2, 1000000, 1, 500000000);
    const double alpha = arg_num(argc, argv, 3, 0.9, 0.01, 10);
    const double pct = arg_num(argc, argv, 4, 10, 0.001, 100);
    rng_state = (uint64_t)arg_num(argc, argv, 5, 42, 0, 1e18);
    const uint32_t size = 1024;
    uint32_t k = (uint32_t)((double)nobj * pct / 100.0 + 0.5);
    if (k < 1) k = 1;

    /* The trace. Rank r (0 = most popular) has weight 1 / (r + 1)^alpha; a request draws a
     * rank by inverting the cumulative weights. Keys are scattered (an odd multiplier is a
     * bijection on 64 bits) so that nothing can guess popularity from a key. */
    double *cdf = xmalloc((size_t)nobj * sizeof(*cdf));
    double sum = 0;
    for (uint32_t r = 0; r < nobj; r++)
        cdf[r] = (sum += pow((double)r + 1, -alpha));
    struct um_cache_sim_req *reqs = xmalloc(nreq * sizeof(*reqs));
    uint32_t distinct = 0;
    unsigned char *seen = calloc(nobj, 1);
    if (seen == NULL) return 1;
    for (size_t i = 0; i < nreq; i++) {
        double u = uniform() * sum;
        uint32_t lo = 0, hi = nobj - 1;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (!seen[lo]) {
            seen[lo] = 1;
            distinct++;
        }
        reqs[i].key = ((uint64_t)lo + 1) * 0x9e3779b97f4a7c15ULL;
        reqs[i].size = size;
    }
    free(seen);
    free(cdf);

    /* Calibration: the store's memory for exactly K of these objects, with no pressure. */
    struct um_cache_sim_req *fill = xmalloc((size_t)k * sizeof(*fill));
    for (uint32_t i = 0; i < k; i++) {
        fill[i].key = ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ULL;
        fill[i].size = size;
    }
    struct um_cache_opts big = {.memory_cap = (size_t)k * 16384 + (64u << 20)};
    struct um_cache_stats st;
    um_cache_sim(&big, fill, k, &st);
    free(fill);
    if (st.objects != k || st.evictions != 0) {
        fprintf(stderr, "sieve_vs_lru: calibration failed (%zu objects held of %u)\n", st.objects,
                k);
        return 1;
    }
    const size_t cap = st.memory_used;

    printf("trace: zipf %.2f, %u objects of %u bytes (%u requested at least once), %zu "
           "requests, seed %s; cache %.4g%% = %u objects (store cap %zu bytes, %.0f per object)\n",
           alpha, nobj, size, distinct, nreq, argc > 5 ? argv[5] : "42", pct, k, cap,
           (double)cap / k);

    struct {
        const char *name;
        struct um_cache_opts o;
    } runs[] = {
        {"sieve", {.memory_cap = cap}},
        {"sieve-exact", {.memory_cap = cap, .high_water_pct = 100, .low_water_pct = 100}},
        {"fifo", {.memory_cap = cap, .fifo = true}},
    };
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        size_t hits = um_cache_sim(&runs[r].o, reqs, nreq, &st);
        printf("policy %s hits %zu ratio %.4f objects %zu evictions %llu\n", runs[r].name, hits,
               (double)hits / (double)nreq, st.objects, (unsigned long long)st.evictions);
    }

    struct lru l;
    lru_init(&l, k);
    size_t hits = 0;
    for (size_t i = 0; i < nreq; i++)
        hits += lru_access(&l, reqs[i].key);
    printf("policy lru hits %zu ratio %.4f objects %u evictions %zu\n", hits,
           (double)hits / (double)nreq, l.used, nreq - hits - l.used);
    lru_free(&l);
    free(reqs);
    return 0;
}
