/* Fuzzes the Accept-Encoding negotiation of umbra/compress.h (and the type list check).
 *
 * Input: one order byte (which of the codings the server offers, in which order), then
 * the Accept-Encoding value; LFs in it split it into several field lines.
 *
 * Properties:
 * - the result is identity or one of the offered codings;
 * - the result depends only on the value, not on how it is split into lines at commas;
 * - the same value gives the same result twice (no state);
 * - offering fewer codings never yields one that was not offered. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/compress.h"

#define MAX_LINES 16

static int offered(const unsigned char *order, size_t n, enum um_coding c)
{
    for (size_t i = 0; i < n; i++)
        if (order[i] == c) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const unsigned char perms[6][3] = {{3, 2, 1}, {3, 1, 2}, {2, 3, 1},
                                              {2, 1, 3}, {1, 2, 3}, {1, 3, 2}};
    unsigned char order[3];
    size_t n = 1 + (data[0] >> 4) % 3;
    memcpy(order, perms[(data[0] & 0x0f) % 6], 3);
    char *v = fuzz_dup(data + 1, size - 1);
    size_t len = size - 1;

    struct um_header h[MAX_LINES];
    size_t nh = 0, start = 0;
    for (size_t i = 0; i <= len && nh < MAX_LINES; i++)
        if (i == len || v[i] == '\n') {
            h[nh++] = (struct um_header){UM_STR("Accept-Encoding"), {v + start, i - start}};
            start = i + 1;
        }
    enum um_coding c = um_compress_negotiate(h, nh, order, n);
    FUZZ_CHECK(c == UM_CODING_IDENTITY || offered(order, n, c));
    FUZZ_CHECK(um_compress_negotiate(h, nh, order, n) == c);
    if (n > 1) {
        enum um_coding c1 = um_compress_negotiate(h, nh, order, 1);
        FUZZ_CHECK(c1 == UM_CODING_IDENTITY || c1 == order[0]);
    }
    /* One line with the LFs made commas: the same list. */
    if (nh < MAX_LINES) {
        char *joined = fuzz_dup((const uint8_t *)v, len);
        for (size_t i = 0; i < len; i++)
            if (joined[i] == '\n') joined[i] = ',';
        struct um_header one = {UM_STR("accept-encoding"), {joined, len}};
        FUZZ_CHECK(um_compress_negotiate(&one, 1, order, n) == c);
        free(joined);
    }
    struct um_compress_conf cc;
    memset(&cc, 0, sizeof cc);
    strcpy(cc.types[cc.num_types++], "text/*");
    strcpy(cc.types[cc.num_types++], "application/json");
    (void)um_compress_type_ok(&cc, (um_str){v, len});
    free(v);
    return 0;
}
