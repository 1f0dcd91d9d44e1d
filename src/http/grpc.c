/* SPDX-License-Identifier: BSD-2-Clause */
/* gRPC's terms for the layers that carry its calls (the server, the upstream, gRPC-Web):
 * which content types are gRPC's, and which status stands for an HTTP answer that is not. */
#include <string.h>
#include <strings.h>

#include "umbra/httpfield.h"

int um_grpc_type(um_str ct)
{
    static const char base[] = "application/grpc";
    size_t n = sizeof(base) - 1;
    if (ct.len < n || strncasecmp(ct.base, base, n) != 0) return UM_GRPC_NONE;
    int kind = UM_GRPC;
    if (ct.len >= n + 9 && strncasecmp(ct.base + n, "-web-text", 9) == 0) {
        kind = UM_GRPC_WEB_TEXT;
        n += 9;
    } else if (ct.len >= n + 4 && strncasecmp(ct.base + n, "-web", 4) == 0) {
        kind = UM_GRPC_WEB;
        n += 4;
    }
    /* application/grpc, application/grpc+proto, application/grpc; charset=... */
    return ct.len == n || ct.base[n] == '+' || ct.base[n] == ';' ? kind : UM_GRPC_NONE;
}

int um_grpc_status_of_http(int status)
{
    /* gRPC's own mapping (doc/http-grpc-status-mapping.md in its repository), but where
     * Umbra knows what happened: 504 is its timeout, 429 and 413 its limits. */
    switch (status) {
    case 400:
        return 13; /* INTERNAL */
    case 401:
        return 16; /* UNAUTHENTICATED */
    case 403:
        return 7; /* PERMISSION_DENIED */
    case 404:
        return 12; /* UNIMPLEMENTED */
    case 413:
        return 8; /* RESOURCE_EXHAUSTED: a message over the body limit */
    case 429:
        return 8; /* RESOURCE_EXHAUSTED: a rate limit */
    case 502:
        return 14; /* UNAVAILABLE */
    case 503:
        return 14;
    case 504:
        return 4; /* DEADLINE_EXCEEDED */
    default:
        return 2; /* UNKNOWN */
    }
}
