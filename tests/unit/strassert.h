/* Test helper: assertions on um_str views, for the parsers' tests. Include after cmocka.h. */
#ifndef UMBRA_TEST_STRASSERT_H
#define UMBRA_TEST_STRASSERT_H

#include <string.h>

#include "umbra/common.h"

/* s holds exactly the bytes of lit. */
static inline void assert_str(um_str s, const char *lit)
{
    size_t n = strlen(lit);
    if (s.len != n || (n > 0 && memcmp(s.base, lit, n) != 0))
        fail_msg("got \"%.*s\", want \"%s\"", (int)s.len, s.base ? s.base : "", lit);
}

/* a and b hold the same bytes (wherever they are). */
static inline void assert_same_str(um_str a, um_str b)
{
    assert_int_equal(a.len, b.len);
    if (a.len > 0) assert_memory_equal(a.base, b.base, a.len);
}

#endif
