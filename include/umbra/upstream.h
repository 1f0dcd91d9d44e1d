/* SPDX-License-Identifier: BSD-2-Clause */
/* The upstream origin: a reverse proxy to HTTP/HTTPS servers, driven from each worker's
 * epoll loop: Umbra's own HTTP/1.1 client for http:// servers at an IP address, libcurl's
 * multi interface (one CURLM per worker) for the others (src/upstream/internal.h).
 * Created on the main thread with the runtime; fetches run on the worker thread that
 * calls them, whose context keeps the per-worker pools; the servers' health counters are
 * shared (atomics). */
#ifndef UMBRA_UPSTREAM_H
#define UMBRA_UPSTREAM_H

#include "umbra/config.h"
#include "umbra/origin.h"

/* Call once from the main thread before any worker starts, and at exit. */
void um_upstream_global_init(void);
void um_upstream_global_cleanup(void);

/* Creates the origin for one upstream of config. Several routes may share it: each
 * um_upstream_origin_ref takes a reference, and ops->destroy drops one. conf must outlive
 * the origin (it lives in the same config snapshot). */
struct um_origin *um_upstream_origin_create(const struct um_upstream_conf *conf);
struct um_origin *um_upstream_origin_ref(struct um_origin *o);

/* libcurl's version as loaded, with the libraries it uses ("libcurl/7.88.1 OpenSSL/3.0.x
 * zlib/1.2.13 ... nghttp2/1.52.0"): static text. */
const char *um_upstream_library_version(void);

#endif
