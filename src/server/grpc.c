/* SPDX-License-Identifier: BSD-2-Clause */
/* gRPC calls (over HTTP/2): which requests are, and the answer a client gets when the call
 * fails before a gRPC server answered it (no server, a timeout, a rate limit). A gRPC
 * client reads its status from grpc-status, not from the HTTP status: an HTML 502 would
 * reach the application as "UNKNOWN: unexpected content-type". So such an answer goes out
 * as a trailers-only gRPC answer (one HEADERS frame that ends the stream), with the status
 * gRPC's own mapping from HTTP statuses gives (doc/http-grpc-status-mapping.md in gRPC's
 * repository), except where Umbra knows better what happened: 504 is its timeout
 * (DEADLINE_EXCEEDED) and 429 its rate limit (RESOURCE_EXHAUSTED). */
#include <stdio.h>
#include <string.h>

#include "exchange.h"
#include "umbra/httpfield.h"

bool um__grpc_request(const struct um_request *req)
{
    const um_str *ct = um_http1_find_header(req, "content-type");
    return (req->flags & UM_REQ_F_HTTP2) && ct && um_grpc_type(*ct) == UM_GRPC;
}

bool um__grpc_error_head(struct um__exchange *x, const struct um_response_head *h,
                         struct um_response_head *out, struct um_header *fields, char *status_buf)
{
    if (h->status == 200) return false;
    int code = um_grpc_status_of_http(h->status);
    int len = snprintf(status_buf, 12, "%d", code);
    /* grpc-message is percent-encoded text; the reason phrases need no escape. */
    const char *msg = um__reason_phrase(h->status);
    fields[0] = (struct um_header){UM_STR("content-type"), UM_STR("application/grpc")};
    fields[1] = (struct um_header){UM_STR("grpc-status"), {status_buf, (size_t)len}};
    fields[2] = (struct um_header){UM_STR("grpc-message"), {msg, strlen(msg)}};
    *out = (struct um_response_head){.status = 200,
                                     .headers = fields,
                                     .num_headers = 3,
                                     .content_length = 0,
                                     .reason = {NULL, 0}};
    x->head_only = true;
    return true;
}
