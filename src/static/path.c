/* SPDX-License-Identifier: BSD-2-Clause */
/* Request path to file path: the one place that decides what a static route may open.
 *
 * The path is decoded exactly once. A client that sends "%252e%252e" gets a file literally
 * named "%2e%2e", never "..": decoding again would let a second layer of escapes through
 * every check made on the first. Bytes >= 0x80 pass unchanged and unvalidated, so an
 * "overlong UTF-8" dot (%c0%ae) is just an odd file name, not a dot: the kernel compares
 * names byte for byte. Segments are checked after decoding, one at a time, so "." and ".."
 * are caught however they were spelled. */
#include "umbra/static.h"

#include <string.h>
#include "umbra/ascii.h"

int um_path_normalize(um_str raw, char *out, size_t outsz, size_t *outlen, unsigned *flags)
{
    if (outsz == 0) return UM_ERR;
    out[0] = '\0';

    /* raw.base may be NULL when raw.len is 0, and NULL + 0 is undefined behaviour. */
    const char *p = raw.base, *end = raw.len > 0 ? raw.base + raw.len : raw.base;
    size_t olen = 0;

    for (;;) {
        /* Decode the segment straight into place after a separator; drop it again if it
         * turns out to be "." or empty. Its length is the file system's business (a name
         * over NAME_MAX is simply not found). */
        size_t start = olen + (olen > 0), slen = 0;
        char lead[2] = {0, 0}; /* the first bytes: enough to tell "." and ".." */
        while (p < end && *p != '/') {
            unsigned char c = (unsigned char)*p;
            if (c == '%') {
                int d = um_pct_byte(p, (size_t)(end - p));
                if (d < 0) goto fail;
                c = (unsigned char)d;
                /* An encoded '/' would let a "segment" carry a separator past the ".."
                 * check below. */
                if (c == '/') goto fail;
                p += 3;
            } else {
                p++;
            }
            if (c < 0x20 || c == 0x7f || c == '\\') goto fail;
            if (slen < 2) lead[slen] = (char)c;
            if (start + slen < outsz) out[start + slen] = (char)c;
            slen++;
        }
        bool dot = slen == 1 && lead[0] == '.';
        if (slen == 2 && lead[0] == '.' && lead[1] == '.') goto fail;
        if (slen > 0 && !dot) {
            if (start + slen > outsz - 1) goto fail; /* no room for it and the NUL */
            if (olen > 0) out[olen] = '/';
            olen = start + slen;
        }

        if (p == end) break;
        p++; /* the '/' */
    }

    out[olen] = '\0';
    *outlen = olen;
    *flags = (raw.len == 0 || raw.base[raw.len - 1] == '/') ? UM_PATH_F_DIR : 0;
    return UM_OK;

fail:
    out[0] = '\0';
    return UM_ERR;
}
