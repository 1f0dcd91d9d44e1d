/* SPDX-License-Identifier: BSD-2-Clause */
/* The CGI origin (src/cgi/): RFC 3875 scripts under a route's cgi directory.
 *
 * Created on the main thread with the runtime (umbra/runtime.h). A fetch spawns the script
 * without a shell, on the worker that calls it; the script's pipes and a pidfd for its exit
 * sit in that worker's loop, so nothing waits for a child. Scripts are bounded in number
 * (config cgi.max_children per route: past it, 503) and in time (cgi.timeout: SIGTERM,
 * then SIGKILL, and 504 when the head had not come yet). Every child is reaped, on the
 * worker that spawned it, even when its client left first. */
#ifndef UMBRA_CGI_H
#define UMBRA_CGI_H

#include "umbra/common.h"
#include "umbra/config.h"
#include "umbra/origin.h"

/* Creates the origin of a cgi route (opens route->cgi). Returns NULL with a message in err
 * when the directory cannot be opened. Destroy through o->ops->destroy, once no fetch of it
 * is running (the runtime's rule). */
/* cgi = { max_children = N, timeout = S }: the limits of every cgi route (a route's
 * cgi = "DIR" is the route's kind, read with the route). The module's settings
 * (umbra/settings.h); its part of a snapshot: um_config_part(c, &um_cgi_settings). */
struct um_cgi_conf {
    int max_children; /* scripts running at once per cgi route; default 64 */
    double timeout;   /* seconds a script may run; default 30 */
    int line;
};
extern const struct um_settings um_cgi_settings;

struct um_origin *um_cgi_origin_create(const struct um_route *route,
                                       const struct um_config *config, char *err,
                                       size_t errlen);

/* What a CGI script's head says (RFC 3875 section 6), parsed by um_cgi_parse_head. */
struct um_cgi_head {
    int status;          /* from Status:, else 302 with a Location, else 200 */
    um_str reason;       /* from Status:, may be empty */
    bool has_status;
    um_str location;     /* empty: none */
    bool has_type;       /* a Content-Type field */
    int64_t content_length; /* -1: none */
    struct um_header headers[64]; /* the fields to send (no Status, no hop-by-hop fields,
                                     no Content-Length) */
    size_t num_headers;
    size_t head_len;     /* bytes of the head, the empty line included */
};

/* Parses the CGI response head at buf[0..len) (lines end in LF or CRLF). Returns UM_OK with
 * *h filled (slices into buf), UM_AGAIN when the empty line has not come yet, UM_ERR when
 * the head is not a CGI response (a bad line, a bad Status, too many fields, neither
 * Content-Type, Location nor Status). */
int um_cgi_parse_head(const char *buf, size_t len, struct um_cgi_head *h);

/* The command-line arguments of a search-string query (RFC 3875 section 4.4): when query
 * has no unencoded '=', its '+'-separated words, percent-decoded, into a NULL-terminated
 * array of at most max strings (each malloc'd, as is the array). Returns NULL when the
 * query gives no arguments (empty, an '=', a bad escape, too many words). Free with
 * um_cgi_free_args. */
char **um_cgi_query_args(um_str query, size_t max);
void um_cgi_free_args(char **args);

#endif
