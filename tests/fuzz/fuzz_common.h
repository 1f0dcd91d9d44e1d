/* Helpers shared by the fuzz targets. Header-only: each target is one translation unit. */
#ifndef UMBRA_FUZZ_COMMON_H
#define UMBRA_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A failed property is a crash for libFuzzer: it saves the input and stops. */
#define FUZZ_CHECK(e) ((e) ? (void)0 : fuzz_fail(__FILE__, __LINE__, #e))

static inline _Noreturn void fuzz_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "%s:%d: fuzz property failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

/* malloc that never returns NULL, and allocates at least one byte. */
static inline char *fuzz_alloc(size_t n)
{
    char *p = malloc(n ? n : 1);
    FUZZ_CHECK(p != NULL);
    return p;
}

/* A heap copy of exactly n bytes (at least one allocated), so that ASan reports a read or
 * write one byte past the end; the input libFuzzer hands over may sit in a larger buffer. */
static inline char *fuzz_dup(const uint8_t *data, size_t n)
{
    char *p = fuzz_alloc(n);
    if (n > 0) memcpy(p, data, n);
    return p;
}

/* Small deterministic generator for split points derived from the input. */
static inline uint32_t fuzz_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

#endif
