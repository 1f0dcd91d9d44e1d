/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the caching rules (policy*.c) share: saturating arithmetic on the
 * delta-seconds they compute with, and their parsing. */
#ifndef UMBRA_CACHE_POLICY_INTERNAL_H
#define UMBRA_CACHE_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "umbra/ascii.h"
#include "umbra/common.h"

/* ---- small helpers -------------------------------------------------------------------- */

static inline int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r) || r > UM_DELTA_MAX) return UM_DELTA_MAX;
    return r;
}

/* a - b for times; saturates instead of overflowing. */
static inline int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) return a > b ? INT64_MAX : INT64_MIN;
    return r;
}

static inline int64_t clamp_delta(int64_t v)
{
    return v < 0 ? 0 : v > UM_DELTA_MAX ? UM_DELTA_MAX : v;
}

static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* delta-seconds = 1*DIGIT, saturating at 2^31 (RFC 9111 1.2.2). */
static inline bool parse_delta(um_str s, int64_t *v)
{
    if (s.len == 0) return false;
    int64_t r = 0;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.base[i];
        if (c < '0' || c > '9') return false;
        if (r < UM_DELTA_MAX) r = r * 10 + (c - '0');
    }
    *v = r > UM_DELTA_MAX ? UM_DELTA_MAX : r;
    return true;
}

#endif
