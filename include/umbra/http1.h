/* SPDX-License-Identifier: BSD-2-Clause */
/* HTTP/1.1 request and response head parsing (RFC 9112), strict, into slices of the
 * caller's buffer, and the chunked decoder.
 *
 * Nothing here allocates. A parsed head's slices point into the buffer that was parsed
 * and live as long as those bytes stay where they are (one exception: the path of an
 * absolute-form target without one is a static "/"). The http floor (src/http/): pure
 * functions over the caller's state, safe from any thread. */
#ifndef UMBRA_HTTP1_H
#define UMBRA_HTTP1_H

#include "umbra/common.h"

#define UM_HTTP1_MAX_HEADERS 100

struct um_header {
    um_str name;
    um_str value; /* leading and trailing whitespace removed */
};

enum um_method {
    UM_METHOD_OTHER = 0, /* any other valid token */
    UM_METHOD_GET,
    UM_METHOD_HEAD,
    UM_METHOD_POST,
    UM_METHOD_PUT,
    UM_METHOD_DELETE,
    UM_METHOD_OPTIONS,
    UM_METHOD_TRACE,
    UM_METHOD_CONNECT,
    UM_METHOD_PATCH,
};

#define UM_REQ_F_KEEPALIVE 0x01       /* connection persists after this request */
#define UM_REQ_F_CHUNKED 0x02         /* body uses Transfer-Encoding: chunked */
#define UM_REQ_F_CONTENT_LENGTH 0x04  /* body length given by Content-Length */
#define UM_REQ_F_EXPECT_CONTINUE 0x08 /* Expect: 100-continue */
#define UM_REQ_F_ABSOLUTE_FORM 0x10   /* request-target was absolute-form */
#define UM_REQ_F_HAS_QUERY 0x20       /* target had a '?' (query may still be empty) */
#define UM_REQ_F_HTTP2 0x40           /* the request came over HTTP/2 (minor_version is 1
                                         then, for HTTP/1.1 semantics) */
#define UM_REQ_F_UPGRADE 0x80         /* HTTP/1.1 with an Upgrade field and the "upgrade"
                                         option in Connection (RFC 9110 7.8): the client
                                         asks to switch protocols */

struct um_request {
    um_str method;
    enum um_method method_id;
    um_str target;    /* request-target as sent */
    um_str path;      /* path part, still percent-encoded; "*" for asterisk-form */
    um_str query;     /* after '?', without it */
    um_str authority; /* Host header value, or the authority of an absolute-form target */
    int minor_version; /* HTTP/1.<minor>: 0 or 1 */
    struct um_header headers[UM_HTTP1_MAX_HEADERS];
    size_t num_headers;
    size_t head_len;         /* bytes of request line + headers + the empty line */
    uint64_t content_length; /* valid with UM_REQ_F_CONTENT_LENGTH */
    unsigned flags;
};

/* Resumable state: keep it for one request; reset with um_http1_parser_init. */
struct um_http1_parser {
    size_t _scanned; /* bytes already known not to complete the head */
};

void um_http1_parser_init(struct um_http1_parser *p);

/* Parses a request head from buf[0..len). May be called again with more bytes appended
 * (same buffer start): bytes already scanned are not scanned again.
 *
 * Limits: a request line longer than max_line bytes -> 414; a head longer than max_head
 * bytes, or more than UM_HTTP1_MAX_HEADERS fields -> 431.
 *
 * Returns UM_OK when a complete head was parsed into *req (req->head_len says where the
 * body begins); UM_AGAIN when more bytes are needed; UM_ERR when the request must be
 * refused, with *status set to the response status (400, 414, 431, 501, 505). After UM_ERR
 * the connection must be closed after the error response. */
int um_http1_parse_request(struct um_http1_parser *p, const char *buf, size_t len,
                           size_t max_line, size_t max_head, struct um_request *req,
                           int *status);

/* The method a token names (case-sensitive); UM_METHOD_OTHER for any other token. */
enum um_method um_http1_method_id(const char *m, size_t n);

/* Returns the value of the first header named name (case-insensitive), or NULL. */
const um_str *um_http1_find_header(const struct um_request *req, const char *name);

/* Copies *src into *dst but for the unused entries of its field array (most of its size):
 * dst->headers[num_headers..] are left as they were. The slices still point where src's
 * do. */
void um_http1_request_copy(struct um_request *dst, const struct um_request *src);

/* ---------------------------------------------------------------- responses */

#define UM_HTTP1_MAX_RESPONSE_FIELDS 128

