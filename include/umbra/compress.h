/* SPDX-License-Identifier: BSD-2-Clause */
/* Compression (src/compress/): choosing a content coding from Accept-Encoding, streaming
 * encoders for gzip (zlib), br (libbrotlienc) and zstd (libzstd), and the origin that
 * compresses another origin's responses on the fly.
 *
 * Umbra only ever compresses: nothing it receives is decompressed (no decompression
 * bombs). The floor sits below cache and static, which negotiate with it: the cache keys
 * a compressed variant by its coding, the static origin picks precompressed files. */
#ifndef UMBRA_COMPRESS_H
#define UMBRA_COMPRESS_H

#include "umbra/buf.h"
#include "umbra/coding.h"
#include "umbra/common.h"
#include "umbra/config.h"
#include "umbra/http1.h"
#include "umbra/origin.h"

#define UM_COMPRESS_MAX_TYPES 32
#define UM_COMPRESS_TYPE_MAX 63

/* compress = { algorithms = {...}, types = {...}, min_size = SIZE, level = { gzip = N, br =
 * N, zstd = N } }, or true (the defaults) or false; globally and per route (a route's table
 * starts from the global settings). Off unless asked for. */
struct um_compress_conf {
    bool enabled;
    unsigned char order[3]; /* enum um_coding, the server's preference first */
    size_t num_algorithms;  /* >= 1 when enabled */
    /* Media types compressed, lower case: "text/" then a star takes every subtype of text. */
    char types[UM_COMPRESS_MAX_TYPES][UM_COMPRESS_TYPE_MAX + 1];
    size_t num_types;
    uint64_t min_size;          /* bodies known to be shorter are sent as they are */
    int level[UM_CODING_COUNT]; /* by coding; [0] unused */
    int line;
};

/* The module's settings (umbra/settings.h): the global compress and a route's. */
extern const struct um_settings um_compress_settings;

/* Route r's compress settings (the global ones unless it has its own). */
static inline const struct um_compress_conf *um_compress_route_conf(const struct um_route *r)
{
    return um_route_part(r, &um_compress_settings);
}

/* "identity", "gzip", "br", "zstd" (static strings). */
const char *um_coding_name(enum um_coding c);

/* The coding to send to a client whose Accept-Encoding fields are among h[0..n) (every
 * line of it, combined), given the codings the server may use: order[0..norder) (enum
 * um_coding), its preference first. The client's q-values decide (q=0 refuses; "*" stands
 * for the codings it does not name); on equal q the server's order does, and a compressed
 * coding is preferred over identity unless identity is named with a higher q. A missing
 * or malformed field gives UM_CODING_IDENTITY, as does a field that refuses everything
 * the server has. Pure; any thread. */
enum um_coding um_compress_negotiate(const struct um_header *h, size_t n,
                                     const unsigned char *order, size_t norder);

/* Whether a response of Content-Type value type (parameters ignored, case-insensitive)
 * is among cc's types ("text/any" form: every text type). */
bool um_compress_type_ok(const struct um_compress_conf *cc, um_str type);

/* A streaming encoder. */
struct um_encoder;

/* A new encoder of coding c (not identity) at level; size_hint: the body's length when
 * known, else -1 (lets the encoders use smaller windows). NULL when the library refuses
 * (out of memory). Destroy with um_encoder_destroy. */
struct um_encoder *um_encoder_create(enum um_coding c, int level, int64_t size_hint);
/* Compresses in[0..len) and, when finish, ends the stream; appends what the encoder
 * emits to out. Returns UM_OK, or UM_ERR when the library failed (the output is then not
 * a valid stream). */
int um_encoder_run(struct um_encoder *e, const char *in, size_t len, bool finish,
                   struct um_buf *out);
/* Ends the current block so that a decoder can give every byte the encoder was given so
 * far (gzip Z_SYNC_FLUSH, brotli BROTLI_OPERATION_FLUSH, zstd ZSTD_e_flush), appending it
 * to out; the stream goes on. Costs a few bytes and some ratio each time: for when the
 * input pauses, not for every run. Returns UM_OK, or UM_ERR as um_encoder_run (and after
 * the stream ended). */
int um_encoder_flush(struct um_encoder *e, struct um_buf *out);
void um_encoder_destroy(struct um_encoder *e);

/* Wraps inner (the caller's reference passes to it) so that the responses of route go
 * out compressed when the client takes a coding of route->compress and the response is
 * worth it (a compressible type, no Content-Encoding, no Cache-Control: no-transform,
 * status 200, not a HEAD or a Range request, not known to be under min_size). Adds Vary:
 * Accept-Encoding to every response of a compressible type, makes a compressed
 * response's ETag weak and sends it without Content-Length (the length is known only at
 * the end). route must outlive the origin. Destroy through ops->destroy. */
struct um_origin *um_compress_origin_create(struct um_origin *inner,
                                            const struct um_route *route);

#endif
