/* SPDX-License-Identifier: BSD-2-Clause */
/* What the cache did for one request, as a type (RFC 9211 Cache-Status's parameters).
 * Types only: the cache layer fills it in and formats the Cache-Status field from it
 * (um_cache_status_format, cachepolicy.h); the connection, the access log and the metrics
 * read its fields. Any thread; no functions here. */
#ifndef UMBRA_CACHESTATUS_H
#define UMBRA_CACHESTATUS_H

#include <stdbool.h>
#include <stdint.h>

enum um_cache_fwd {
    UM_FWD_NONE = 0,
    UM_FWD_BYPASS,    /* the cache was configured not to handle this request */
    UM_FWD_METHOD,    /* the method is not cacheable */
    UM_FWD_URI_MISS,  /* nothing stored for the URI */
    UM_FWD_VARY_MISS, /* stored, but not for these request headers */
    UM_FWD_MISS,      /* stored but unusable for another reason */
    UM_FWD_REQUEST,   /* the request asked to go forward (no-cache, max-age=0...) */
    UM_FWD_STALE,     /* stored but stale: revalidated */
    UM_FWD_PARTIAL,   /* stored only partially */
};

struct um_cache_status {
    const char *cache_name; /* token when it is one, else written as an sf-string */
    bool hit;               /* served from the cache; fwd, fwd_status, stored, collapsed unused */
    enum um_cache_fwd fwd;
    int fwd_status; /* status from the next hop; 0: omitted */
    bool stored;
    bool collapsed;
    bool has_ttl;
    int64_t ttl;        /* remaining freshness, negative when stale */
    const char *key;    /* NULL: omitted; written as an sf-string */
    const char *detail; /* NULL: omitted; token or sf-string */
};

#endif
