/* SPDX-License-Identifier: BSD-2-Clause */
/* The PROXY protocol's header (HAProxy's specification, versions 1 and 2): what a load
 * balancer in front sends first on a connection to say whose it is. Only the parser is
 * here (src/http/proxyproto.c); the server reads the header off a listener with
 * proxy_protocol = true before TLS or HTTP.
 *
 * Threads: pure functions. */
#ifndef UMBRA_PROXYPROTO_H
#define UMBRA_PROXYPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The longest header taken: a v1 line is at most 107 bytes; a v2 header is 16 bytes and
 * its addresses (at most 216 bytes with the UNIX family) and TLVs, which are skipped: more
 * than this is refused rather than buffered. */
#define UM_PROXY_MAX 1024

struct um_proxy_hdr {
    /* AF_INET or AF_INET6: src is the client's address and port; AF_UNSPEC: the header
     * says nothing of the client (v1 UNKNOWN, v2 LOCAL, or a family other than TCP over
     * IPv4 or IPv6): the connection's own peer stands. */
    int family;
    struct sockaddr_storage src;
};

/* Parses the header at the start of buf (len bytes received so far). Returns its length
 * (> 0) with *out set, 0 when more bytes are needed to tell (never when len >=
 * UM_PROXY_MAX), or -1 when buf does not start with a valid header. */
int um_proxy_parse(const uint8_t *buf, size_t len, struct um_proxy_hdr *out);

#endif
