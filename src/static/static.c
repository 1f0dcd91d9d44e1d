/* SPDX-License-Identifier: BSD-2-Clause */
/* The static origin: files under a route's root.
 *
 * Every open goes through openat2(RESOLVE_BENEATH) relative to the root's descriptor, so
 * neither "..", nor an absolute symlink, nor a symlink pointing outside can escape the
 * root, whatever the path normalisation let through. A small file, once read, is served
 * from the worker's copy while one stat says it is unchanged (filecache.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/compress.h"
#include "umbra/context.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/static.h"

#define MAX_PATH 4096

struct static_origin {
    struct um_origin base;
    uint64_t gen; /* names its entries in the small-file cache */
    int root_fd;
    char *index; /* NULL: no index file */
    const struct um_route *route;
};

static _Atomic uint64_t generations;

static const char *const sibling_ext[UM_CODING_COUNT] = {"", ".gz", ".br", ".zst"};

/* precompressed = true: the sibling of rel (rel_len bytes in rel, which has room for the
 * extension) in the best coding the client takes among those whose sibling exists and is
 * not older than the file (st). Returns its descriptor with *sst and *coding set, or -1. */
static int open_sibling(const struct static_origin *o, const struct um_request *req, char *rel,
                        size_t rel_len, const struct stat *st, struct stat *sst,
                        enum um_coding *coding)
{
    static const unsigned char all[3] = {UM_CODING_ZSTD, UM_CODING_BR, UM_CODING_GZIP};
    const struct um_compress_conf *cc = um_compress_route_conf(o->route);
    unsigned char order[3];
    size_t n = cc->enabled ? cc->num_algorithms : 3;
    memcpy(order, cc->enabled ? cc->order : all, n);
    for (int tries = 0; tries < 3 && n > 0; tries++) {
        enum um_coding c = um_compress_negotiate(req->headers, req->num_headers, order, n);
        if (c == UM_CODING_IDENTITY)
            return -1;
        memcpy(rel + rel_len, sibling_ext[c], strlen(sibling_ext[c]) + 1);
        int fd = um_static_open_beneath(o->root_fd, rel, O_RDONLY | O_NOCTTY);
        rel[rel_len] = '\0';
        if (fd >= 0) {
            if (fstat(fd, sst) == 0 && S_ISREG(sst->st_mode) && sst->st_mtime >= st->st_mtime) {
                *coding = c;
                return fd;
            }
            close(fd);
        }
        /* Not there (or stale): the next best. */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (order[i] != c)
                order[k++] = order[i];
        n = k;
    }
    return -1;
}

int um_static_open_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int um_static_errno_status(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
        return 404;
    case EXDEV: /* would leave the root */
    case ELOOP:
    case EACCES:
    case EPERM:
        return 403;
    default:
        return 500;
    }
}

static void respond(struct um_sink *sink, int status, const struct um_header *headers, size_t n,
                    const char *body)
{
    struct um_response_head h = {.status = status, .headers = headers, .num_headers = n};
    um_sink_answer(sink, &h, body);
}

static void respond_error(struct um_sink *sink, int status)
{
    const char *body = status == 404   ? "404 Not Found\n"
                       : status == 403 ? "403 Forbidden\n"
                       : status == 400 ? "400 Bad Request\n"
                                       : "500 Internal Server Error\n";
    um_sink_answer_text(sink, status, body);
}

