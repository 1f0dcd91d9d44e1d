/* The ws scenario's two ends (bench/ws.sh), in one program:
 *
 *   ws_load echo PORT
 *       A WebSocket backend on 127.0.0.1:PORT: answers each upgrade request with 101 (its
 *       Sec-WebSocket-Accept computed as RFC 6455 4.2.2 says), then echoes every byte it
 *       gets, frames as they are (a proxy's tunnel never looks inside them, so the client
 *       gets back exactly what it sent). One thread, epoll, non-blocking: it reads a
 *       connection only while what it read before is written back (backpressure).
 *
 *   ws_load client PORT SECONDS SIZE DEPTH
 *       Opens one WebSocket through the proxy on 127.0.0.1:PORT, then for SECONDS keeps
 *       DEPTH binary frames of SIZE payload bytes in flight (masked, as a client's must
 *       be), and checks that every byte that comes back is the byte sent. Prints
 *       "bytes=N seconds=S mbps=M errors=none" (MB/s of echoed payload; 1 MB = 10^6 bytes)
 *       or errors=WHAT.
 *
 * Every loop is bounded: by the run's time, and the echo server by its signals (it runs
 * until bench/ws.sh stops it by PID). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (256 * 1024)
#define HEAD_MAX 8192

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- echo */

struct econn {
    int fd;
    int upgraded;
    char head[HEAD_MAX];
    size_t hlen;
    char *buf;
    size_t pos, len; /* unwritten bytes */
};

/* The accept key of RFC 6455 4.2.2 for the Sec-WebSocket-Key in head, into out. */
static int accept_key(const char *head, char *out)
{
    const char *k = strcasestr(head, "\r\nsec-websocket-key:");
    char key[128];
    size_t n = 0;
    if (k == NULL)
        return -1;
    k += 20;
    while (*k == ' ')
        k++;
    while (*k && *k != '\r' && n < 64)
        key[n++] = *k++;
    memcpy(key + n, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11", 36);
    n += 36;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(key, n, md, &mdlen, EVP_sha1(), NULL) != 1)
        return -1;
    EVP_EncodeBlock((unsigned char *)out, md, (int)mdlen);
    return 0;
}

static void eclose(int ep, struct econn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->buf);
    free(c);
}

/* Writes what is pending; returns -1 when the connection is dead. */
static int eflush(struct econn *c)
{
    while (c->len > 0) {
        ssize_t n = send(c->fd, c->buf + c->pos, c->len, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN ? 0 : -1;
        c->pos += (size_t)n;
        c->len -= (size_t)n;
    }
    c->pos = 0;
    return 0;
}

static void eserve(int ep, struct econn *c)
{
    for (int turn = 0; turn < 64; turn++) {
        if (eflush(c) < 0) {
            eclose(ep, c);
            return;
        }
        if (c->len > 0)
            return; /* EPOLLOUT (edge) brings us back */
        if (!c->upgraded) {
            ssize_t n = recv(c->fd, c->head + c->hlen, HEAD_MAX - 1 - c->hlen, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN)) {
                eclose(ep, c);
                return;
            }
            if (n < 0)
                return;
            c->hlen += (size_t)n;
            c->head[c->hlen] = '\0';
            char *end = strstr(c->head, "\r\n\r\n");
            if (end == NULL) {
                if (c->hlen == HEAD_MAX - 1) {
                    eclose(ep, c);
                    return;
                }
                continue;
            }
            char acc[64] = "";
            accept_key(c->head, acc);
            c->len = (size_t)snprintf(c->buf, BUF,
                                      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                                      acc);
            size_t rest = c->hlen - (size_t)(end + 4 - c->head);
            memcpy(c->buf + c->len, end + 4, rest);
            c->len += rest;
            c->upgraded = 1;
            continue;
        }
        ssize_t n = recv(c->fd, c->buf, BUF, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            eclose(ep, c);
            return;
        }
        if (n < 0)
            return;
        c->len = (size_t)n;
    }
    /* Turn used up: come back after the others (a level-triggered nudge). */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static int echo_main(int port)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 4096) != 0) {
        perror("ws_load echo: bind");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                for (int k = 0; k < 1024; k++) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0)
                        break;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    struct econn *c = calloc(1, sizeof(*c));
                    c->fd = fd;
                    c->buf = malloc(BUF);
                    struct epoll_event cev = {.events = EPOLLIN | EPOLLOUT | EPOLLET,
                                              .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                    eserve(ep, c);
                }
                continue;
            }
            eserve(ep, evs[i].data.ptr);
        }
    }
}

/* ---------------------------------------------------------------- client */

