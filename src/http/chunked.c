/* SPDX-License-Identifier: BSD-2-Clause */
/* Chunked transfer-coding decoder (RFC 9112 7.1).
 *
 * A byte-at-a-time state machine for the framing (size lines, extensions,
 * trailers), which are short, and one memmove per run of chunk data. Every
 * state is a place where input may end, so the result does not depend on how
 * the input is split. Chunk extensions and trailer fields are validated against
 * the grammar and dropped: lenient chunk parsing is a known request smuggling
 * vector (a bare LF or odd byte in an extension read one way here and another
 * way by the origin). */
#include "umbra/http1.h"

#include <string.h>

#include "umbra/httpfield.h"
#include "umbra/ascii.h"

#define MAX_SIZE_DIGITS 16      /* 64 bits of hex: no overflow possible */
#define MAX_SIZE_LINE 4096      /* chunk-size, extensions and CRLF */
#define MAX_TRAILER (16 * 1024) /* trailer section including the final CRLF */


#define IS(c, k) (um_http_cls[(uint8_t)(c)] & (k))

/* chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 * chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ), ext-val =
 * token / quoted The size line states come first and the trailer states last,
 * so that one comparison tells which byte budget a framing byte counts against.
 */
enum {
    S_SIZE,          /* hex digits */
    S_EXT_WS,        /* BWS that must be followed by ';' */
    S_EXT_PRE_NAME,  /* after ';' */
    S_EXT_NAME,      /* in an extension name */
    S_EXT_POST_NAME, /* BWS after a name: '=' or ';' follows */
    S_EXT_PRE_VAL,   /* after '=' */
    S_EXT_TVAL,      /* in a token value */
    S_EXT_QVAL,      /* in a quoted-string value */
    S_EXT_QPAIR,     /* after a backslash in a quoted-string */
    S_EXT_QEND,      /* after the closing quote */
    S_SIZE_LF,       /* after the CR of the size line */
    S_DATA,
    S_DATA_CR,
    S_DATA_LF,
    S_TRAILER_START, /* start of a trailer field line, or of the final CRLF */
    S_TRAILER_NAME,
    S_TRAILER_VALUE,
    S_TRAILER_LF,
    S_FINAL_LF,
    S_DONE,
    S_ERROR,
};

static bool is_ws(uint8_t c)
{
    return c == ' ' || c == '\t';
}

void um_chunked_init(struct um_chunked *d)
{
    d->_state = S_SIZE;
    d->_remaining = 0;
    d->_count = 0;
    d->trailers = NULL;
    d->trailers_cap = d->trailers_len = 0;
    d->trailers_cut = false;
}

size_t um_chunked_trailer_fields(const char *buf, size_t len, struct um_header *out, size_t max)
{
    size_t n = 0, p = 0;
    while (p < len && n < max) {
        const char *line = buf + p;
        const char *end = memchr(line, '\n', len - p);
        if (end == NULL) break;
        p = (size_t)(end - buf) + 1;
        const char *colon = memchr(line, ':', (size_t)(end - line));
        if (colon == NULL) continue;
        const char *v = colon + 1, *ve = end; /* the decoder checked the grammar */
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        out[n].name = (um_str){line, (size_t)(colon - line)};
        out[n].value = (um_str){v, (size_t)(ve - v)};
        n++;
    }
    return n;
}

/* Ends the extensions of a size line: CR, ';' or BWS (which must lead to ';').
 * Returns the next state, or S_ERROR. */
static int after_ext_item(uint8_t c)
{
    if (c == '\r') return S_SIZE_LF;
    if (c == ';') return S_EXT_PRE_NAME;
    if (is_ws(c)) return S_EXT_WS;
    return S_ERROR;
}

/* Advances the framing state machine by one byte (any state but S_DATA, S_DONE,
 * S_ERROR). Returns the next state. */
