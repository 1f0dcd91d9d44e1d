/* A connection's output queue (src/server/outq.c) over a fake transport that records what
 * it is asked to send: a response head and a cached body behind it leave in one writev,
 * in order, however the transport cuts the writes short. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "server/outq.h"

struct fake {
    struct um_transport t;
    unsigned writes, writevs;
    size_t max_per_call; /* 0: take everything */
    char sent[8192];
    size_t sent_len;
};

static size_t take(struct fake *f, size_t len)
{
    if (f->max_per_call > 0 && len > f->max_per_call)
        len = f->max_per_call;
    assert_true(f->sent_len + len <= sizeof(f->sent));
    return len;
}

static ssize_t fake_write(struct um_transport *t, const void *buf, size_t len, unsigned flags,
                          int *want)
{
    (void)flags;
    (void)want;
    struct fake *f = (struct fake *)t;
    f->writes++;
    size_t n = take(f, len);
    memcpy(f->sent + f->sent_len, buf, n);
    f->sent_len += n;
    return (ssize_t)n;
}

static ssize_t fake_writev(struct um_transport *t, const struct iovec *iov, int iovcnt, int *want)
{
    (void)want;
    struct fake *f = (struct fake *)t;
    f->writevs++;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    size_t n = take(f, total), left = n;
    for (int i = 0; i < iovcnt && left > 0; i++) {
        size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
        memcpy(f->sent + f->sent_len, iov[i].iov_base, k);
        f->sent_len += k;
        left -= k;
    }
    return (ssize_t)n;
}

static ssize_t fake_sendfile(struct um_transport *t, int fd, uint64_t *off, size_t len, int *want)
{
    (void)t;
    (void)fd;
    (void)off;
    (void)len;
    (void)want;
    fail_msg("no file was queued");
    return UM_ERR;
}

static const struct um_transport_ops fake_ops = {
    .write = fake_write,
    .writev = fake_writev,
    .sendfile = fake_sendfile,
};

static unsigned released;

static void on_release(void *ctx)
{
    (void)ctx;
    released++;
}

/* The worker's pools the queues take their memory from. */
static struct um__outq_pools pools;

static int setup(void **state)
{
    (void)state;
    um__outq_pools_init(&pools, 4);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    um__outq_pools_dispose(&pools);
    return 0;
}

static const char HEAD[] = "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nAge: 3\r\n\r\n";

/* Queues HEAD and a 1024-byte borrowed body; flushes until everything is sent. Returns
 * the number of flush calls. */
static int send_hit(struct fake *f, char *body)
{
    struct um__outq q;
    um__outq_init(&q, &pools);
    for (int i = 0; i < 1024; i++)
        body[i] = (char)('a' + i % 26);
    um__outq_append(&q, HEAD, sizeof(HEAD) - 1);
    assert_true(um__outq_ref(&q, body, 1024, on_release, NULL));
    int calls = 0, r;
    do {
        int want = 0;
        r = um__outq_flush(&q, &f->t, &want);
        calls++;
        assert_true(calls < 10000);
    } while (r != UM_OK);
    assert_false(um__outq_pending(&q));
    um__outq_drop(&q);
    um__outq_dispose(&q);
    return calls;
}

static void sent_is_head_then_body(const struct fake *f, const char *body)
{
    assert_int_equal(f->sent_len, sizeof(HEAD) - 1 + 1024);
    assert_memory_equal(f->sent, HEAD, sizeof(HEAD) - 1);
    assert_memory_equal(f->sent + sizeof(HEAD) - 1, body, 1024);
}

static void test_head_and_borrowed_body_in_one_writev(void **state)
{
    (void)state;
    struct fake f = {.t = {.ops = &fake_ops, .fd = -1}};
    char body[1024];
    released = 0;
    assert_int_equal(send_hit(&f, body), 1);
    assert_int_equal(f.writevs, 1);
    assert_int_equal(f.writes, 0);
    assert_int_equal(released, 1);
    sent_is_head_then_body(&f, body);
}

