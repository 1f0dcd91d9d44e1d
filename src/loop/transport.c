/* SPDX-License-Identifier: BSD-2-Clause */
/* The plain transport (transport.h): the socket calls themselves. EINTR is retried here;
 * every other errno is the caller's UM_AGAIN or UM_ERR. */
#include "umbra/transport.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

static ssize_t plain_read(struct um_transport *t, void *buf, size_t len, int *want)
{
    for (;;) {
        ssize_t n = recv(t->fd, buf, len, 0);
        if (n > 0) {
            /* A short read drained the socket: the next arrival raises a new edge. */
            *want = (size_t)n < len ? UM_TRANSPORT_WANT_READ : 0;
            return n;
        }
        if (n == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            *want = UM_TRANSPORT_WANT_READ;
            return UM_AGAIN;
        }
        return UM_ERR;
    }
}

/* The result of a failed write-side call. */
static ssize_t write_failed(int *want)
{
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *want = UM_TRANSPORT_WANT_WRITE;
        return UM_AGAIN;
    }
    return UM_ERR;
}

static ssize_t plain_write(struct um_transport *t, const void *buf, size_t len, unsigned flags,
                           int *want)
{
    int mflags = MSG_NOSIGNAL | ((flags & UM_TRANSPORT_F_MORE) ? MSG_MORE : 0);
    for (;;) {
        ssize_t n = send(t->fd, buf, len, mflags);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return write_failed(want);
    }
}

static ssize_t plain_writev(struct um_transport *t, const struct iovec *iov, int iovcnt,
                            int *want)
{
    for (;;) {
        ssize_t n = writev(t->fd, iov, iovcnt);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return write_failed(want);
    }
}

static ssize_t plain_sendfile(struct um_transport *t, int fd, uint64_t *off, size_t len,
                              int *want)
{
    for (;;) {
        off_t o = (off_t)*off;
        ssize_t n = sendfile(t->fd, fd, &o, len);
        if (n >= 0) {
            *off = (uint64_t)o;
            return n;
        }
        if (errno != EINTR)
            return write_failed(want);
    }
}

static void plain_close(struct um_transport *t)
{
    close(t->fd);
    t->fd = -1;
}

static void plain_close_free(struct um_transport *t)
{
    close(t->fd);
    free(t);
}

static const char *plain_error(struct um_transport *t)
{
    (void)t;
    return "";
}

static const char *plain_server_name(struct um_transport *t)
{
    (void)t;
    return NULL;
}

static const struct um_transport_ops plain_ops = {
    .secure = false,
    .handshake = NULL,
    .read = plain_read,
    .write = plain_write,
    .writev = plain_writev,
    .sendfile = plain_sendfile,
    .shutdown = NULL,
    .close = plain_close,
    .error = plain_error,
    .server_name = plain_server_name,
};

void um_transport_plain_init(struct um_transport *t, int fd)
{
    t->ops = &plain_ops;
    t->fd = fd;
}

static const struct um_transport_ops plain_heap_ops = {
    .secure = false,
    .handshake = NULL,
    .read = plain_read,
    .write = plain_write,
    .writev = plain_writev,
    .sendfile = plain_sendfile,
    .shutdown = NULL,
    .close = plain_close_free,
    .error = plain_error,
    .server_name = plain_server_name,
};

struct um_transport *um_transport_plain_new(int fd)
{
    struct um_transport *t = um_malloc(sizeof(*t));
    t->ops = &plain_heap_ops;
    t->fd = fd;
    return t;
}