#define UM_RESP_F_CONTENT_LENGTH 0x01 /* content_length is set (every Content-Length agreed) */
#define UM_RESP_F_TE 0x02             /* a Transfer-Encoding field */
#define UM_RESP_F_CHUNKED 0x04        /* ...and the last one's final coding is chunked */
#define UM_RESP_F_CLOSE 0x08          /* the server closes the connection after the answer:
                                         Connection: close, or HTTP/1.0 without keep-alive */

/* A response head: status line and fields as sent, and the facts about its framing. What
 * the framing means (a HEAD request, 204 and 304 have no body; Transfer-Encoding beats
 * Content-Length) is the caller's to apply, as it knows the request. */
struct um_http1_response {
    int minor_version; /* HTTP/1.<minor> */
    int status;        /* 100..599; 1xx is an interim answer, the final head follows */
    um_str reason;     /* may be empty */
    struct um_header headers[UM_HTTP1_MAX_RESPONSE_FIELDS];
    size_t num_headers;
    size_t head_len;         /* bytes of status line + fields + the empty line */
    uint64_t content_length; /* valid with UM_RESP_F_CONTENT_LENGTH */
    unsigned flags;          /* UM_RESP_F_* */
};

/* Resumable state: keep it for one head; reset with um_http1_resp_parser_init. */
struct um_http1_resp_parser {
    size_t _scanned; /* bytes already known not to complete the head */
};

enum um_http1_resp_err {
    UM_HTTP1_RESP_MALFORMED = 1,
    UM_HTTP1_RESP_TOO_LARGE, /* the head is over max_head bytes, or has more than
                                UM_HTTP1_MAX_RESPONSE_FIELDS fields */
};

void um_http1_resp_parser_init(struct um_http1_resp_parser *p);

/* Parses a response head from buf[0..len). May be called again with more bytes appended
 * (same buffer start): bytes already scanned are not scanned again.
 *
 * Strict: "HTTP/1.<digit> <3 digits>[ <reason>]" with a status from 100 to 599; fields
 * "name: value" with a token name, no whitespace before the colon, no obs-fold, values of
 * visible characters, SP, HTAB and obs-text; Content-Length of 1 to 18 digits, repeated
 * only with the same value. Lines end in CRLF or a bare LF (RFC 9112 section 2.2 lets a
 * recipient accept it, and servers that write LF alone exist); a CR anywhere else is an
 * error, as is an empty line before the status line.
 *
 * Returns UM_OK when a complete head was parsed into *resp (resp->head_len says where the
 * body or the next head begins); UM_AGAIN when more bytes are needed; UM_ERR with *err set
 * when the head is malformed or too large. Bytes that cannot begin a status line fail at
 * once. */
int um_http1_parse_response(struct um_http1_resp_parser *p, const char *buf, size_t len,
                            size_t max_head, struct um_http1_response *resp,
                            enum um_http1_resp_err *err);

/* Chunked transfer-coding decoder (RFC 9112 section 7.1), resumable across calls. */
struct um_chunked {
    int _state;
    uint64_t _remaining;
    size_t _count; /* digits of the size line, bytes of an extension or trailer section */
    /* Optional, set by the caller after um_chunked_init (which clears them): where the
     * trailer section's field lines are copied, as they came ("name:value\r\n" each,
     * validated; the final empty line not copied), up to trailers_cap bytes. trailers
     * NULL: dropped. trailers_cut: some did not fit (the caller drops them all). */
    char *trailers;
    size_t trailers_cap, trailers_len;
    bool trailers_cut;
};

void um_chunked_init(struct um_chunked *d);

/* The fields of a trailer section that um_chunked_decode copied (trailers[0..len)): at
 * most max of them into out, their names and values pointing into buf (values without
 * the whitespace around them). Returns how many. */
size_t um_chunked_trailer_fields(const char *buf, size_t len, struct um_header *out, size_t max);

/* Decodes buf[0..len) in place: on return buf[0..*out_len) holds the body bytes decoded
 * by this call and *consumed says how many input bytes were used (*out_len <= *consumed).
 * Returns UM_AGAIN when all input was used and more is needed; UM_DONE when the last
 * chunk and the trailer section have been read (bytes after *consumed belong to the next
 * message); UM_ERR on malformed input (bad or overlong size, missing CRLF, bare LF or CR,
 * trailer section over 16 KiB). */
int um_chunked_decode(struct um_chunked *d, char *buf, size_t len, size_t *consumed,
                      size_t *out_len);

#endif
