/* SPDX-License-Identifier: BSD-2-Clause */
/* Base64 (RFC 4648): the one codec of the tree (src/core/base64.c), for Basic credentials
 * (access), gRPC-Web's -text bodies (grpcweb) and ACME's JWS (base64url, no padding). */
#ifndef UMBRA_BASE64_H
#define UMBRA_BASE64_H

#include <stdbool.h>
#include <stddef.h>

#include "umbra/buf.h"
#include "umbra/common.h"

/* Appends in[0..n) to b: standard base64 with padding (RFC 4648 section 4), or, with url,
 * base64url without padding (section 5; JWS's). */
void um_base64_append(struct um_buf *b, const void *in, size_t n, bool url);

/* Decodes standard base64, its padding optional, into out (cap bytes): false when in is
 * not base64 (a letter outside the alphabet, '=' anywhere but the last two places, a
 * length that cannot be) or decodes to more than cap bytes; else *outlen set. */
bool um_base64_decode(um_str in, char *out, size_t cap, size_t *outlen);

#endif
