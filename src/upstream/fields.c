/* SPDX-License-Identifier: BSD-2-Clause */
/* The upstream origin's request fields: what goes to the server, hop-by-hop fields left out. */
#include "umbra/upstream.h"

#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "umbra/http1.h"
#include "umbra/httpfield.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "umbra/metrics.h"
#include "internal.h"

/* ---------------------------------------------------------------- request headers */

bool um__up_is_hop_by_hop(enum um_field_id id)
{
    switch (id) {
    case UM_FIELD_CONNECTION:
    case UM_FIELD_KEEP_ALIVE:
    case UM_FIELD_PROXY_CONNECTION:
    case UM_FIELD_TE:
    case UM_FIELD_TRAILER:
    case UM_FIELD_TRANSFER_ENCODING:
    case UM_FIELD_UPGRADE:
    case UM_FIELD_PROXY_AUTHORIZATION:
    case UM_FIELD_PROXY_AUTHENTICATE:
        return true;
    default:
        return false;
    }
}

/* Fields that tell an application which host, scheme, port or URL a request was for. Umbra
 * sets X-Forwarded-For/-Proto/-Host itself; the others are dropped from client requests.
 * The cache key has none of them, so an origin that believes one (IIS and Symfony route by
 * X-Original-URL, Rails builds links from X-Forwarded-Scheme) would let one client choose
 * what the cache then gives everybody (cache poisoning). */
static bool is_forwarding_field(enum um_field_id id)
{
    switch (id) {
    case UM_FIELD_X_FORWARDED_PROTO:
    case UM_FIELD_X_FORWARDED_HOST:
    case UM_FIELD_X_FORWARDED_FOR:
    case UM_FIELD_X_FORWARDED_SCHEME:
    case UM_FIELD_X_FORWARDED_PORT:
    case UM_FIELD_X_FORWARDED_PREFIX:
    case UM_FIELD_X_FORWARDED_SERVER:
    case UM_FIELD_X_ORIGINAL_URL:
    case UM_FIELD_X_REWRITE_URL:
    case UM_FIELD_X_ORIGINAL_HOST:
    case UM_FIELD_X_HOST:
        return true;
    default:
        return false;
    }
}

/* Appends "Name: value\r\n" to buf (sized in advance by the caller). */
static size_t put_field(char *buf, size_t o, um_str name, um_str value)
{
    memcpy(buf + o, name.base, name.len);
    o += name.len;
    buf[o++] = ':';
    buf[o++] = ' ';
    memcpy(buf + o, value.base, value.len);
    o += value.len;
    buf[o++] = '\r';
    buf[o++] = '\n';
    return o;
}

/* A gRPC call's grpc-timeout (1 to 8 digits and a unit: H, M, S, m, u, n), in ms rounded
 * up; 0: none or malformed (the call then has only the upstream's timeout). */
static uint64_t grpc_timeout_ms(const struct um_request *req)
{
    const um_str *v = um_http1_find_header(req, "grpc-timeout");
    if (v == NULL || v->len < 2 || v->len > 9) return 0;
    uint64_t n = 0;
    for (size_t i = 0; i + 1 < v->len; i++) {
        if (v->base[i] < '0' || v->base[i] > '9') return 0;
        n = n * 10 + (uint64_t)(v->base[i] - '0');
    }
    switch (v->base[v->len - 1]) {
    case 'H':
        return n * 3600 * 1000;
    case 'M':
        return n * 60 * 1000;
    case 'S':
        return n * 1000;
    case 'm':
        return n;
    case 'u':
        return (n + 999) / 1000;
    case 'n':
        return (n + 999999) / 1000000;
    default:
        return 0;
    }
}

/* Whether req is a gRPC call: from an HTTP/2 client, or made one by the gRPC-Web layer. */
static bool is_grpc(const struct um_request *req)
{
    const um_str *ct = um_http1_find_header(req, "content-type");
    return ct && um_grpc_type(*ct) == UM_GRPC;
}

/* Marks x as a gRPC call (x->grpc) with its deadline (x->deadline), when req is one. */
void um__up_grpc(const struct um_request *req, struct xfer *x)
{
    x->grpc = is_grpc(req);
    if (x->grpc) {
        uint64_t ms = grpc_timeout_ms(req);
        if (ms > 0) x->deadline = um_loop_now(x->loop) + ms;
    }
}

/* Whether a TE value lists "trailers" (RFC 9110 section 10.1.4). */
static bool te_says_trailers(um_str v)
{
    size_t pos = 0;
    um_str item;
    while (um_http_list_next(v, &pos, &item))
        if (item.len == 8 && um_str_eq_ci(item, "trailers")) return true;
    return false;
}

