/* The PROXY protocol header parser (umbra/proxyproto.h): v1 and v2, every family, what is
 * incomplete and what is refused. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "umbra/proxyproto.h"

static int parse(const void *buf, size_t len, struct um_proxy_hdr *h)
{
    return um_proxy_parse(buf, len, h);
}

static void check_v4(const struct um_proxy_hdr *h, const char *ip, int port)
{
    assert_int_equal(h->family, AF_INET);
    const struct sockaddr_in *a = (const struct sockaddr_in *)&h->src;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    assert_string_equal(text, ip);
    assert_int_equal(ntohs(a->sin_port), port);
}

static void check_v6(const struct um_proxy_hdr *h, const char *ip, int port)
{
    assert_int_equal(h->family, AF_INET6);
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&h->src;
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    assert_string_equal(text, ip);
    assert_int_equal(ntohs(a->sin6_port), port);
}

static void test_v1(void **state)
{
    (void)state;
    struct um_proxy_hdr h;
    const char *s = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
    assert_int_equal(parse(s, strlen(s), &h), (int)(strchr(s, '\n') - s) + 1);
    check_v4(&h, "192.0.2.1", 56324);
    s = "PROXY TCP6 2001:db8::1 2001:db8::2 0 65535\r\n";
    assert_int_equal(parse(s, strlen(s), &h), (int)strlen(s));
    check_v6(&h, "2001:db8::1", 0);
    s = "PROXY UNKNOWN\r\n";
    assert_int_equal(parse(s, strlen(s), &h), (int)strlen(s));
    assert_int_equal(h.family, AF_UNSPEC);
    s = "PROXY UNKNOWN whatever may follow\r\n";
    assert_int_equal(parse(s, strlen(s), &h), (int)strlen(s));
    assert_int_equal(h.family, AF_UNSPEC);
}

static void test_v1_incomplete_then_whole(void **state)
{
    (void)state;
    struct um_proxy_hdr h;
    const char *s = "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(parse(s, k, &h), 0); /* every prefix: more is needed */
    assert_int_equal(parse(s, n, &h), (int)n);
}

static void test_v1_refused(void **state)
{
    (void)state;
    struct um_proxy_hdr h;
    const char *bad[] = {
        "PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n", /* two spaces */
        "PROXY TCP4 192.0.2.1 198.51.100.2 01 2\r\n", /* leading zero */
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 65536\r\n",
        "PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n", /* family mismatch */
        "PROXY TCP6 192.0.2.1 198.51.100.2 1 2\r\n",
        "PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2\n",  /* no CR */
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2\rX", /* CR without LF */
        "PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n",  /* a field short */
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2 3\r\n",
        "PROXY UNKNOWNX\r\n",
        "proxy TCP4 192.0.2.1 198.51.100.2 1 2\r\n",
        "GET / HTTP/1.1\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(parse(bad[i], strlen(bad[i]), &h), -1);
    /* No CRLF within 107 bytes: refused, not waited for. */
    char longer[200];
    memset(longer, 'A', sizeof longer);
    memcpy(longer, "PROXY ", 6);
    assert_int_equal(parse(longer, sizeof longer, &h), -1);
    assert_int_equal(parse(longer, 106, &h), 0);
}

static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                      0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

static size_t v2(unsigned char *out, unsigned ver_cmd, unsigned fam, const void *body, size_t n)
{
    memcpy(out, sig, 12);
    out[12] = (unsigned char)ver_cmd;
    out[13] = (unsigned char)fam;
    out[14] = (unsigned char)(n >> 8);
    out[15] = (unsigned char)n;
    memcpy(out + 16, body, n);
    return 16 + n;
}

static void test_v2(void **state)
{
    (void)state;
    struct um_proxy_hdr h;
    unsigned char buf[600], body[300];
    /* IPv4 with a TLV after the addresses. */
    unsigned char a4[] = {192,  0,    2,    1,    198,  51,   100, 2,   0xDC,
                          0x04, 0x01, 0xBB, 0x02, 0x00, 0x03, 'a', 'b', 'c'};
    size_t n = v2(buf, 0x21, 0x11, a4, sizeof a4);
    buf[n] = 'G'; /* the request follows */
    assert_int_equal(parse(buf, n + 1, &h), (int)n);
    check_v4(&h, "192.0.2.1", 0xDC04);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(parse(buf, k, &h), 0);
    /* IPv6. */
    memset(body, 0, 36);
    inet_pton(AF_INET6, "2001:db8::7", body);
    body[32] = 0x12, body[33] = 0x34;
    n = v2(buf, 0x21, 0x21, body, 36);
    assert_int_equal(parse(buf, n, &h), (int)n);
    check_v6(&h, "2001:db8::7", 0x1234);
    /* LOCAL: the addresses, if any, say nothing. */
    n = v2(buf, 0x20, 0x00, body, 0);
    assert_int_equal(parse(buf, n, &h), 16);
    assert_int_equal(h.family, AF_UNSPEC);
    n = v2(buf, 0x20, 0x11, a4, 12);
    assert_int_equal(parse(buf, n, &h), 28);
    assert_int_equal(h.family, AF_UNSPEC);
    /* PROXY over UDP, or of UNIX sockets: taken, the peer stands. */
    n = v2(buf, 0x21, 0x12, a4, 12);
    assert_int_equal(parse(buf, n, &h), 28);
    assert_int_equal(h.family, AF_UNSPEC);
    memset(body, 0, 216);
    n = v2(buf, 0x21, 0x31, body, 216);
    assert_int_equal(parse(buf, n, &h), (int)n);
    assert_int_equal(h.family, AF_UNSPEC);
}

static void test_v2_refused(void **state)
{
    (void)state;
    struct um_proxy_hdr h;
    unsigned char buf[1200], body[1100] = {0};
    size_t n = v2(buf, 0x11, 0x11, body, 12); /* version 1 in a v2 header */
    assert_int_equal(parse(buf, n, &h), -1);
    n = v2(buf, 0x22, 0x11, body, 12); /* command 2 */
    assert_int_equal(parse(buf, n, &h), -1);
    n = v2(buf, 0x21, 0x41, body, 12); /* family 4 */
    assert_int_equal(parse(buf, n, &h), -1);
    n = v2(buf, 0x21, 0x13, body, 12); /* protocol 3 */
    assert_int_equal(parse(buf, n, &h), -1);
    n = v2(buf, 0x21, 0x11, body, 11);        /* too short for IPv4 addresses */
    assert_int_equal(parse(buf, 16, &h), -1); /* known from the length alone */
    n = v2(buf, 0x21, 0x21, body, 35);
    assert_int_equal(parse(buf, n, &h), -1);
    n = v2(buf, 0x21, 0x11, body, UM_PROXY_MAX); /* longer than what is taken */
    assert_int_equal(parse(buf, 16, &h), -1);
    buf[5] ^= 1; /* a signature off by a bit */
    n = v2(buf, 0x21, 0x11, body, 12);
    buf[5] ^= 1;
    assert_int_equal(parse(buf, n, &h), -1);
    (void)n;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1),         cmocka_unit_test(test_v1_incomplete_then_whole),
        cmocka_unit_test(test_v1_refused), cmocka_unit_test(test_v2),
        cmocka_unit_test(test_v2_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