static void redirect_to_dir(struct um_fetch *f, struct um_sink *sink)
{
    const struct um_request *req = f->req;
    size_t n = req->path.len + 1 + (req->flags & UM_REQ_F_HAS_QUERY ? req->query.len + 1 : 0);
    char *loc = um_malloc(n + 1);
    memcpy(loc, req->path.base, req->path.len);
    loc[req->path.len] = '/';
    if (req->flags & UM_REQ_F_HAS_QUERY) {
        loc[req->path.len + 1] = '?';
        memcpy(loc + req->path.len + 2, req->query.base, req->query.len);
    }
    struct um_header h[2] = {
        {UM_STR("Location"), {loc, n}},
        {UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")},
    };
    respond(sink, 301, h, 2, "301 Moved Permanently\n");
    free(loc);
}

/* True when the client's validators say its copy is current (RFC 9110 13.2.2). */
static bool not_modified(const struct um_request *req, um_str etag, time_t mtime)
{
    const um_str *inm = um_http1_find_header(req, "If-None-Match");
    if (inm)
        return um_etag_match_weak(*inm, etag);
    const um_str *ims = um_http1_find_header(req, "If-Modified-Since");
    time_t t;
    return ims && um_http_date_parse(*ims, &t) && mtime <= t;
}

/* If-Range (RFC 9110 13.1.5): the range applies only to the representation it names. */
static bool range_applies(const struct um_request *req, um_str etag, time_t mtime)
{
    const um_str *ir = um_http1_find_header(req, "If-Range");
    if (ir == NULL)
        return true;
    if (ir->len > 0 && (ir->base[0] == '"' || ir->base[0] == 'W')) {
        /* One entity-tag only: a list or "*" is not a valid If-Range. */
        if (memchr(ir->base, ',', ir->len))
            return false;
        return um_etag_match_strong(*ir, etag);
    }
    time_t t;
    return um_http_date_parse(*ir, &t) && t == mtime;
}

/* The fields of file's answer into h (room for 4); returns how many. */
static size_t file_fields(const struct um__file *file, struct um_header *h)
{
    h[0] = (struct um_header){UM_STR("Content-Type"), {file->type, strlen(file->type)}};
    h[1] = (struct um_header){UM_STR("Last-Modified"), {file->last_modified, UM_HTTP_DATE_LEN}};
    h[2] = (struct um_header){UM_STR("ETag"), {file->etag, file->etag_len}};
    h[3] = (struct um_header){UM_STR("Accept-Ranges"), UM_STR("bytes")};
    return 4;
}

/* A small file's whole answer from the worker's copy (no Range: those take the file). */
static void serve_copy(const struct um_request *req, const struct um__file *file,
                       struct um_sink *sink)
{
    struct um_header h[4];
    size_t n = file_fields(file, h);
    um_str etag = {file->etag, file->etag_len};
    if (not_modified(req, etag, file->st.st_mtime)) {
        struct um_response_head head = {.status = 304, .headers = h + 1, .num_headers = n - 1,
                                        .content_length = -1};
        sink->ops->on_head(sink, &head);
        sink->ops->on_end(sink, UM_OK);
        return;
    }
    struct um_response_head head = {.status = 200, .headers = h, .num_headers = n,
                                    .content_length = (int64_t)file->st.st_size};
    sink->ops->on_head(sink, &head);
    if (file->st.st_size > 0)
        sink->ops->on_data(sink, file->body, (size_t)file->st.st_size);
    sink->ops->on_end(sink, UM_OK);
}

/* Opens the file rel names below the root, or the directory's index (rel grows by it):
 * its descriptor and its stat, or -1 once the sink has been answered. */
static int open_target(struct static_origin *o, struct um_fetch *f, struct um_sink *sink,
                       bool want_dir, char *rel, size_t *rel_len, struct stat *st)
{
    int fd = um_static_open_beneath(o->root_fd, *rel_len ? rel : ".", O_RDONLY | O_NOCTTY);
    if (fd < 0) {
        respond_error(sink, um_static_errno_status(errno));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        close(fd);
        respond_error(sink, 500);
        return -1;
    }
    if (S_ISDIR(st->st_mode)) {
        if (!want_dir) {
            close(fd);
            redirect_to_dir(f, sink);
            return -1;
        }
        close(fd);
        int ifd = -1, err = ENOENT;
        if (o->index) {
            /* Joined and opened from the root, so an index symlink is held to the root
             * like any other path. */
            size_t ilen = strlen(o->index);
            if (*rel_len + 1 + ilen < MAX_PATH) {
                if (*rel_len)
                    rel[(*rel_len)++] = '/';
                memcpy(rel + *rel_len, o->index, ilen + 1);
                *rel_len += ilen;
                ifd = um_static_open_beneath(o->root_fd, rel, O_RDONLY | O_NOCTTY);
                err = errno;
            }
        }
        if (ifd < 0) {
            respond_error(sink, o->index && err != ENOENT ? um_static_errno_status(err) : 403);
            return -1;
        }
        fd = ifd;
        if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
            close(fd);
            respond_error(sink, 403);
            return -1;
        }
    } else if (!S_ISREG(st->st_mode)) {
        close(fd);
        respond_error(sink, 403);
        return -1;
    } else if (want_dir) {
        close(fd); /* "file.txt/" */
        respond_error(sink, 404);
        return -1;
    }
    return fd;
}

