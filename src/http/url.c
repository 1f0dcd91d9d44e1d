/* SPDX-License-Identifier: BSD-2-Clause */
/* Canonical request paths for route matching, and the host of an authority. */
#include "umbra/httpfield.h"

#include <string.h>
#include "umbra/ascii.h"

static bool unreserved(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

bool um_url_path_canon(um_str path, char *out, size_t outsz, size_t *outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    if (path.len == 0 || path.base[0] != '/' || outsz < path.len + 1)
        return false;
    /* Segment by segment: each is decoded into place after the output so far, then kept,
     * dropped (".", empty) or turned into a step up (".."). */
    size_t o = 0, i = 0;
    bool trailing = false;
    while (i < path.len) {
        i++; /* the '/' */
        size_t start = o + 1, n = 0;
        while (i < path.len && path.base[i] != '/') {
            int c = (unsigned char)path.base[i];
            if (c == '%') {
                int d = um_pct_byte(path.base + i, path.len - i);
                if (d < 0)
                    return false;
                if (unreserved(d)) {
                    out[start + n++] = (char)d;
                } else {
                    out[start + n++] = '%';
                    out[start + n++] = hex[d >> 4];
                    out[start + n++] = hex[d & 15];
                }
                i += 3;
            } else {
                out[start + n++] = (char)c;
                i++;
            }
        }
        const char *seg = out + start;
        if (n == 0 || (n == 1 && seg[0] == '.')) {
            trailing = true;
        } else if (n == 2 && seg[0] == '.' && seg[1] == '.') {
            if (o == 0)
                return false; /* above the root: malformed, as nginx treats it */
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before the dropped segment */
            trailing = true;
        } else {
            out[o] = '/';
            o = start + n;
            trailing = false;
        }
    }
    if (o == 0 || trailing)
        out[o++] = '/';
    out[o] = '\0';
    *outlen = o;
    return true;
}

um_str um_url_host(um_str authority)
{
    size_t len = authority.len;
    if (len == 0)
        return authority;
    if (authority.base[0] == '[') {
        const char *end = memchr(authority.base, ']', len);
        if (end)
            len = (size_t)(end - authority.base) + 1;
    } else {
        const char *colon = memchr(authority.base, ':', len);
        if (colon)
            len = (size_t)(colon - authority.base);
    }
    return (um_str){authority.base, len};
}
