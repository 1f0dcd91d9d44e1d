/* src/l2/redis_loop.c on a real loop: the README's "reconnects back off from 50 ms to
 * 1 s" (issue #26), against a port nothing listens on, on the real clock (about 3.6 s). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "l2/redis_loop.h"
#include "umbra/loop.h"

#define ATTEMPTS 9

static uint64_t down_at[ATTEMPTS];
static int num_down;

static void on_down(struct um__redis *r, const char *why)
{
    (void)why;
    if (num_down < ATTEMPTS)
        down_at[num_down] = um_loop_now(r->loop);
    num_down++;
}

/* A 127.0.0.1 port that was free a moment ago: connecting to it is refused. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Each failed attempt is followed by the next after the backoff: 50 ms, doubling, at most
 * 1 s. The gaps between the failures are those delays (the refusals themselves take
 * microseconds); a loaded machine may only make them later. */
static void test_backoff_from_50ms_to_1s(void **state)
{
    (void)state;
    static const uint64_t want[ATTEMPTS - 1] = {50, 100, 200, 400, 800, 1000, 1000, 1000};
    struct um_loop *l = um_loop_create();
    struct um__redis r;
    um__redis_init(&r, l, "127.0.0.1", closed_port());
    r.on_down = on_down;
    um__redis_start(&r);
    for (int turns = 0; num_down < ATTEMPTS && turns < 1000; turns++)
        um_loop_run_once(l, 50);
    assert_true(num_down >= ATTEMPTS);
    for (int i = 0; i < ATTEMPTS - 1; i++) {
        uint64_t gap = down_at[i + 1] - down_at[i];
        if (gap + 2 < want[i] || gap > want[i] + 150)
            fail_msg("attempt %d came %llu ms after the previous one, want %llu", i + 2,
                     (unsigned long long)gap, (unsigned long long)want[i]);
    }
    um__redis_dispose(&r);
    um_loop_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_from_50ms_to_1s),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
