/* SPDX-License-Identifier: BSD-2-Clause */
/* The PROXY protocol's header (umbra/proxyproto.h). Strict: a v1 line has single spaces,
 * addresses of the family it names, ports in 0..65535 without leading zeros, and ends
 * with CRLF within 107 bytes; a v2 header has the signature, version 2, a command of LOCAL
 * or PROXY, and a length that holds its family's addresses. */
#include "umbra/proxyproto.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <string.h>

#define V1_MAX 107
static const uint8_t v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                   0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* The next space-ended (or, last, CR-ended) word of the v1 line [*p, end) into w. */
static bool word(const char **p, const char *end, char stop, char *w, size_t cap)
{
    size_t n = 0;
    while (*p < end && **p != stop && **p != ' ' && **p != '\r') {
        if (n + 1 >= cap) return false;
        w[n++] = *(*p)++;
    }
    w[n] = '\0';
    if (n == 0 || *p >= end || **p != stop) return false;
    (*p)++;
    return true;
}

static bool port(const char *w, uint16_t *out)
{
    size_t n = strlen(w);
    if (n == 0 || n > 5 || (n > 1 && w[0] == '0')) return false;
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] < '0' || w[i] > '9') return false;
        v = v * 10 + (unsigned)(w[i] - '0');
    }
    if (v > 65535) return false;
    *out = (uint16_t)v;
    return true;
}

static void set_src(struct um_proxy_hdr *out, int family, const void *addr, uint16_t port_net)
{
    memset(&out->src, 0, sizeof(out->src));
    out->family = family;
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&out->src;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, addr, 4);
        a->sin_port = port_net;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&out->src;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, addr, 16);
        a->sin6_port = port_net;
    }
}

static int parse_v1(const uint8_t *buf, size_t len, struct um_proxy_hdr *out)
{
    const char *s = (const char *)buf;
    size_t scan = len < V1_MAX ? len : V1_MAX;
    const void *cr = memchr(s, '\r', scan);
    const void *lf = memchr(s, '\n', cr ? (size_t)((const char *)cr - s) : scan);
    if (lf != NULL) return -1; /* a bare LF: not a v1 line */
    if (cr == NULL) return len >= V1_MAX ? -1 : 0;
    const char *end = cr;
    if ((size_t)(end - s) + 1 >= len) return 0; /* the LF may come */
    if (end[1] != '\n') return -1;
    int total = (int)(end - s) + 2;
    const char *p = s + 6; /* "PROXY " */
    char proto[8], src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN], sp[8], dp[8];
    out->family = AF_UNSPEC;
    /* "UNKNOWN" may carry anything up to the CRLF: it is ignored. */
    if (end - p >= 7 && memcmp(p, "UNKNOWN", 7) == 0 && (end - p == 7 || p[7] == ' ')) return total;
    if (!word(&p, end, ' ', proto, sizeof proto)) return -1;
    int family = strcmp(proto, "TCP4") == 0 ? AF_INET : strcmp(proto, "TCP6") == 0 ? AF_INET6 : 0;
    if (family == 0) return -1;
    uint8_t a[16], b[16];
    uint16_t ps, pd;
    if (!word(&p, end, ' ', src, sizeof src) || !word(&p, end, ' ', dst, sizeof dst) ||
        !word(&p, end, ' ', sp, sizeof sp) || !word(&p, end + 1, '\r', dp, sizeof dp) ||
        p != end + 1)
        return -1;
    if (inet_pton(family, src, a) != 1 || inet_pton(family, dst, b) != 1 || !port(sp, &ps) ||
        !port(dp, &pd))
        return -1;
    set_src(out, family, a, htons(ps));
    return total;
}

static int parse_v2(const uint8_t *buf, size_t len, struct um_proxy_hdr *out)
{
    if (len < 16) return 0;
    size_t body = (size_t)buf[14] << 8 | buf[15];
    if (16 + body > UM_PROXY_MAX) return -1;
    if ((buf[12] >> 4) != 2) return -1;
    unsigned cmd = buf[12] & 0xF, fam = buf[13] >> 4, proto = buf[13] & 0xF;
    if (cmd > 1 || fam > 3 || proto > 2) return -1;
    /* The addresses must fit in the length, whatever the command. */
    size_t need = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
    if (body < need) return -1;
    if (len < 16 + body) return 0;
    out->family = AF_UNSPEC;
    if (cmd == 0 || proto != 1 || (fam != 1 && fam != 2)) return (int)(16 + body);
    const uint8_t *a = buf + 16;
    if (fam == 1) {
        uint16_t p;
        memcpy(&p, a + 8, 2);
        set_src(out, AF_INET, a, p);
    } else {
        uint16_t p;
        memcpy(&p, a + 32, 2);
        set_src(out, AF_INET6, a, p);
    }
    return (int)(16 + body);
}

int um_proxy_parse(const uint8_t *buf, size_t len, struct um_proxy_hdr *out)
{
    /* Compare what has come of each signature: a prefix of both is undecided. */
    size_t n1 = len < 6 ? len : 6, n2 = len < 12 ? len : 12;
    if (memcmp(buf, "PROXY ", n1) == 0) return len < 6 ? 0 : parse_v1(buf, len, out);
    if (memcmp(buf, v2_sig, n2) == 0) return len < 12 ? 0 : parse_v2(buf, len, out);
    return -1;
}
