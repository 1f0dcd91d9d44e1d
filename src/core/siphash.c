/* SPDX-License-Identifier: BSD-2-Clause */
/* SipHash-c-d (umbra/siphash.h), from the paper's description: four 64-bit words of state
 * from the key and constants, c rounds per 8-byte word of the message (the last one
 * holding the length in its top byte), then d rounds after 0xff is folded in. */
#include "umbra/siphash.h"

#include <endian.h>
#include <stdbool.h>
#include <string.h>

static uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

struct sip {
    uint64_t v0, v1, v2, v3;
};

static void round1(struct sip *s)
{
    s->v0 += s->v1;
    s->v1 = rotl(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = rotl(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = rotl(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = rotl(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = rotl(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = rotl(s->v2, 32);
}

/* One load (the compiler did not turn a byte loop into one), then little-endian. */
static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return le64toh(v);
}

/* SipHash-c-d over data; out[1] only for the 128-bit output (out128), which starts with
 * v1 ^= 0xee, folds 0xee instead of 0xff and squeezes a second word after v1 ^= 0xdd. */
static inline void siphash(const uint64_t k[2], const void *data, size_t len, int c, int d,
                           bool out128, uint64_t out[2])
{
    const unsigned char *in = data;
    struct sip s = {0x736f6d6570736575ULL ^ k[0], 0x646f72616e646f6dULL ^ k[1],
                    0x6c7967656e657261ULL ^ k[0], 0x7465646279746573ULL ^ k[1]};
    if (out128) s.v1 ^= 0xee;
    uint64_t b = (uint64_t)len << 56;
    size_t full = len - len % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load_le64(in + i);
        s.v3 ^= m;
        for (int r = 0; r < c; r++)
            round1(&s);
        s.v0 ^= m;
    }
    if (len % 8 > 0) {
        unsigned char tail[8] = {0};
        memcpy(tail, in + full, len % 8);
        b |= load_le64(tail);
    }
    s.v3 ^= b;
    for (int r = 0; r < c; r++)
        round1(&s);
    s.v0 ^= b;
    s.v2 ^= out128 ? 0xee : 0xff;
    for (int r = 0; r < d; r++)
        round1(&s);
    out[0] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
    if (!out128) return;
    s.v1 ^= 0xdd;
    for (int r = 0; r < d; r++)
        round1(&s);
    out[1] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t um_siphash13(const uint64_t k[2], const void *data, size_t len)
{
    uint64_t out[2];
    siphash(k, data, len, 1, 3, false, out);
    return out[0];
}

uint64_t um_siphash24(const uint64_t k[2], const void *data, size_t len)
{
    uint64_t out[2];
    siphash(k, data, len, 2, 4, false, out);
    return out[0];
}

void um_siphash24_128(const uint64_t k[2], const void *data, size_t len, uint64_t out[2])
{
    siphash(k, data, len, 2, 4, true, out);
}
