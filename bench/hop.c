/* hop: what one more process on the path costs on this machine, for bench/cluster.sh.
 *
 *   hop server PORT          answers every request (up to its empty line) on 127.0.0.1:PORT
 *                            with a canned 200 and a 1 KiB body, one connection at a time
 *   hop relay PORT NEXT      passes bytes both ways between each client of PORT and a
 *                            connection of its own to NEXT (poll, read, write: the least a
 *                            proxy can do, with no HTTP work)
 *   hop client PORT COUNT    COUNT requests over one keep-alive connection; prints the
 *                            median round trip in microseconds
 *
 * Blocking sockets, TCP_NODELAY, nothing else: the figures are the kernel's and the
 * scheduler's share of a hop, which no proxy can go below. Every loop ends when its peer
 * closes; the client's is bounded by COUNT. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY 1024

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static struct sockaddr_in addr(int port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int listen_on(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = addr(port);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0)
        die("listen");
    return fd;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr(port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("connect");
    nodelay(fd);
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve(int c)
{
    static char answer[256 + BODY];
    int hl = snprintf(answer, 256, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", BODY);
    memset(answer + hl, 'h', BODY);
    char buf[8192];
    size_t have = 0;
    for (;;) {
        ssize_t r = recv(c, buf + have, sizeof buf - have, 0);
        if (r <= 0)
            return;
        have += (size_t)r;
        char *end;
        while ((end = memmem(buf, have, "\r\n\r\n", 4)) != NULL) {
            if (send_all(c, answer, (size_t)hl + BODY) != 0)
                return;
            size_t used = (size_t)(end + 4 - buf);
            memmove(buf, buf + used, have - used);
            have -= used;
        }
        if (have == sizeof buf)
            return; /* a head this big is not what the bench sends */
    }
}

static void relay(int c, int next_port)
{
    int n = connect_to(next_port);
    struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = n, .events = POLLIN}};
    char buf[65536];
    for (;;) {
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        int stop = 0;
        for (int i = 0; i < 2 && !stop; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = recv(p[i].fd, buf, sizeof buf, 0);
            stop = r <= 0 || send_all(p[1 - i].fd, buf, (size_t)r) != 0;
        }
        if (stop)
            break;
    }
    close(n);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int client(int port, int count)
{
    int fd = connect_to(port);
    static const char req[] = "GET /hop HTTP/1.1\r\nHost: bench\r\n\r\n";
    double *t = malloc(sizeof(double) * (size_t)count);
    char buf[65536];
    for (int i = 0; i < count; i++) {
        double t0 = now_us();
        if (send_all(fd, req, sizeof req - 1) != 0)
            die("send");
        size_t have = 0, want = 0;
        for (;;) {
            ssize_t r = recv(fd, buf + have, sizeof buf - have, 0);
            if (r <= 0)
                die("recv");
            have += (size_t)r;
            char *end = memmem(buf, have, "\r\n\r\n", 4);
            if (end != NULL && want == 0) {
                const char *cl = memmem(buf, (size_t)(end - buf), "Content-Length: ", 16);
                want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
            }
            if (want != 0 && have >= want)
                break;
        }
        t[i] = now_us() - t0;
    }
    qsort(t, (size_t)count, sizeof(double), by_value);
    printf("%.1f\n", t[count / 2]);
    free(t);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    bool is_server = argc == 3 && strcmp(argv[1], "server") == 0;
    bool is_relay = argc == 4 && strcmp(argv[1], "relay") == 0;
    if (is_server || is_relay) {
        int l = listen_on(atoi(argv[2]));
        for (;;) {
            int c = accept(l, NULL, NULL);
            if (c < 0)
                die("accept");
            nodelay(c);
            if (is_server)
                serve(c);
            else
                relay(c, atoi(argv[3]));
            close(c);
        }
    }
    if (argc == 4 && strcmp(argv[1], "client") == 0 && atoi(argv[3]) > 0)
        return client(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: hop server PORT | hop relay PORT NEXT | hop client PORT COUNT\n");
    return 2;
}
