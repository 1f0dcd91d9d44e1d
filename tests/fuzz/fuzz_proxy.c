/* Fuzzes um_proxy_parse, the PROXY protocol header a proxy_protocol listener reads first.
 *
 * The input is copied to an exact-size heap buffer (an over-read is an ASan report).
 * Properties: the result is -1, 0 or a length within the input and UM_PROXY_MAX; a header
 * found in the whole input is found again, with the same length and address, in every
 * longer input that starts with it; a prefix of a valid header never reads as invalid;
 * a v1 header ends with CRLF; the family is AF_INET, AF_INET6 or AF_UNSPEC. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/proxyproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = (uint8_t *)fuzz_dup(data, size);
    struct um_proxy_hdr h;
    int r = um_proxy_parse(buf, size, &h);
    FUZZ_CHECK(r >= -1 && r <= (int)size && r <= UM_PROXY_MAX);
    if (r > 0) {
        FUZZ_CHECK(h.family == AF_INET || h.family == AF_INET6 || h.family == AF_UNSPEC);
        if (buf[0] == 'P') FUZZ_CHECK(r >= 2 && buf[r - 2] == '\r' && buf[r - 1] == '\n');
        /* Every prefix is undecided, never refused. */
        for (size_t k = 0; k < (size_t)r; k++) {
            uint8_t *p = (uint8_t *)fuzz_dup(data, k);
            struct um_proxy_hdr ph;
            FUZZ_CHECK(um_proxy_parse(p, k, &ph) == 0);
            free(p);
        }
        /* The header alone gives the same. */
        uint8_t *p = (uint8_t *)fuzz_dup(data, (size_t)r);
        struct um_proxy_hdr same;
        FUZZ_CHECK(um_proxy_parse(p, (size_t)r, &same) == r && same.family == h.family);
        if (h.family != AF_UNSPEC) FUZZ_CHECK(memcmp(&same.src, &h.src, sizeof h.src) == 0);
        free(p);
    }
    free(buf);
    return 0;
}