/* Appends raw bytes to buf (sized in advance by the caller). */
static size_t put_bytes(char *buf, size_t o, const char *p, size_t n)
{
    memcpy(buf + o, p, n);
    return o + n;
}

/* The fields sent to the server, as text, into x->fields: the client's end-to-end fields
 * in order, Host, and the forwarding fields. */
void um__up_build_fields(struct upstream *up, const struct um_fetch *f, struct xfer *x)
{
    const struct um_request *req = f->req;
    const char *ip = f->client_ip ? f->client_ip : "";
    size_t ip_len = strlen(ip), scheme_len = strlen(f->scheme);
    size_t host_len = up->conf->host ? strlen(up->conf->host) : 0;
    size_t size = 256 + ip_len + scheme_len;
    /* Each field is classified once; ids[] keeps it for the copy. */
    uint8_t ids[UM_HTTP1_MAX_HEADERS];
    bool any_connection = false;
    um_str xff = {NULL, 0};
    const um_str *via = NULL;
    bool te_trailers = false;
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *fld = &req->headers[i];
        enum um_field_id id = um_http_field_id(fld->name);
        ids[i] = (uint8_t)id;
        size += fld->name.len + fld->value.len + 4;
        if (id == UM_FIELD_CONNECTION)
            any_connection = true;
        else if (id == UM_FIELD_X_FORWARDED_FOR && xff.base == NULL)
            xff = fld->value;
        else if (id == UM_FIELD_VIA && via == NULL)
            via = &fld->value;
        else if (id == UM_FIELD_TE)
            te_trailers |= te_says_trailers(fld->value);
    }
    struct um_http_conn_tokens conn;
    if (any_connection)
        um_http_conn_tokens_init(&conn, req->headers, req->num_headers);
    size += 2 * req->authority.len + host_len + xff.len + (via ? via->len : 0);
    if (x->upgrade)
        size += um_http1_find_header(req, "upgrade")->len + 64;
    char *out = um_malloc(size);
    size_t o = 0;
    for (size_t i = 0; i < req->num_headers; i++) {
        const struct um_header *fld = &req->headers[i];
        enum um_field_id id = ids[i];
        if (um__up_is_hop_by_hop(id) || id == UM_FIELD_HOST || id == UM_FIELD_CONTENT_LENGTH ||
            id == UM_FIELD_EXPECT || is_forwarding_field(id) ||
            (any_connection && um_http_conn_names(&conn, fld->name)))
            continue;
        o = put_field(out, o, fld->name, fld->value);
    }
    x->has_host = true;
    if (up->conf->host)
        o = put_field(out, o, UM_STR("Host"), (um_str){up->conf->host, host_len});
    else if (req->authority.len > 0)
        o = put_field(out, o, UM_STR("Host"), req->authority);
    else
        x->has_host = false;
    o = put_bytes(out, o, "X-Forwarded-For: ", 17);
    if (xff.len > 0 && xff.len < 900) {
        o = put_bytes(out, o, xff.base, xff.len);
        o = put_bytes(out, o, ", ", 2);
    }
    o = put_bytes(out, o, ip, ip_len);
    o = put_bytes(out, o, "\r\n", 2);
    o = put_field(out, o, UM_STR("X-Forwarded-Proto"), (um_str){f->scheme, scheme_len});
    if (req->authority.len > 0)
        o = put_field(out, o, UM_STR("X-Forwarded-Host"), req->authority);
    um_str proto = (req->flags & UM_REQ_F_HTTP2) ? UM_STR("2")
                   : req->minor_version          ? UM_STR("1.1")
                                                 : UM_STR("1.0");
    o = put_bytes(out, o, "Via: ", 5);
    if (via && via->len < 900) {
        o = put_bytes(out, o, via->base, via->len);
        o = put_bytes(out, o, ", ", 2);
    }
    o = put_bytes(out, o, proto.base, proto.len);
    o = put_bytes(out, o, " umbra\r\n", 8);
    /* The client takes trailers (gRPC's clients say so, and gRPC's servers want to hear
     * it): the HTTP/2 client says so too ("te: trailers", the one TE HTTP/2 allows). */
    x->te_trailers = te_trailers;
    if (x->upgrade) {
        /* The one hop-by-hop request that crosses: the protocol switch the client asks
         * for, whatever its token (websocket, h2c...), for the server to agree to. */
        const um_str *up_val = um_http1_find_header(req, "upgrade");
        o = put_field(out, o, UM_STR("Connection"), UM_STR("upgrade"));
        o = put_field(out, o, UM_STR("Upgrade"), *up_val);
    }
    UM_ASSERT(o <= size);
    x->fields = out;
    x->fields_len = o;
}