static int client_main(int port, double seconds, size_t size, int depth)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        printf("bytes=0 seconds=0 mbps=0 errors=connect:%s\n", strerror(errno));
        return 1;
    }
    const char *req = "GET /ws HTTP/1.1\r\nHost: bench\r\nConnection: Upgrade\r\n"
                      "Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\n\r\n";
    if (send(fd, req, strlen(req), 0) != (ssize_t)strlen(req)) {
        printf("bytes=0 seconds=0 mbps=0 errors=send\n");
        return 1;
    }
    char head[HEAD_MAX + 1];
    size_t hl = 0;
    char *end = NULL;
    while (end == NULL && hl < HEAD_MAX) {
        ssize_t n = recv(fd, head + hl, HEAD_MAX - hl, 0);
        if (n <= 0) {
            printf("bytes=0 seconds=0 mbps=0 errors=no-101\n");
            return 1;
        }
        hl += (size_t)n;
        head[hl] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    if (end == NULL || strncmp(head, "HTTP/1.1 101", 12) != 0 ||
        strcasestr(head, "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") == NULL) {
        printf("bytes=0 seconds=0 mbps=0 errors=bad-101\n");
        return 1;
    }
    if ((size_t)(end + 4 - head) != hl) {
        printf("bytes=0 seconds=0 mbps=0 errors=bytes-after-101\n");
        return 1;
    }
    /* One masked binary frame, sent again and again. */
    size_t hdr = size < 126 ? 2 : size < 65536 ? 4 : 10;
    size_t flen = hdr + 4 + size;
    unsigned char *f = malloc(flen);
    f[0] = 0x82;
    if (size < 126) {
        f[1] = (unsigned char)(0x80 | size);
    } else if (size < 65536) {
        f[1] = 0x80 | 126;
        f[2] = (unsigned char)(size >> 8);
        f[3] = (unsigned char)size;
    } else {
        f[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            f[2 + i] = (unsigned char)((uint64_t)size >> (56 - 8 * i));
    }
    unsigned char mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    memcpy(f + hdr, mask, 4);
    for (size_t i = 0; i < size; i++)
        f[hdr + 4 + i] = (unsigned char)((i * 131 + 7) & 0xff) ^ mask[i % 4];
    unsigned char *rb = malloc(BUF);
    uint64_t sent = 0, got = 0; /* bytes of the frame stream */
    double t0 = now(), deadline = t0 + seconds;
    const char *err = "none";
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    int sending = 1;
    while (1) {
        double t = now();
        if (t >= deadline)
            sending = 0;
        if (!sending && got == sent)
            break;
        if (t >= deadline + 10) {
            err = "timeout";
            break;
        }
        uint32_t want = EPOLLIN;
        if (sending && sent - got < (uint64_t)depth * flen)
            want |= EPOLLOUT;
        ev.events = want;
        epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, 100);
        if (n <= 0)
            continue;
        if ((out.events & EPOLLOUT) && sending) {
            size_t off = (size_t)(sent % flen);
            ssize_t w = send(fd, f + off, flen - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sent += (uint64_t)w;
            else if (w < 0 && errno != EAGAIN) {
                err = "send";
                break;
            }
        }
        if (out.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
            ssize_t r = recv(fd, rb, BUF, MSG_DONTWAIT);
            if (r == 0) {
                err = "closed";
                break;
            }
            if (r < 0) {
                if (errno == EAGAIN)
                    continue;
                err = "recv";
                break;
            }
            /* Every byte must be the byte sent at its place in the stream. */
            size_t k = 0;
            while (k < (size_t)r) {
                size_t off = (size_t)((got + k) % flen);
                size_t m = flen - off < (size_t)r - k ? flen - off : (size_t)r - k;
                if (memcmp(rb + k, f + off, m) != 0) {
                    err = "wrong-bytes";
                    break;
                }
                k += m;
            }
            if (strcmp(err, "none") != 0)
                break;
            got += (uint64_t)r;
        }
    }
    double secs = now() - t0;
    uint64_t payload = got / flen * size;
    printf("bytes=%llu seconds=%.3f mbps=%.1f errors=%s\n", (unsigned long long)payload, secs,
           (double)payload / 1e6 / secs, err);
    close(fd);
    return strcmp(err, "none") == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "echo") == 0)
        return echo_main(atoi(argv[2]));
    if (argc == 6 && strcmp(argv[1], "client") == 0)
        return client_main(atoi(argv[2]), atof(argv[3]), (size_t)atol(argv[4]), atoi(argv[5]));
    fprintf(stderr, "usage: ws_load echo PORT | ws_load client PORT SECONDS SIZE DEPTH\n");
    return 2;
}
