/* SPDX-License-Identifier: BSD-2-Clause */
/* Base64 (umbra/base64.h): encoding three bytes to four letters at a time, decoding by a
 * table (a load per letter). */
#include "umbra/base64.h"

#include <stdint.h>

static const char std_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void um_base64_append(struct um_buf *b, const void *in, size_t n, bool url)
{
    const char *abc = url ? url_abc : std_abc;
    const unsigned char *p = in;
    um_buf_reserve(b, (n + 2) / 3 * 4);
    char *o = b->base + b->len;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n) v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        o[k++] = abc[v >> 18 & 63];
        o[k++] = abc[v >> 12 & 63];
        if (i + 1 < n)
            o[k++] = abc[v >> 6 & 63];
        else if (!url)
            o[k++] = '=';
        if (i + 2 < n)
            o[k++] = abc[v & 63];
        else if (!url)
            o[k++] = '=';
    }
    um_buf_commit(b, k);
}

/* Each letter's value + 1 (0: not one of the standard alphabet). */
static const unsigned char value[256] = {
    ['A'] = 1,  ['B'] = 2,  ['C'] = 3,  ['D'] = 4,  ['E'] = 5,  ['F'] = 6,  ['G'] = 7,  ['H'] = 8,
    ['I'] = 9,  ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
    ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
    ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
    ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

bool um_base64_decode(um_str in, char *out, size_t cap, size_t *outlen)
{
    size_t n = in.len;
    while (n > 0 && in.base[n - 1] == '=' && in.len - n < 2)
        n--;
    if (n % 4 == 1) return false;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = value[(unsigned char)in.base[i]] - 1;
        if (v < 0) return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == cap) return false;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    *outlen = o;
    return true;
}
