/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk tier's admission to memory (disktier_internal.h): a fresh record read from disk
 * goes into the memory cache when it is asked again within the memory cache's reach, not
 * on its first hit.
 *
 * Promotion costs a copy of the body, an object's allocation and an eviction. It pays
 * only for a record asked again while the memory cache would still hold it: one asked
 * less often than the memory cache turns over would be evicted before its next hit, and
 * its promotion would only push out something else (with a working set eight times the
 * memory, uniform requests promote on every disk hit and hit memory one time in eight).
 * So a record is promoted when its key was read from disk before within the last
 * "memory's worth" of disk hits: the bytes of disk hits since then are below the memory
 * cap (the time an object promoted then would have stayed).
 *
 * The test is a doorkeeper (TinyLFU's; Einziger, Friedman, Manes 2017) over two
 * generations: two Bloom filters of two probes, each a generation of memory/2 bytes of
 * disk hits. A key is "seen" when either holds it; each hit sets it in the current one;
 * when the current generation's bytes reach memory/2 the older filter is cleared and
 * becomes the current one. So a key is seen when asked again within between memory/2
 * and memory bytes of disk hits. Filters of 8 bits a KiB of memory (2 MiB for 2 GB):
 * below 1 % false positives for objects of 1 KiB or more. Workers test and set with
 * relaxed atomics and no lock: a bit lost to a race or a clear only delays a promotion
 * to the next hit, and a false positive only promotes early. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "disktier_internal.h"

#define ADMIT_MIN_BITS (1ull << 16)
#define ADMIT_MAX_BITS (1ull << 28) /* 32 MiB a filter */

void um__disk_admit_init(struct um__disk_admit *a, uint64_t memory)
{
    uint64_t bits = ADMIT_MIN_BITS;
    while (bits < memory / 128 && bits < ADMIT_MAX_BITS)
        bits <<= 1;
    a->mask = bits - 1;
    a->generation = memory / 2 ? memory / 2 : 1;
    for (int g = 0; g < 2; g++)
        a->bits[g] = um_calloc(bits / 64, sizeof(*a->bits[g]));
    atomic_init(&a->cur, 0);
    atomic_init(&a->bytes, 0);
}

void um__disk_admit_dispose(struct um__disk_admit *a)
{
    for (int g = 0; g < 2; g++)
        free((void *)a->bits[g]);
}

static bool probe(_Atomic uint64_t *w, uint64_t mask, uint64_t h)
{
    uint64_t i = h & mask;
    return (atomic_load_explicit(&w[i / 64], memory_order_relaxed) >> (i % 64)) & 1;
}

static void mark(_Atomic uint64_t *w, uint64_t mask, uint64_t h)
{
    uint64_t i = h & mask, bit = 1ull << (i % 64);
    if (!(atomic_load_explicit(&w[i / 64], memory_order_relaxed) & bit))
        atomic_fetch_or_explicit(&w[i / 64], bit, memory_order_relaxed);
}

bool um__disk_admit(struct um__disk_admit *a, struct um_disk_key key, uint64_t bytes)
{
    /* The two probes: the key's two halves (of XXH3-128, um_disk_key_of). */
    uint64_t h1 = key.hi, h2 = key.lo;
    unsigned cur = atomic_load_explicit(&a->cur, memory_order_relaxed) & 1;
    _Atomic uint64_t *now = a->bits[cur], *old = a->bits[cur ^ 1];
    bool seen = (probe(now, a->mask, h1) && probe(now, a->mask, h2)) ||
                (probe(old, a->mask, h1) && probe(old, a->mask, h2));
    mark(now, a->mask, h1);
    mark(now, a->mask, h2);
    uint64_t before = atomic_fetch_add_explicit(&a->bytes, bytes, memory_order_relaxed);
    if (before < a->generation && before + bytes >= a->generation) {
        /* This hit ended the generation: the older filter is emptied and made current. */
        uint64_t words = (a->mask + 1) / 64;
        for (uint64_t i = 0; i < words; i++)
            atomic_store_explicit(&old[i], 0, memory_order_relaxed);
        atomic_store_explicit(&a->cur, cur ^ 1, memory_order_relaxed);
        atomic_store_explicit(&a->bytes, 0, memory_order_relaxed);
    }
    return seen;
}
