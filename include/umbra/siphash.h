/* SPDX-License-Identifier: BSD-2-Clause */
/* SipHash (Aumasson and Bernstein, 2012), keyed with 128 bits (src/core/siphash.c):
 * SipHash-1-3 for hash tables a client's keys reach (the cache's index), SipHash-2-4, the
 * paper's MAC strength, where a tag stands for a secret (the access module's verified
 * passwords). Pure functions; any thread. */
#ifndef UMBRA_SIPHASH_H
#define UMBRA_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t um_siphash13(const uint64_t k[2], const void *data, size_t len);
uint64_t um_siphash24(const uint64_t k[2], const void *data, size_t len);
/* SipHash-2-4 with its 128-bit output (the paper's authors' variant): out[0] and out[1]
 * are the little-endian halves of the 16 bytes. */
void um_siphash24_128(const uint64_t k[2], const void *data, size_t len, uint64_t out[2]);

#endif