static void static_fetch(struct um_origin *base, struct um_fetch *f, struct um_sink *sink)
{
    struct static_origin *o = (struct static_origin *)base;
    const struct um_request *req = f->req;
    if (req->method_id != UM_METHOD_GET && req->method_id != UM_METHOD_HEAD) {
        struct um_header h[2] = {
            {UM_STR("Allow"), UM_STR("GET, HEAD")},
            {UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")},
        };
        respond(sink, 405, h, 2, "405 Method Not Allowed\n");
        return;
    }
    /* f->path is canonical (dot-segments resolved) but may hold escapes: decode them once,
     * refusing what must never name a file. */
    char rel[MAX_PATH];
    size_t rel_len;
    unsigned flags;
    if (um_path_normalize(f->path, rel, sizeof(rel) - 256, &rel_len, &flags) != UM_OK) {
        respond_error(sink, 400);
        return;
    }
    bool want_dir = req->path.len > 0 && req->path.base[req->path.len - 1] == '/';
    /* The worker's copy: for the whole file, when no precompressed sibling may be served
     * instead. */
    bool copyable = f->ctx != NULL && !o->route->precompressed &&
                    um_http1_find_header(req, "Range") == NULL;
    if (copyable) {
        const struct um__file *file =
            um__static_file_find(f->ctx, o->gen, o->root_fd, want_dir, rel, rel_len);
        if (file) {
            serve_copy(req, file, sink);
            return;
        }
    }
    /* The path asked for, the key of its copy: an index or a sibling is joined after it. */
    size_t key_len = rel_len;
    struct stat st;
    int fd = open_target(o, f, sink, want_dir, rel, &rel_len, &st);
    if (fd < 0)
        return;

    /* A precompressed sibling for the whole file (a Range is of the file's own bytes). */
    enum um_coding coding = UM_CODING_IDENTITY;
    bool vary = o->route->precompressed;
    if (vary && um_http1_find_header(req, "range") == NULL && rel_len + 5 < sizeof(rel)) {
        struct stat sst;
        int sfd = open_sibling(o, req, rel, rel_len, &st, &sst, &coding);
        if (sfd >= 0) {
            close(fd);
            fd = sfd;
            st = sst;
        }
    }

    char etag_buf[48], lm[UM_HTTP_DATE_LEN + 1], cr[80];
    /* A sibling's tag names its coding too, so that no two representations share one. */
    int etag_len = snprintf(etag_buf, sizeof(etag_buf), "\"%llx-%llx%s%s\"",
                            (unsigned long long)st.st_mtime, (unsigned long long)st.st_size,
                            coding != UM_CODING_IDENTITY ? "-" : "",
                            coding != UM_CODING_IDENTITY ? um_coding_name(coding) : "");
    um_str etag = {etag_buf, (size_t)etag_len};
    um_http_date_format(st.st_mtime, lm);
    const char *type = um_mime_type((um_str){rel, rel_len}, f->config->mime, f->config->num_mime);

    if (copyable && coding == UM_CODING_IDENTITY) {
        struct um__file *file = um__static_file_add(f->ctx, o->gen, want_dir, rel, key_len,
                                                    rel_len ? rel : ".", rel_len ? rel_len : 1,
                                                    fd, &st);
        if (file) {
            close(fd);
            file->type = type;
            memcpy(file->etag, etag_buf, (size_t)etag_len);
            file->etag_len = (size_t)etag_len;
            memcpy(file->last_modified, lm, sizeof lm);
            serve_copy(req, file, sink);
            return;
        }
    }

    struct um_header h[8];
    size_t n = 0;
    h[n++] = (struct um_header){UM_STR("Content-Type"), {type, strlen(type)}};
    h[n++] = (struct um_header){UM_STR("Last-Modified"), {lm, UM_HTTP_DATE_LEN}};
    h[n++] = (struct um_header){UM_STR("ETag"), etag};
    if (vary)
        h[n++] = (struct um_header){UM_STR("Vary"), UM_STR("Accept-Encoding")};
    if (coding != UM_CODING_IDENTITY) {
        const char *cn = um_coding_name(coding);
        h[n++] = (struct um_header){UM_STR("Content-Encoding"), {cn, strlen(cn)}};
    } else {
        h[n++] = (struct um_header){UM_STR("Accept-Ranges"), UM_STR("bytes")};
    }

    if (not_modified(req, etag, st.st_mtime)) {
        close(fd);
        struct um_response_head head = {.status = 304, .headers = h + 1, .num_headers = n - 1, .content_length = -1, .reason = {NULL, 0}};
        sink->ops->on_head(sink, &head);
        sink->ops->on_end(sink, UM_OK);
        return;
    }
    uint64_t size = (uint64_t)st.st_size, first = 0, last = size ? size - 1 : 0;
    int status = 200;
    const um_str *range = um_http1_find_header(req, "Range");
    if (range && req->method_id == UM_METHOD_GET && range_applies(req, etag, st.st_mtime)) {
        int r = um_range_parse(*range, size, &first, &last);
        if (r == UM_ERR) {
            close(fd);
            int len = snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
            h[n++] = (struct um_header){UM_STR("Content-Range"), {cr, (size_t)len}};
            h[0] = (struct um_header){UM_STR("Content-Type"), UM_STR("text/plain; charset=utf-8")};
            respond(sink, 416, h, n, "416 Range Not Satisfiable\n");
            return;
        }
        if (r == UM_OK) {
            status = 206;
            int len = snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)first,
                               (unsigned long long)last, (unsigned long long)size);
            h[n++] = (struct um_header){UM_STR("Content-Range"), {cr, (size_t)len}};
        }
    }
    uint64_t len = size ? last - first + 1 : 0;
    struct um_response_head head = {.status = status, .headers = h, .num_headers = n, .content_length = (int64_t)len, .reason = {NULL, 0}};
    sink->ops->on_head(sink, &head);
    if (len > 0)
        sink->ops->on_file(sink, fd, first, len);
    else
        close(fd);
    sink->ops->on_end(sink, UM_OK);
}

static void static_destroy(struct um_origin *base)
{
    struct static_origin *o = (struct static_origin *)base;
    close(o->root_fd);
    free(o->index);
    free(o);
}

static const struct um_origin_ops static_ops = {
    .fetch = static_fetch,
    .destroy = static_destroy,
};

struct um_origin *um_static_origin_create(const struct um_route *route,
                                          const struct um_config *config, char *err,
                                          size_t errlen)
{
    (void)config;
    int fd = open(route->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "route %s: cannot open root %s: %s", route->path, route->root,
                 strerror(errno));
        return NULL;
    }
    struct static_origin *o = um_calloc(1, sizeof(*o));
    o->base.ops = &static_ops;
    o->gen = atomic_fetch_add(&generations, 1) + 1;
    o->root_fd = fd;
    o->index = route->index ? um_strndup(route->index, strlen(route->index)) : NULL;
    o->route = route;
    return &o->base;
}
