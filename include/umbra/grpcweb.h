/* SPDX-License-Identifier: BSD-2-Clause */
/* gRPC-Web (src/grpcweb/): the layer a route with grpc_web = true puts over its origin.
 * A request with content-type application/grpc-web[+FORMAT] or
 * application/grpc-web-text[+FORMAT] (base64), from an HTTP/1.1 or HTTP/2 client, goes
 * to the inner origin as a gRPC call (application/grpc[+FORMAT], te: trailers, the body
 * decoded from base64 for -text); its answer comes back as gRPC-Web: the messages as they
 * came (base64 for -text), then the trailers as gRPC-Web's trailer frame (flag 0x80,
 * "name:value\r\n" lines). An answer that is not gRPC's (an error: 502, 504, 429...) comes
 * back as a gRPC-Web answer with the matching grpc-status in its head. Other requests pass
 * untouched. Worker threads only, like every origin. */
#ifndef UMBRA_GRPCWEB_H
#define UMBRA_GRPCWEB_H

#include "umbra/origin.h"

/* Takes over the caller's hold on inner (destroyed with the layer). Never NULL. */
struct um_origin *um_grpcweb_origin_create(struct um_origin *inner);

#endif
