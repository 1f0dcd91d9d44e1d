/* SPDX-License-Identifier: BSD-2-Clause */
/* The configuration snapshot, loaded from config.lua.
 *
 * A snapshot is plain data, immutable once loaded and reference-counted: a reload loads a
 * new one. What the server builds from it at run time (origins, the workers' Lua states)
 * is not here but in the runtime that holds it (umbra/runtime.h). */
#ifndef UMBRA_CONFIG_H
#define UMBRA_CONFIG_H

#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "umbra/common.h"
#include "umbra/settings.h"

struct um_listen {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *text; /* as written in the config, e.g. "127.0.0.1:8080" */
    bool tls;   /* { "HOST:PORT", tls = true }: TLS with the certificates of um_config.tls */
    bool no_http2; /* { "HOST:PORT", http2 = false }: HTTP/1.1 only (no ALPN h2, no prior
                      knowledge) */
    /* proxy_protocol = true: every connection starts with a PROXY protocol header (v1 or
     * v2), whose source address is the client's; proxy_from: the peers allowed to send one
     * (NULL: any), others are closed at once. */
    bool proxy_protocol;
    struct um_netmask *proxy_from;
    size_t num_proxy_from;
};

enum um_balance { UM_BALANCE_ROUND_ROBIN, UM_BALANCE_LEAST_CONN, UM_BALANCE_HASH };

struct um_upstream_server {
    char *url;  /* "http://host:port" or "https://host:port", no path, no trailing '/' */
    bool https;
    struct sockaddr_storage addr; /* the address when host is an IP address */
    socklen_t addrlen;            /* 0: host is a name */
};

/* upstreams = { NAME = { servers = {...}, ... } } */
struct um_upstream_conf {
    char *name;
    struct um_upstream_server *servers;
    size_t num_servers;         /* >= 1 */
    enum um_balance balance;    /* "round_robin" (default), "least_conn", "hash" */
    double connect_timeout;     /* seconds, default 2 */
    double timeout;             /* seconds to the first byte of the response, default 30 */
    int retries;                /* idempotent requests, on another server; default 1 */
    char *host;                 /* NULL: pass the client's Host; else send this Host */
    bool tls_verify;            /* tls.verify, default true */
    char *tls_ca;               /* tls.ca: CA file (absolute after loading); NULL: system */
    int max_fails;              /* failures in a row that take a server out; default 3 */
    double fail_timeout;        /* seconds a failed server is skipped; default 10 */
    bool curl_only;             /* client = "curl": libcurl for every server; "auto"
                                   (default): Umbra's own HTTP/1.1 client for http://
                                   servers at an IP address, libcurl for the others */
    bool h2;                    /* protocol = "h2": HTTP/2 with prior knowledge to the
                                   servers (Umbra's own client, src/upstream/h2.c); "h1"
                                   (default): HTTP/1.1 */
    int send_proxy;             /* send_proxy = "v1" / "v2": a PROXY protocol header of that
                                   version opens each connection to a server; 0: none */
    /* health = { path, interval, timeout, fails, passes, status }: active health checks,
     * GET health_path on every server each health_interval seconds from one thread of the
     * process (src/upstream/health.c); health_path NULL: none. */
    char *health_path;      /* "/..." (may carry a query) */
    double health_interval; /* seconds between probes, default 2 */
    double health_timeout;  /* seconds a probe may take, default 1 */
    int health_fails;       /* failed probes in a row that take a server out; default 3 */
    int health_passes;      /* passed probes in a row that bring it back; default 2 */
    int health_status_lo, health_status_hi; /* the statuses that pass, default 200-399 */
    int line;                   /* line of the upstream in the config file */
};

struct um_route {
    char *host; /* NULL: any host; else matched case-insensitively against Host (no port) */
    char *path; /* prefix of the request path, e.g. "/static/" */
    char *root; /* static root directory, absolute after loading; NULL for an upstream */
    int upstream; /* index into um_config.upstreams; -1 for a static route */
    bool cache;   /* through the shared cache: default true for upstream routes, and only
                     allowed on them */
    char *index; /* index file for directories; NULL: none ("index.html" by default) */
    int line; /* line of the route in the config file, for messages */
    /* redirect_https = true: a request that came without TLS is answered with a redirect
     * to https (at least one listener has tls = true). */
    bool redirect_https;
    char *name;       /* name = "api": what an on_request hook sets req.route to; or NULL */
    bool on_request;  /* the route has its own on_request / on_response function */
    bool on_response;
    char *cgi; /* cgi = "DIR": CGI scripts under this directory (absolute after loading);
                  NULL for other routes */
    /* The modules' parts for this route (umbra/settings.h: um_route_part). */
    void *parts[UM_SETTINGS_MAX];
    /* precompressed = true (static routes): FILE.zst, FILE.br, FILE.gz are sent for FILE
     * to clients that take them, when they are not older than FILE. */
    bool precompressed;
};

struct um_mime_type {
    char *ext;  /* without the dot, lower case */
    char *type; /* e.g. "application/wasm" */
};

/* An address or network allowed to do something (cache.purge.allow). */
struct um_netmask {
    int family;            /* AF_INET or AF_INET6 */
    unsigned char addr[16]; /* network byte order; IPv4 in the first 4 bytes */
    int prefix;            /* bits that must match: 32/128 for a single address */
};

/* admin = { listen = "127.0.0.1:9145", allow = { "127.0.0.1", ... } } */
struct um_admin_conf {
    bool enabled;
    struct um_listen listen;
    struct um_netmask *allow; /* default 127.0.0.1 and ::1; others get 403 */
    size_t num_allow;
    int line;
};

