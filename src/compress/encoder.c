/* SPDX-License-Identifier: BSD-2-Clause */
/* Streaming encoders: one table per library behind struct um_encoder.
 *
 * Each run feeds the whole input and drains the library's output into the caller's
 * buffer, reserving room as it goes, so that one call leaves nothing of its input behind.
 * Windows are kept small where the body is known to be small (zlib's window and hash
 * sized to it, zstd's pledged size, brotli's size hint) and at most 512 KiB otherwise
 * (zlib: 32 KiB), so that a worker with many streams does not hold megabytes per stream. */
#include <stdlib.h>

#include <brotli/encode.h>
#include <zlib.h>
#include <zstd.h>

#include "umbra/compress.h"

#define OUT_STEP 16384

/* What a run does after taking its input: nothing more, end the block so that a decoder
 * can give every byte so far (the stream goes on), or end the stream. */
enum run_op { OP_PROCESS, OP_FLUSH, OP_FINISH };

struct um_encoder {
    enum um_coding coding;
    bool done;
    union {
        z_stream z;
        BrotliEncoderState *br;
        ZSTD_CCtx *zs;
    } u;
};

/* The bits of a window that holds size bytes, within [lo, hi] (hi for an unknown size). */
static int window_bits(int64_t size, int lo, int hi)
{
    if (size < 0)
        return hi;
    int b = lo;
    while (b < hi && ((int64_t)1 << b) < size)
        b++;
    return b;
}

struct um_encoder *um_encoder_create(enum um_coding c, int level, int64_t size_hint)
{
    struct um_encoder *e = um_calloc(1, sizeof(*e));
    e->coding = c;
    switch (c) {
    case UM_CODING_GZIP: {
        /* A window no larger than the body, and a hash table to match (as nginx sizes
         * them): a small response does not pay for zlib's 256 KiB of state. + 16: a gzip
         * wrapper (which takes no window below 9 bits). */
        int wbits = window_bits(size_hint, 9, 15);
        int mem = wbits - 7 < 1 ? 1 : wbits - 7;
        if (deflateInit2(&e->u.z, level, Z_DEFLATED, wbits + 16, mem, Z_DEFAULT_STRATEGY) != Z_OK)
            goto fail;
        return e;
    }
    case UM_CODING_BR:
        e->u.br = BrotliEncoderCreateInstance(NULL, NULL, NULL);
        if (e->u.br == NULL)
            goto fail;
        BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_QUALITY, (uint32_t)level);
        /* At most 512 KiB of window per stream (a worker may run many at once). */
        BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_LGWIN,
                                  (uint32_t)window_bits(size_hint, 16, 19));
        BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_MODE, BROTLI_MODE_TEXT);
        if (size_hint > 0) {
            uint32_t hint = size_hint > (1 << 30) ? (1u << 30) : (uint32_t)size_hint;
            BrotliEncoderSetParameter(e->u.br, BROTLI_PARAM_SIZE_HINT, hint);
        }
        return e;
    case UM_CODING_ZSTD:
        e->u.zs = ZSTD_createCCtx();
        if (e->u.zs == NULL)
            goto fail;
        ZSTD_CCtx_setParameter(e->u.zs, ZSTD_c_compressionLevel, level);
        ZSTD_CCtx_setParameter(e->u.zs, ZSTD_c_checksumFlag, 1);
        if (size_hint >= 0)
            ZSTD_CCtx_setPledgedSrcSize(e->u.zs, (unsigned long long)size_hint);
        else
            ZSTD_CCtx_setParameter(e->u.zs, ZSTD_c_windowLog, 19); /* as brotli's */
        return e;
    case UM_CODING_IDENTITY:
        break;
    }
fail:
    free(e);
    return NULL;
}

static int run_gzip(struct um_encoder *e, const char *in, size_t len, enum run_op op,
                    struct um_buf *out)
{
    z_stream *z = &e->u.z;
    z->next_in = (Bytef *)(uintptr_t)in;
    z->avail_in = (uInt)len;
    bool finish = op == OP_FINISH;
    int flush = finish ? Z_FINISH : op == OP_FLUSH ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    for (int guard = 0; guard < 1 << 20; guard++) {
        um_buf_reserve(out, OUT_STEP);
        z->next_out = (Bytef *)out->base + out->len;
        z->avail_out = OUT_STEP;
        int rc = deflate(z, flush);
        um_buf_commit(out, OUT_STEP - z->avail_out);
        if (rc == Z_STREAM_END)
            return UM_OK;
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            return UM_ERR;
        /* Output room left over: the input is taken and, for a flush, all of it is out
         * (zlib's rule for Z_SYNC_FLUSH). */
        if (!finish && z->avail_in == 0 && z->avail_out != 0)
            return UM_OK;
    }
    return UM_ERR;
}

