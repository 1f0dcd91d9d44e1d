/* Fuzzes um_path_normalize, the check that keeps static routes inside their root.
 *
 * The whole input is the raw (still percent-encoded) path. It is normalised into an
 * exact-size buffer of len + 1 bytes (decoding never makes a path longer), then into a
 * smaller one whose size is derived from the input.
 *
 * Properties on UM_OK: the result is NUL-terminated at outlen with no NUL, '\\' or control
 * byte before it, no leading or trailing '/', no "//", no "." or ".." segment; the DIR flag
 * says whether the raw path ended in '/'; an input without '%' normalises to a fixed point;
 * a smaller buffer gives the same result when it fits and UM_ERR when it does not; an
 * encoded '/' or NUL was refused. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "umbra/static.h"

static void check_ok(um_str raw, const char *out, size_t outsz, size_t outlen, unsigned flags)
{
    FUZZ_CHECK(outlen < outsz && out[outlen] == '\0' && strlen(out) == outlen);
    for (size_t i = 0; i < outlen; i++) {
        unsigned char c = (unsigned char)out[i];
        FUZZ_CHECK(c >= 0x20 && c != 0x7f && c != '\\');
    }
    if (outlen > 0) FUZZ_CHECK(out[0] != '/' && out[outlen - 1] != '/');
    FUZZ_CHECK(strstr(out, "//") == NULL);
    /* Segment by segment: none is empty, "." or "..". */
    const char *s = out, *end = out + outlen;
    while (outlen > 0) {
        const char *e = memchr(s, '/', (size_t)(end - s));
        size_t n = e ? (size_t)(e - s) : (size_t)(end - s);
        FUZZ_CHECK(n > 0);
        FUZZ_CHECK(!(n == 1 && s[0] == '.'));
        FUZZ_CHECK(!(n == 2 && s[0] == '.' && s[1] == '.'));
        if (e == NULL) break;
        s = e + 1;
    }
    bool dir = raw.len == 0 || raw.base[raw.len - 1] == '/';
    FUZZ_CHECK(flags == (dir ? UM_PATH_F_DIR : 0u));
    for (size_t i = 0; i + 2 < raw.len; i++) {
        if (raw.base[i] != '%') continue;
        FUZZ_CHECK(!(raw.base[i + 1] == '2' && (raw.base[i + 2] | 0x20) == 'f'));
        FUZZ_CHECK(!(raw.base[i + 1] == '0' && raw.base[i + 2] == '0'));
    }
}

static int normalize(um_str raw, size_t outsz, char **out, size_t *outlen, unsigned *flags)
{
    *out = fuzz_alloc(outsz);
    memset(*out, 'x', outsz);
    *outlen = (size_t)-1;
    *flags = 0xdead;
    int r = um_path_normalize(raw, *out, outsz, outlen, flags);
    FUZZ_CHECK(r == UM_OK || r == UM_ERR);
    if (r == UM_OK) check_ok(raw, *out, outsz, *outlen, *flags);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_dup(data, size);
    /* The parser may hand over an empty path as {NULL, 0}. */
    um_str raw = {size ? buf : NULL, size};
    char *out, *small;
    size_t outlen, slen;
    unsigned flags, sflags;

    int r = normalize(raw, size + 1, &out, &outlen, &flags);

    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    size_t smallsz = 1 + h % (size + 1);
    int rs = normalize(raw, smallsz, &small, &slen, &sflags);
    if (r == UM_OK && outlen < smallsz) {
        FUZZ_CHECK(rs == UM_OK && slen == outlen && sflags == flags &&
                   memcmp(small, out, outlen + 1) == 0);
    } else {
        FUZZ_CHECK(rs == UM_ERR);
    }

    /* Without escapes there is nothing left to decode: a normalised path is a fixed point. */
    if (r == UM_OK && memchr(buf, '%', size) == NULL) {
        char *again;
        size_t alen;
        unsigned aflags;
        FUZZ_CHECK(normalize((um_str){out, outlen}, outlen + 1, &again, &alen, &aflags) == UM_OK);
        FUZZ_CHECK(alen == outlen && memcmp(again, out, outlen) == 0);
        free(again);
    }
    free(small);
    free(out);
    free(buf);
    return 0;
}
