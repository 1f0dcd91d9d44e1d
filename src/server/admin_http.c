/* SPDX-License-Identifier: BSD-2-Clause */
/* The admin listener's HTTP (admin_http.h): a client's bytes through the strict HTTP/1.1
 * parser, and the one answer it gets before the connection closes. */
#include "admin_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "umbra/buf.h"

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

void um__admin_respond(struct client *cl, int status, const char *type, const char *body,
                       size_t len, bool head_only)
{
    struct um_buf b = {0};
    um_buf_printf(&b,
                  "HTTP/1.1 %d %s\r\nServer: umbra/%s\r\nContent-Type: %s\r\n"
                  "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
                  status, reason(status), UMBRA_VERSION, type, len);
    if (!head_only)
        um_buf_append(&b, body, len);
    cl->outlen = b.len;
    cl->out = um_buf_detach(&b);
    cl->outpos = 0;
}

void um__admin_respond_error(struct client *cl, int status)
{
    char msg[64];
    int n = snprintf(msg, sizeof(msg), "%d %s\n", status, reason(status));
    um__admin_respond(cl, status, "text/plain", msg, (size_t)n, false);
}

/* Whether a Content-Type names JSON: its media type (before any ';') is application/json or
 * a +json suffix type. A body without one is JSON when it opens with '{'. */
bool um__admin_is_json(const struct um_request *req, const char *body, size_t len)
{
    const um_str *ct = um_http1_find_header(req, "content-type");
    if (ct == NULL)
        return len > 0 && body[0] == '{';
    um_str t = *ct;
    for (size_t i = 0; i < t.len; i++)
        if (t.base[i] == ';')
            t.len = i;
    t = um_str_trim(t);
    return um_str_eq_ci(t, "application/json") ||
           (t.len > 5 && um_str_eq_ci((um_str){t.base + t.len - 5, 5}, "+json"));
}

void um__admin_client_close(struct client *cl)
{
    close(cl->fd);
    free(cl->out);
    memset(cl, 0, sizeof(*cl));
    cl->fd = -1;
}

/* Parses what arrived so far; answers once the head (and, for POST /purge, the body)
 * is complete, or at once when the request is refused. */
static bool parse(struct client *cl)
{
    size_t cap = sizeof(cl->in) - 1;
    int status = 0;
    int rc = um_http1_parse_request(&cl->parser, cl->in, cl->inlen, cap, cap, &cl->req, &status);
    if (rc == UM_ERR) {
        um__admin_respond_error(cl, status);
        return false;
    }
    if (rc == UM_AGAIN) {
        if (cl->inlen == cap)
            um__admin_respond_error(cl, 431);
        return false;
    }
    /* A body (POST /purge): wait for all of it; it must fit the buffer. */
    const struct um_request *req = &cl->req;
    if (req->flags & UM_REQ_F_CHUNKED) {
        um__admin_respond_error(cl, 411);
        return false;
    }
    uint64_t want = req->flags & UM_REQ_F_CONTENT_LENGTH ? req->content_length : 0;
    if (want > cap - req->head_len) {
        um__admin_respond_error(cl, 413);
        return false;
    }
    if (cl->inlen < req->head_len + want)
        return false;
    cl->inlen = req->head_len + (size_t)want;
    return true;
}

bool um__admin_read(struct client *cl)
{
    ssize_t n = recv(cl->fd, cl->in + cl->inlen, sizeof(cl->in) - 1 - cl->inlen, 0);
    if (n <= 0) {
        if (!(n < 0 && (errno == EAGAIN || errno == EINTR)))
            um__admin_client_close(cl);
        return false;
    }
    cl->inlen += (size_t)n;
    cl->in[cl->inlen] = '\0';
    return parse(cl);
}

void um__admin_write(struct client *cl)
{
    while (cl->out && cl->outpos < cl->outlen) {
        ssize_t n = send(cl->fd, cl->out + cl->outpos, cl->outlen - cl->outpos, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            um__admin_client_close(cl);
            return;
        }
        cl->outpos += (size_t)n;
    }
    if (cl->out && cl->outpos == cl->outlen) {
        shutdown(cl->fd, SHUT_WR);
        um__admin_client_close(cl);
    }
}
