/* SPDX-License-Identifier: BSD-2-Clause */
/* The caching layer's surrogate keys: the response fields that tag a stored object
 * (Fastly's Surrogate-Key, Cloudflare's Cache-Tag, Varnish xkey's xkey), and the PURGE
 * requests that use them (see origin.c). The index itself is the store's (tags.c). */
#include "internal.h"

#include <string.h>

#include "umbra/httpfield.h"

bool um_cache_is_tag_field(um_str name)
{
    enum um_field_id id = um_http_field_id(name);
    return id == UM_FIELD_SURROGATE_KEY || id == UM_FIELD_CACHE_TAG || id == UM_FIELD_XKEY;
}

size_t um_cache_split_tags(um_str v, um_str *out, size_t n, size_t max)
{
    const char *p = v.base, *end = v.base + v.len;
    while (p < end && n < max) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *b = p;
        while (p < end && *p != ' ' && *p != '\t' && *p != ',')
            p++;
        if (p > b)
            out[n++] = (um_str){b, (size_t)(p - b)};
    }
    return n;
}

size_t um_cache_response_tags(const struct um_header *h, size_t nh, um_str *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < nh && n < max; i++)
        if (um_cache_is_tag_field(h[i].name))
            n = um_cache_split_tags(h[i].value, out, n, max);
    return n;
}
