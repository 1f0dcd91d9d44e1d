/* SPDX-License-Identifier: BSD-2-Clause */
/* The ASCII character tests HTTP's grammar needs (RFC 9110 5.6), one copy for every floor:
 * no locale, no table, inline. */
#ifndef UMBRA_ASCII_H
#define UMBRA_ASCII_H

#include <stdbool.h>
#include <stddef.h>

/* The value of a hexadecimal digit, either case, or -1. */
static inline int um_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte of the percent escape at s ("%2F"; n bytes from s on), or -1 when s does not
 * start with a whole one. */
static inline int um_pct_byte(const char *s, size_t n)
{
    if (n < 3 || s[0] != '%')
        return -1;
    int hi = um_hexval((unsigned char)s[1]), lo = um_hexval((unsigned char)s[2]);
    return hi < 0 || lo < 0 ? -1 : hi << 4 | lo;
}

/* c with an ASCII capital made small; every other byte as it is. */
static inline char um_ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

/* Optional white space: SP or HTAB. */
static inline bool um_is_ows(int c)
{
    return c == ' ' || c == '\t';
}

#endif
