/* Fuzzes um_chunked_decode.
 *
 * Input: byte 0 chooses how the body is cut into pieces, the rest is the chunked body.
 * The body is decoded in one call, then fed piece by piece to a fresh decoder, each
 * piece in its own exact-size heap buffer (so an over-read or an overlong write is an ASan
 * report), the way a connection feeds what each read returned.
 *
 * Properties: each call keeps *out_len <= *consumed <= len and uses all its input unless
 * it returns UM_DONE or UM_ERR; the pieces give the same result, the same decoded bytes
 * and the same number of consumed bytes as the single call. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/http1.h"

struct outcome {
    int result;
    size_t consumed; /* input bytes used up to the end (or the error) */
    char *out;       /* decoded bytes, concatenated */
    size_t out_len;
};

static int decode(struct um_chunked *d, const uint8_t *data, size_t len, struct outcome *o)
{
    char *buf = fuzz_dup(data, len);
    size_t consumed = (size_t)-1, out_len = (size_t)-1;
    int r = um_chunked_decode(d, buf, len, &consumed, &out_len);
    FUZZ_CHECK(r == UM_AGAIN || r == UM_DONE || r == UM_ERR);
    FUZZ_CHECK(consumed <= len && out_len <= consumed);
    if (r == UM_AGAIN) FUZZ_CHECK(consumed == len);
    memcpy(o->out + o->out_len, buf, out_len);
    o->out_len += out_len;
    o->consumed += consumed;
    o->result = r;
    free(buf);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t mode = data[0];
    const uint8_t *in = data + 1;
    size_t len = size - 1;
    struct um_chunked d;

    struct outcome whole = {0, 0, fuzz_alloc(len), 0};
    um_chunked_init(&d);
    decode(&d, in, len, &whole);

    /* Piece sizes: 1 byte at a time, or random sizes up to 2, 16, 128 bytes (seeded by
     * the mode byte and the length, so the same input is always cut the same way). */
    static const size_t max_piece[4] = {1, 2, 16, 128};
    size_t maxp = max_piece[mode % 4];
    uint32_t rng = 0x9e3779b9u ^ (uint32_t)mode << 8 ^ (uint32_t)len;
    struct outcome pieces = {UM_AGAIN, 0, fuzz_alloc(len), 0};
    um_chunked_init(&d);
    size_t off = 0;
    do {
        size_t n = 1 + fuzz_rand(&rng) % maxp;
        if (n > len - off) n = len - off;
        /* Empty calls are legal too: one now and then. */
        if (fuzz_rand(&rng) % 16 == 0) n = 0;
        if (decode(&d, in + off, n, &pieces) != UM_AGAIN) break;
        off += n;
    } while (off < len);

    FUZZ_CHECK(pieces.result == whole.result);
    FUZZ_CHECK(pieces.consumed == whole.consumed);
    FUZZ_CHECK(pieces.out_len == whole.out_len);
    FUZZ_CHECK(memcmp(pieces.out, whole.out, whole.out_len) == 0);

    /* A finished or failed decoder stays put. */
    if (whole.result != UM_AGAIN && len > 0) {
        struct outcome more = {0, 0, fuzz_alloc(len), 0};
        FUZZ_CHECK(decode(&d, in, len, &more) == whole.result);
        FUZZ_CHECK(more.consumed == 0 && more.out_len == 0);
        free(more.out);
    }
    free(whole.out);
    free(pieces.out);
    return 0;
}