static int step(struct um_chunked *d, uint8_t c)
{
    int s = d->_state;
    int h;

    if (s <= S_SIZE_LF) {
        if (++d->_count > MAX_SIZE_LINE) return S_ERROR;
    } else if (s >= S_TRAILER_START) {
        if (++d->_count > MAX_TRAILER) return S_ERROR;
    }

    switch (s) {
    case S_SIZE:
        if ((h = um_hexval(c)) >= 0) {
            if (d->_count > MAX_SIZE_DIGITS) return S_ERROR;
            d->_remaining = d->_remaining << 4 | (uint64_t)h;
            return S_SIZE;
        }
        if (d->_count == 1) /* no digits */
            return S_ERROR;
        return after_ext_item(c);
    case S_EXT_WS:
        if (is_ws(c)) return S_EXT_WS;
        return c == ';' ? S_EXT_PRE_NAME : S_ERROR;
    case S_EXT_PRE_NAME:
        if (is_ws(c)) return S_EXT_PRE_NAME;
        return IS(c, UM_HTTP_C_TCHAR) ? S_EXT_NAME : S_ERROR;
    case S_EXT_NAME:
        if (IS(c, UM_HTTP_C_TCHAR)) return S_EXT_NAME;
        if (c == '=') return S_EXT_PRE_VAL;
        if (is_ws(c)) return S_EXT_POST_NAME;
        return after_ext_item(c);
    case S_EXT_POST_NAME:
        if (is_ws(c)) return S_EXT_POST_NAME;
        if (c == '=') return S_EXT_PRE_VAL;
        return c == ';' ? S_EXT_PRE_NAME : S_ERROR;
    case S_EXT_PRE_VAL:
        if (is_ws(c)) return S_EXT_PRE_VAL;
        if (c == '"') return S_EXT_QVAL;
        return IS(c, UM_HTTP_C_TCHAR) ? S_EXT_TVAL : S_ERROR;
    case S_EXT_TVAL:
        if (IS(c, UM_HTTP_C_TCHAR)) return S_EXT_TVAL;
        return after_ext_item(c);
    case S_EXT_QVAL:
        if (c == '"') return S_EXT_QEND;
        if (c == '\\') return S_EXT_QPAIR;
        return IS(c, UM_HTTP_C_QDTEXT) ? S_EXT_QVAL : S_ERROR;
    case S_EXT_QPAIR:
        return IS(c, UM_HTTP_C_VALUE) ? S_EXT_QVAL : S_ERROR;
    case S_EXT_QEND:
        return after_ext_item(c);
    case S_SIZE_LF:
        if (c != '\n') return S_ERROR;
        d->_count = 0;
        return d->_remaining == 0 ? S_TRAILER_START : S_DATA;
    case S_DATA_CR:
        return c == '\r' ? S_DATA_LF : S_ERROR;
    case S_DATA_LF:
        if (c != '\n') return S_ERROR;
        d->_count = 0;
        return S_SIZE;
    case S_TRAILER_START:
        if (c == '\r') return S_FINAL_LF;
        /* SP or HTAB here would be obs-fold; ':' an empty name. */
        return IS(c, UM_HTTP_C_TCHAR) ? S_TRAILER_NAME : S_ERROR;
    case S_TRAILER_NAME:
        if (IS(c, UM_HTTP_C_TCHAR)) return S_TRAILER_NAME;
        return c == ':' ? S_TRAILER_VALUE : S_ERROR;
    case S_TRAILER_VALUE:
        if (IS(c, UM_HTTP_C_VALUE)) return S_TRAILER_VALUE;
        return c == '\r' ? S_TRAILER_LF : S_ERROR;
    case S_TRAILER_LF:
        return c == '\n' ? S_TRAILER_START : S_ERROR;
    case S_FINAL_LF:
        return c == '\n' ? S_DONE : S_ERROR;
    }
    return S_ERROR;
}

int um_chunked_decode(struct um_chunked *d, char *buf, size_t len, size_t *consumed,
                      size_t *out_len)
{
    size_t r = 0, w = 0;
    int ret = UM_AGAIN;

    while (d->_state != S_DONE && d->_state != S_ERROR && r < len) {
        if (d->_state == S_DATA) {
            size_t n = len - r;
            if (n > d->_remaining) n = (size_t)d->_remaining;
            if (w != r) memmove(buf + w, buf + r, n);
            w += n;
            r += n;
            d->_remaining -= n;
            if (d->_remaining == 0) d->_state = S_DATA_CR;
            continue;
        }
        int s = d->_state;
        uint8_t c = (uint8_t)buf[r++];
        d->_state = step(d, c);
        if (d->trailers && s >= S_TRAILER_START && s <= S_TRAILER_LF && d->_state != S_FINAL_LF &&
            d->_state != S_ERROR) {
            if (d->trailers_len < d->trailers_cap)
                d->trailers[d->trailers_len++] = (char)c;
            else
                d->trailers_cut = true;
        }
    }
    if (d->_state == S_DONE)
        ret = UM_DONE;
    else if (d->_state == S_ERROR)
        ret = UM_ERR;
    *consumed = r;
    *out_len = w;
    return ret;
}
