/* SPDX-License-Identifier: BSD-2-Clause */
#include "umbra/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool um_str_eq(um_str s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.base, lit, n) == 0;
}

um_str um_str_trim(um_str s)
{
    while (s.len > 0 && (s.base[0] == ' ' || s.base[0] == '\t')) {
        s.base++;
        s.len--;
    }
    while (s.len > 0 && (s.base[s.len - 1] == ' ' || s.base[s.len - 1] == '\t'))
        s.len--;
    return s;
}

_Noreturn void um_panic(const char *file, int line, const char *expr)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

static void *check(void *p, const char *file, int line)
{
    if (p == NULL)
        um_panic(file, line, "out of memory");
    return p;
}

void *um__xmalloc(size_t n, const char *file, int line)
{
    return check(malloc(n ? n : 1), file, line);
}

void *um__xcalloc(size_t n, size_t size, const char *file, int line)
{
    return check(calloc(n ? n : 1, size ? size : 1), file, line);
}

void *um__xrealloc(void *p, size_t n, const char *file, int line)
{
    return check(realloc(p, n ? n : 1), file, line);
}

char *um__xstrndup(const char *s, size_t n, const char *file, int line)
{
    char *d = check(malloc(n + 1), file, line);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}
