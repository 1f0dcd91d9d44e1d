/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin listener's clients (admin.c runs them on its thread): each sends one request,
 * read through the strict HTTP/1.1 parser every listener uses, and gets one answer, then
 * the connection closes. admin.c routes the request (/metrics, /status, /status.json,
 * POST /purge). Admin thread only. */
#ifndef UMBRA_SERVER_ADMIN_HTTP_H
#define UMBRA_SERVER_ADMIN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "umbra/http1.h"

struct client {
    int fd;
    uint64_t deadline;
    char in[4096];
    size_t inlen;
    /* The strict HTTP/1.1 parser every listener uses (src/http/): the admin's requests are
     * refused the same way (400, 414, 431, 501, 505). */
    struct um_http1_parser parser;
    struct um_request req;
    char *out;
    size_t outlen, outpos;
};

/* Reads what the client sent (cl->fd readable). Returns true when a whole request (head,
 * and the body Content-Length announced) is in cl->req and cl->in; false when more is
 * needed, when the request was refused (an error answer is in cl->out: the parser's 400,
 * 414, 431, 501 or 505, 411 for a chunked body, 413 for a body larger than cl->in), or when
 * the client went away (cl closed). */
bool um__admin_read(struct client *cl);
/* Sends what is left of cl->out; closes cl once it is all sent or the client is gone. */
void um__admin_write(struct client *cl);
/* Sets cl->out to a whole answer (Connection: close); body is copied, not sent for a HEAD
 * (head_only). */
void um__admin_respond(struct client *cl, int status, const char *type, const char *body,
                       size_t len, bool head_only);
/* A plain-text answer "STATUS REASON". */
void um__admin_respond_error(struct client *cl, int status);
/* Whether the request's body is JSON: Content-Type application/json or a +json type; with
 * no Content-Type, a body that opens with '{'. */
bool um__admin_is_json(const struct um_request *req, const char *body, size_t len);
/* Closes cl's socket, frees its answer and empties it (fd -1). */
void um__admin_client_close(struct client *cl);

#endif