static void test_short_writes_keep_the_order(void **state)
{
    (void)state;
    /* Cut every call short, at lengths that end inside the head, across its end and
     * inside the body. */
    for (size_t max = 1; max <= 80; max += 7) {
        struct fake f = {.t = {.ops = &fake_ops, .fd = -1}, .max_per_call = max};
        char body[1024];
        released = 0;
        send_hit(&f, body);
        assert_int_equal(f.writes, 0);
        assert_int_equal(released, 1);
        sent_is_head_then_body(&f, body);
    }
}

static void test_buffer_alone_is_one_write(void **state)
{
    (void)state;
    struct fake f = {.t = {.ops = &fake_ops, .fd = -1}};
    struct um__outq q;
    um__outq_init(&q, &pools);
    um__outq_append(&q, HEAD, sizeof(HEAD) - 1);
    int want = 0;
    assert_int_equal(um__outq_flush(&q, &f.t, &want), UM_OK);
    assert_int_equal(f.writes, 1);
    assert_int_equal(f.writevs, 0);
    assert_int_equal(f.sent_len, sizeof(HEAD) - 1);
    um__outq_drop(&q);
    um__outq_dispose(&q);
}

/* The bug: bytes copied into the buffer while borrowed segments waited (a cached body
 * read by reference, then the rest of it from the origin, copied: a fill too large for
 * the memory handing its client over to the fetch) went out before those segments, and
 * the client got its body out of order. Both ways of flushing, cut short or not. */
static void queue_head_ref_copy_ref(struct um__outq *q, const char *a, const char *b,
                                    const char *c)
{
    um__outq_append(q, HEAD, sizeof(HEAD) - 1);
    assert_true(um__outq_ref(q, a, 300, on_release, NULL));
    um__outq_append(q, b, 300); /* behind the segment */
    /* A segment behind copied bytes would overtake them: refused, the caller copies. */
    assert_false(um__outq_ref(q, c, 300, on_release, NULL));
    um__outq_append(q, c, 300);
}

static void test_bug_copies_stay_behind_borrowed_segments(void **state)
{
    (void)state;
    static const struct um_transport_ops copying_ops = {.write = fake_write};
    char a[300], b[300], c[300], want[sizeof(HEAD) - 1 + 900];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    memset(c, 'c', sizeof c);
    memcpy(want, HEAD, sizeof(HEAD) - 1);
    memcpy(want + sizeof(HEAD) - 1, a, 300);
    memcpy(want + sizeof(HEAD) - 1 + 300, b, 300);
    memcpy(want + sizeof(HEAD) - 1 + 600, c, 300);
    for (int copying = 0; copying <= 1; copying++)
        for (size_t max = 0; max <= 400; max += 57) {
            struct fake f = {.t = {.ops = copying ? &copying_ops : &fake_ops, .fd = -1},
                             .max_per_call = max};
            struct um__outq q;
            um__outq_init(&q, &pools);
            released = 0;
            queue_head_ref_copy_ref(&q, a, b, c);
            int calls = 0, r;
            do {
                int w = 0;
                r = um__outq_flush(&q, &f.t, &w);
                assert_true(++calls < 10000);
            } while (r != UM_OK);
            assert_int_equal(released, 1);
            assert_int_equal(f.sent_len, sizeof want);
            assert_memory_equal(f.sent, want, sizeof want);
            /* Once the segments are out, a new one goes behind what is buffered. */
            assert_true(um__outq_ref(&q, a, 10, on_release, NULL));
            um__outq_drop(&q);
            um__outq_dispose(&q);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_and_borrowed_body_in_one_writev),
        cmocka_unit_test(test_short_writes_keep_the_order),
        cmocka_unit_test(test_buffer_alone_is_one_write),
        cmocka_unit_test(test_bug_copies_stay_behind_borrowed_segments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
