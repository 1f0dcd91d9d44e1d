/* SPDX-License-Identifier: BSD-2-Clause */
/* The access log and the per-request counters.
 *
 * Every answered request becomes one record, handed over on the worker thread that
 * answered it, with the worker's context: the record is counted in the worker's metrics,
 * and, when the connection's configuration has access_log, formatted (combined or JSON
 * lines) into the worker's buffer (its context's access log slot). A buffer is written
 * when it passes 32 KiB, and at the latest a second after its first line (a loop timer),
 * and when the worker stops. All workers write to one descriptor, whole lines per
 * write(2) with O_APPEND, so lines never interleave.
 *
 * Files: um_access_log_configure opens the configured file (main thread, at start and at
 * each reload); um_access_log_reopen opens it again under the same name (SIGUSR1, after
 * logrotate renamed it). Both put the new file in place with dup2 onto the descriptor the
 * workers write to, so a worker writing at that moment writes whole lines to either the
 * old or the new file, never to a closed or reused descriptor. */
#ifndef UMBRA_ACCESSLOG_H
#define UMBRA_ACCESSLOG_H

#include "umbra/cachestatus.h"
#include "umbra/common.h"
#include "umbra/config.h"

struct um_context;

enum um_access_format { UM_ACCESS_COMBINED, UM_ACCESS_JSON };

/* access_log = { path = "FILE" or "stderr", format = "combined" or "json" }, or false */
struct um_access_log_conf {
    bool enabled;
    char *path; /* absolute; NULL: stderr */
    enum um_access_format format;
    int line;
};

/* The module's settings (umbra/settings.h): the global access_log. */
extern const struct um_settings um_access_log_settings;

/* The access_log settings of snapshot c. */
static inline const struct um_access_log_conf *um_access_log_conf(const struct um_config *c)
{
    return um_config_part(c, &um_access_log_settings);
}

struct um_access_rec {
    const char *client_ip;
    um_str method, target;   /* empty when no request line could be parsed */
    int minor_version;       /* HTTP/1.x; -1 when no request line could be parsed */
    bool http2;              /* ...the request came over HTTP/2 (logged as HTTP/2.0) */
    um_str host, referer, user_agent; /* empty when absent */
    int status;
    uint64_t body_bytes;     /* response body bytes */
    uint64_t bytes_out;      /* response bytes with the head */
    um_str cache_status;     /* the Cache-Status value sent; empty when none */
    /* What the cache did (its key, detail and name are not kept: NULL); NULL when no
     * cache was involved. The metrics count from this. */
    const struct um_cache_status *cache;
    int64_t upstream_ms;     /* request handed over -> response head; -1: no upstream */
    uint64_t duration_ms;    /* first byte of the request -> response complete */
    int route_slot;          /* metrics slot of the route; 0: none */
    /* A tunnel (status 101), logged when it ends: the bytes it passed from the client to
     * the backend and back; duration_ms is then the tunnel's whole life. */
    bool tunnel;
    uint64_t tunnel_up, tunnel_down;
    int worker;
    uint64_t conn_id;
};

/* Opens conf's file (or selects stderr) for the workers; conf may be disabled. Returns
 * false with "FILE:LINE: access_log.path: ..." in err when the file cannot be opened (the
 * previous file stays). Main thread. */
bool um_access_log_configure(const struct um_config *cfg, char *err, size_t errlen);

/* Opens the current file again by name (SIGUSR1). Returns false with a message in err.
 * Main thread. */
bool um_access_log_reopen(char *err, size_t errlen);

/* Counts r in the calling worker's metrics and, when cfg->access_log.enabled, appends its
 * line to the buffer of ctx's worker, on that worker's thread. ctx NULL (a thread that is
 * no worker): the line is written at once. */
void um_access_log_request(struct um_context *ctx, const struct um_config *cfg,
                           const struct um_access_rec *r);

/* Formats r into out (at most n bytes, NUL-terminated when n > 0) as a line with its
 * '\n'; returns the full length (a result >= n means out was too small). now is the time
 * of the line (seconds and milliseconds since the epoch). */
size_t um_access_log_format(char *out, size_t n, enum um_access_format format,
                            const struct um_access_rec *r, int64_t now_sec, int now_ms);

/* Writes the buffer of ctx's worker out now (on that worker's thread). */
void um_access_log_flush(struct um_context *ctx);

#endif