static int run_br(struct um_encoder *e, const char *in, size_t len, enum run_op what,
                  struct um_buf *out)
{
    const uint8_t *next_in = (const uint8_t *)in;
    size_t avail_in = len;
    bool finish = what == OP_FINISH;
    BrotliEncoderOperation op = finish               ? BROTLI_OPERATION_FINISH
                                : what == OP_FLUSH ? BROTLI_OPERATION_FLUSH
                                                   : BROTLI_OPERATION_PROCESS;
    for (int guard = 0; guard < 1 << 20; guard++) {
        um_buf_reserve(out, OUT_STEP);
        uint8_t *next_out = (uint8_t *)out->base + out->len;
        size_t avail_out = OUT_STEP;
        if (!BrotliEncoderCompressStream(e->u.br, op, &avail_in, &next_in, &avail_out, &next_out,
                                         NULL))
            return UM_ERR;
        um_buf_commit(out, OUT_STEP - avail_out);
        /* A flush is done on the same terms as a process (the library's rule). */
        if (finish ? BrotliEncoderIsFinished(e->u.br)
                   : avail_in == 0 && !BrotliEncoderHasMoreOutput(e->u.br))
            return UM_OK;
    }
    return UM_ERR;
}

static int run_zstd(struct um_encoder *e, const char *in, size_t len, enum run_op what,
                    struct um_buf *out)
{
    ZSTD_inBuffer ib = {in, len, 0};
    ZSTD_EndDirective op = what == OP_FINISH  ? ZSTD_e_end
                           : what == OP_FLUSH ? ZSTD_e_flush
                                              : ZSTD_e_continue;
    for (int guard = 0; guard < 1 << 20; guard++) {
        um_buf_reserve(out, OUT_STEP);
        ZSTD_outBuffer ob = {out->base + out->len, OUT_STEP, 0};
        size_t left = ZSTD_compressStream2(e->u.zs, &ob, &ib, op);
        if (ZSTD_isError(left))
            return UM_ERR;
        um_buf_commit(out, ob.pos);
        /* e_end and e_flush return what is still to be written out. */
        if (op != ZSTD_e_continue ? left == 0 : ib.pos == ib.size)
            return UM_OK;
    }
    return UM_ERR;
}

static int run(struct um_encoder *e, const char *in, size_t len, enum run_op op,
               struct um_buf *out)
{
    if (e->done)
        return len == 0 && op != OP_FLUSH ? UM_OK : UM_ERR;
    int rc = UM_ERR;
    switch (e->coding) {
    case UM_CODING_GZIP: rc = run_gzip(e, in, len, op, out); break;
    case UM_CODING_BR: rc = run_br(e, in, len, op, out); break;
    case UM_CODING_ZSTD: rc = run_zstd(e, in, len, op, out); break;
    case UM_CODING_IDENTITY: break;
    }
    if (op == OP_FINISH || rc != UM_OK)
        e->done = true;
    return rc;
}

int um_encoder_run(struct um_encoder *e, const char *in, size_t len, bool finish,
                   struct um_buf *out)
{
    return run(e, in, len, finish ? OP_FINISH : OP_PROCESS, out);
}

int um_encoder_flush(struct um_encoder *e, struct um_buf *out)
{
    return run(e, NULL, 0, OP_FLUSH, out);
}

void um_encoder_destroy(struct um_encoder *e)
{
    if (e == NULL)
        return;
    switch (e->coding) {
    case UM_CODING_GZIP: deflateEnd(&e->u.z); break;
    case UM_CODING_BR: BrotliEncoderDestroyInstance(e->u.br); break;
    case UM_CODING_ZSTD: ZSTD_freeCCtx(e->u.zs); break;
    case UM_CODING_IDENTITY: break;
    }
    free(e);
}
