/* SPDX-License-Identifier: BSD-2-Clause */
/* Rendezvous (highest random weight) hashing: the owner of a key is the member with the
 * highest weight(member, key). Every node computes the same owner from the same member
 * list without talking to the others; removing a member moves only the keys it owned (to
 * their second choice), adding one moves only the keys it now wins, about 1/N of them.
 * The cost is O(N) weights per lookup, which is nothing next to a miss for the N of a
 * cache ring (README "Cluster" discusses hundreds of nodes). */
#include "umbra/cluster.h"

/* FNV-1a, then a 64-bit finaliser (splitmix64's) so that the weights of keys that differ
 * in one byte are unrelated. */
static uint64_t fnv1a(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t weight_of(uint64_t hk, um_str member)
{
    return mix(hk ^ mix(fnv1a(member.base, member.len, 0xcbf29ce484222325ull)));
}

uint64_t um_cluster_weight(um_str member, um_str key)
{
    return weight_of(fnv1a(key.base, key.len, 0xcbf29ce484222325ull), member);
}

int um_cluster_owner(const um_str *members, size_t n, um_str key,
                     bool (*usable)(void *arg, size_t i), void *arg)
{
    uint64_t hk = fnv1a(key.base, key.len, 0xcbf29ce484222325ull); /* once, not per member */
    int best = -1;
    uint64_t best_w = 0;
    for (size_t i = 0; i < n; i++) {
        if (usable && !usable(arg, i)) continue;
        uint64_t w = weight_of(hk, members[i]);
        if (best < 0 || w > best_w) {
            best = (int)i;
            best_w = w;
        }
    }
    return best;
}