struct um_config {
    char *file; /* path of the config file as given */
    /* The modules' parts, in the order of their list (umbra/settings.h: um_config_part). */
    void *parts[UM_SETTINGS_MAX];
    struct um_listen *listen;
    size_t num_listen;
    int workers; /* >= 1 */
    struct um_route *routes;
    size_t num_routes;
    struct um_upstream_conf *upstreams;
    size_t num_upstreams;
    struct um_mime_type *mime; /* overrides of the built-in table, searched first */
    size_t num_mime;
    struct {
        size_t max_connections;  /* over it, the listener stops accepting */
        size_t max_request_line; /* 414 past it */
        size_t max_header_bytes; /* 431 past it */
        uint64_t max_body_bytes; /* 413 past it */
        size_t lua_memory;       /* bytes each request state may hold (umbra/luavm.h) */
    } limits;
    struct {
        double header;   /* seconds to receive a complete head */
        double idle;     /* seconds a keep-alive connection may wait for its next request */
        double send;     /* seconds a send may make no progress */
        double shutdown; /* seconds SIGTERM waits for requests in flight */
        double tunnel;   /* seconds an upgraded connection (tunnel) may stay silent */
    } timeouts;
    /* http2 = { max_concurrent_streams = N, initial_window = SIZE, max_header_list = SIZE } */
    struct {
        uint32_t max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS */
        uint32_t initial_window;         /* SETTINGS_INITIAL_WINDOW_SIZE: request body
                                            bytes a stream may buffer */
        uint32_t max_header_list;        /* SETTINGS_MAX_HEADER_LIST_SIZE; 431 past it */
        int line;
    } http2;
    int log_level; /* enum um_log_level (umbra/log.h); "info" by default */
    /* Request-time Lua (umbra/hooks.h). */
    struct {
        bool on_request, on_response; /* global functions of those names */
        bool yunying;        /* a Yunying-style file (port = ..., origin_type = ...) */
        bool upstream_set;   /* ...with an upstream_set function */
        char *yy_protocol;   /* Yunying's upstream_protocol, upstream_domain, upstream_port: */
        char *yy_domain;     /* the server set_upstream_* start from */
        char *yy_host;       /* upstream_host, else yy_domain: the Host set_host replaces */
        int yy_port;
        char *source;        /* the file as loaded: each worker's state runs it again */
        size_t source_len;
        char *chunkname;     /* "@FILE" */
    } lua;
    struct um_admin_conf admin;
    /* pid = "FILE": the file that holds the process's ID while it runs (absolute, its
     * folder exists), or NULL. Read at start only: a reload keeps the running one. */
    char *pid_file;
    int pid_line; /* of pid in the file */
    /* user = "NAME", group = "NAME": who the process becomes once it has bound its
     * listeners and read its keys (when started as root). */
    struct um_user_conf {
        bool set;    /* user is set */
        char *name;  /* the user's name; "root" keeps root */
        char *group; /* group as written, or NULL: the user's primary group */
        uid_t uid;
        gid_t gid;   /* the group's, else the user's primary group */
        int line;    /* of user in the file */
    } user;
    atomic_int _refcnt;
};

/* Loads and validates a config file in a fresh Lua state (main thread only).
 * Returns a snapshot with one reference, or NULL with a message of the form
 * "FILE:LINE: message" (or "FILE: message" when no line applies) written into err. What
 * OpenSSL thinks of its certificates and ciphers is the TLS module's check, which the
 * caller runs next (um_tls_check_config). */
struct um_config *um_config_load(const char *file, char *err, size_t errlen);

/* Takes a reference. Thread-safe. A const pointer will do: the count is the only thing a
 * holder changes, atomically, and the settings stay as loaded. */
void um_config_ref(const struct um_config *c);
/* Drops a reference; the last one frees (c may be NULL). Thread-safe. */
void um_config_unref(const struct um_config *c);
/* The number of references (acquire): 1 means the caller's is the only one left. */
static inline int um_config_refs(const struct um_config *c)
{
    return atomic_load_explicit(&c->_refcnt, memory_order_acquire);
}

/* The index of the upstream named name, or -1. */
int um_config_upstream_index(const struct um_config *c, const char *name);
/* The index of the route named name (route's name = "..."), or -1. */
int um_config_route_index(const struct um_config *c, const char *name);

/* Listen addresses that replace the config file's in every later um_config_load (the
 * command line's -a), or n 0 for the file's own. The strings must stay valid. */
void um_config_listen_override(const char *const *addrs, size_t n);

/* Calls cb once with each setting the loader knows, as the documentation names it: a
 * global ("workers"), a key of a table ("limits.max_connections"), of each entry of a list
 * ("routes[N].path") or of each named entry ("upstreams.NAME.servers"); also the request
 * hooks and the settings of Yunying-style files. A table of settings comes before its keys.
 * For the documentation's checks (tests/docs). */
void um_config_settings(void (*cb)(const char *setting, void *arg), void *arg);

/* Parses a size such as 1024, "512KB", "16MB", "1GB" (units of 1024). */
bool um_config_parse_size(const char *s, uint64_t *out);

/* True when the address sa (AF_INET or AF_INET6) lies in any of the n networks at m. An
 * IPv4-mapped IPv6 address (::ffff:a.b.c.d, as a dual-stack socket reports IPv4 clients)
 * matches IPv4 entries, and an IPv4 address matches IPv6 entries covering its mapped form,
 * so a client gets the same answer whatever the listener's family. False for other
 * families, for sa NULL and for n 0. */
bool um_netmask_match(const struct um_netmask *m, size_t n, const struct sockaddr *sa);
/* The same for an address as text ("127.0.0.1", "::1": a client's, as connections keep
 * it); false when ip is not one. */
bool um_netmask_match_text(const struct um_netmask *m, size_t n, const char *ip);

#endif
