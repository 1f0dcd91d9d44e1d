/* SPDX-License-Identifier: BSD-2-Clause */
/* The static origin (src/static/): files under a route's root, never outside it.
 * Created on the main thread with the runtime (umbra/runtime.h); its fetches run on the
 * worker thread that calls them, and never block but on the local disk. */
#ifndef UMBRA_STATIC_H
#define UMBRA_STATIC_H

#include "umbra/common.h"
#include "umbra/config.h"
#include "umbra/origin.h"

/* Creates the origin for a static route (opens its root). Returns NULL with a message in
 * err when the root cannot be opened. Destroy through o->ops->destroy. */
struct um_origin *um_static_origin_create(const struct um_route *route,
                                          const struct um_config *config, char *err,
                                          size_t errlen);

#define UM_PATH_F_DIR 0x1 /* the request path ended in '/' (or was empty) */

/* Percent-decodes and normalises a request path (the part below the route's prefix) into
 * a path relative to the root: no leading '/', no empty or "." segments, segments joined
 * by one '/', no trailing '/'. "" is the root itself.
 * Refuses (returns UM_ERR): ".." segments (also when encoded), NUL, '\\', an encoded '/'
 * ("%2f"), malformed percent escapes, control bytes, results longer than outsz - 1.
 * Returns UM_OK with out NUL-terminated, *outlen set and *flags set. */
int um_path_normalize(um_str raw, char *out, size_t outsz, size_t *outlen, unsigned *flags);

/* openat2 of path below dirfd with flags (O_CLOEXEC added; openat2 refuses other flags
 * beside O_PATH), confined to it:
 * no "..", absolute path or symlink may lead outside (RESOLVE_BENEATH, no magic links).
 * For the origins that serve from a directory (static, cgi). */
int um_static_open_beneath(int dirfd, const char *path, int flags);
/* The status an open's errno gives a client: 404 (missing), 403 (outside, symlink loop,
 * permissions), else 500. */
int um_static_errno_status(int err);

/* MIME type for a file name, by its extension (case-insensitive): overrides first, then
 * the built-in table; "application/octet-stream" when unknown. Returns a string that
 * lives as long as the overrides (built-in ones are static). */
const char *um_mime_type(um_str name, const struct um_mime_type *overrides, size_t n);

#endif
