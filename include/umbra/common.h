/* SPDX-License-Identifier: BSD-2-Clause */
/* Basic types shared by every module (the core floor, src/core/): slices, status codes,
 * assertions, allocation that panics with file:line. Pure helpers, safe from any thread. */
#ifndef UMBRA_COMMON_H
#define UMBRA_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The version comes from CMake's project(VERSION), its one source, as a definition on the
 * compiler's command line. */
#ifndef UMBRA_VERSION
#error "UMBRA_VERSION is defined by CMakeLists.txt (project VERSION)"
#endif

/* Status convention for paths that may have to wait (nginx NGX_AGAIN, curl CURLE_AGAIN). */
#define UM_OK 0
#define UM_ERR (-1)
#define UM_AGAIN (-2)
#define UM_DONE 1

/* A borrowed byte range; layout-compatible with struct iovec. Not NUL-terminated. */
typedef struct um_str {
    const char *base;
    size_t len;
} um_str;

#define UM_STR(lit) ((um_str){(lit), sizeof(lit) - 1})
#define UM_NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* The struct of type that holds member at ptr (a callback's task, timer, sink or io back
 * to the state it is part of). */
#define um_container_of(ptr, type, member)                                                  \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Case-insensitive comparison of s with the NUL-terminated ASCII string lit. Inline: it
 * runs for every field against lists of names, and most differ in the first byte. */
static inline bool um_str_eq_ci(um_str s, const char *lit)
{
    for (size_t i = 0; i < s.len; i++) {
        unsigned char a = (unsigned char)s.base[i], b = (unsigned char)lit[i];
        if (b == '\0')
            return false;
        if (a >= 'A' && a <= 'Z')
            a = (unsigned char)(a + 32);
        if (b >= 'A' && b <= 'Z')
            b = (unsigned char)(b + 32);
        if (a != b)
            return false;
    }
    return lit[s.len] == '\0';
}
/* Case-insensitive (ASCII) comparison of a and b. */
static inline bool um_str_ieq(um_str a, um_str b)
{
    if (a.len != b.len)
        return false;
    for (size_t i = 0; i < a.len; i++) {
        unsigned char x = (unsigned char)a.base[i], y = (unsigned char)b.base[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y + 32);
        if (x != y)
            return false;
    }
    return true;
}
/* Exact comparison of s with lit. */
bool um_str_eq(um_str s, const char *lit);

/* Writes v in decimal at p (at most 20 bytes, no NUL); returns the end. Inline: status
 * lines and lengths on the hit path use it. */
static inline char *um_u64_dec(char *p, uint64_t v)
{
    char tmp[20];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(p, tmp + i, sizeof(tmp) - i);
    return p + (sizeof(tmp) - i);
}
/* Returns s without leading and trailing spaces and tabs. */
um_str um_str_trim(um_str s);

/* Prints "file:line: assertion failed: expr" and aborts. Never returns. */
_Noreturn void um_panic(const char *file, int line, const char *expr);

/* Stays on in release builds. Never assert on what a client or an origin sent. */
#define UM_ASSERT(e) ((e) ? (void)0 : um_panic(__FILE__, __LINE__, #e))

/* malloc/calloc/realloc that panic on exhaustion (with file:line). */
void *um__xmalloc(size_t n, const char *file, int line);
void *um__xcalloc(size_t n, size_t size, const char *file, int line);
void *um__xrealloc(void *p, size_t n, const char *file, int line);
char *um__xstrndup(const char *s, size_t n, const char *file, int line);
#define um_malloc(n) um__xmalloc((n), __FILE__, __LINE__)
#define um_calloc(n, s) um__xcalloc((n), (s), __FILE__, __LINE__)
#define um_realloc(p, n) um__xrealloc((p), (n), __FILE__, __LINE__)
#define um_strndup(s, n) um__xstrndup((s), (n), __FILE__, __LINE__)

#endif
