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

struct um_module;
struct um_route;
struct um_settings;

/* The module (src/grpcweb/settings.c): grpc_web = true turns the layer on for every route,
 * a route's grpc_web = true or false over that. */
struct um_grpcweb_conf {
    bool enabled;
};
extern const struct um_settings um_grpcweb_settings;
extern const struct um_module um_grpcweb_module;

/* Route r's setting (the global one unless it has its own). */
bool um_grpcweb_enabled(const struct um_route *r);

/* Takes over the caller's hold on inner (destroyed with the layer). Never NULL. */
struct um_origin *um_grpcweb_origin_create(struct um_origin *inner);

#endif
