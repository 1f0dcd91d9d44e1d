/* The event loop alone: timers, stop and restart, deferred and posted tasks, on_stop,
 * descriptors and timeout queues. Durations are a few milliseconds of the real clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "umbra/context.h"
#include "umbra/loop.h"
#include "umbra/module.h"

/* What the callbacks saw, in order. */
static int order[16];
static int num_order;

static void seen(int id)
{
    assert_true(num_order < 16);
    order[num_order++] = id;
}

static void order_is(const int *want, int n)
{
    assert_int_equal(num_order, n);
    for (int i = 0; i < n; i++)
        if (order[i] != want[i])
            fail_msg("callback %d was %d, want %d", i, order[i], want[i]);
}

static struct um_loop *loop;

static int setup(void **state)
{
    (void)state;
    loop = um_loop_create();
    num_order = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    um_loop_destroy(loop);
    loop = NULL;
    return 0;
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- timers */

struct id_timer {
    struct um_timer t;
    int id;
    bool stop; /* stops the loop when it fires */
};

static void on_id_timer(struct um_timer *t)
{
    struct id_timer *it = (struct id_timer *)t;
    seen(it->id);
    if (it->stop)
        um_loop_stop(loop);
}

static void test_timers_fire_in_deadline_order(void **state)
{
    (void)state;
    static const uint64_t ms[] = {30, 0, 20, 10, 5, 25};
    struct id_timer ts[6];
    memset(ts, 0, sizeof ts);
    for (int i = 0; i < 6; i++) {
        ts[i].t.cb = on_id_timer;
        ts[i].id = i;
        um_loop_timer_start(loop, &ts[i].t, ms[i]);
        assert_true(um_loop_timer_armed(&ts[i].t));
    }
    ts[0].stop = true;
    um_loop_timer_stop(loop, &ts[4].t);      /* never fires */
    assert_false(um_loop_timer_armed(&ts[4].t));
    um_loop_timer_start(loop, &ts[5].t, 15); /* re-arming moves it: 25 -> 15 */
    uint64_t start = um_loop_now(loop);
    assert_int_equal(um_loop_run(loop), UM_OK);
    static const int want[] = {1, 3, 5, 2, 0};
    order_is(want, 5);
    assert_true(um_loop_now(loop) >= start + 30);
    for (int i = 0; i < 6; i++)
        assert_false(um_loop_timer_armed(&ts[i].t));
}

/* ---------------------------------------------------------------- stop and restart */

static void on_stop_task(struct um_task *t)
{
    (void)t;
    seen(1);
    um_loop_stop(loop);
}

static void test_stop_and_restart(void **state)
{
    (void)state;
    struct um_task t = {.cb = on_stop_task};
    um_loop_defer(loop, &t);
    assert_int_equal(um_loop_run(loop), UM_OK);
    assert_int_equal(num_order, 1);
    /* The loop runs again, until the next stop. */
    um_loop_defer(loop, &t);
    assert_int_equal(um_loop_run(loop), UM_OK);
    assert_int_equal(num_order, 2);
    struct id_timer it = {.t.cb = on_id_timer, .id = 7, .stop = true};
    um_loop_timer_start(loop, &it.t, 1);
    assert_int_equal(um_loop_run(loop), UM_OK);
    static const int want[] = {1, 1, 7};
    order_is(want, 3);
    /* A stop while it does not run: the next run returns at once. */
    um_loop_stop(loop);
    assert_int_equal(um_loop_run(loop), UM_OK);
    assert_int_equal(num_order, 3);
}

/* ---------------------------------------------------------------- deferred tasks */

struct id_task {
    struct um_task t;
    int id;
    struct um_task *then; /* deferred when this one runs */
};

static void on_id_task(struct um_task *t)
{
    struct id_task *it = (struct id_task *)t;
    seen(it->id);
    if (it->then)
        um_loop_defer(loop, it->then);
}

struct deferring_io {
    struct um_io io;
    struct id_task *task;
};

static void on_deferring_io(struct um_io *io, uint32_t events)
{
    struct deferring_io *d = (struct deferring_io *)io;
    assert_true(events & EPOLLIN);
    char b[16];
    assert_true(read(io->fd, b, sizeof b) > 0);
    seen(0);
    um_loop_defer(loop, &d->task->t);
    um_loop_defer(loop, &d->task->t); /* queued once */
    assert_int_equal(num_order, 1);    /* not inside the caller's stack */
    seen(1);
}

static void test_defer_runs_after_the_events(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    struct id_task second = {.t.cb = on_id_task, .id = 3};
    struct id_task first = {.t.cb = on_id_task, .id = 2, .then = &second.t};
    struct deferring_io d = {.io.cb = on_deferring_io, .task = &first};
    assert_int_equal(um_loop_io_set(loop, &d.io, p[0], EPOLLIN), UM_OK);
    assert_int_equal(write(p[1], "x", 1), 1);
    assert_int_equal(um_loop_run_once(loop, 1000), UM_OK);
    /* The event, then the task it deferred, then the task that one deferred: one turn. */
    static const int want[] = {0, 1, 2, 3};
    order_is(want, 4);
    /* Watching stops with events 0: the next write calls nothing. */
    assert_int_equal(um_loop_io_set(loop, &d.io, p[0], 0), UM_OK);
    assert_int_equal(write(p[1], "x", 1), 1);
    assert_int_equal(um_loop_run_once(loop, 0), UM_OK);
    assert_int_equal(num_order, 4);
    close(p[0]);
    close(p[1]);
}

/* ---------------------------------------------------------------- posted tasks */

static struct id_task posted = {.t.cb = on_stop_task};

static void *poster(void *arg)
{
    (void)arg;
    usleep(50 * 1000);
    um_loop_post(loop, &posted.t);
    return NULL;
}

static void test_post_from_another_thread_wakes_the_loop(void **state)
{
    (void)state;
    /* A timer far away: only the post can end the wait early. */
    struct id_timer far = {.t.cb = on_id_timer, .id = 9, .stop = true};
    um_loop_timer_start(loop, &far.t, 60 * 1000);
    pthread_t th;
    uint64_t start = monotonic_ms();
    assert_int_equal(pthread_create(&th, NULL, poster, NULL), 0);
    assert_int_equal(um_loop_run(loop), UM_OK);
    uint64_t took = monotonic_ms() - start;
    pthread_join(th, NULL);
    static const int want[] = {1};
    order_is(want, 1);
    /* Woken by the post, not by the loop's one-second bound on a wait. */
    if (took >= 900)
        fail_msg("the posted task ran after %llu ms", (unsigned long long)took);
    um_loop_timer_stop(loop, &far.t);

    /* A task withdrawn before the loop ran it never runs. */
    struct id_task t = {.t.cb = on_id_task, .id = 5};
    um_loop_post(loop, &t.t);
    um_loop_unpost(loop, &t.t);
    assert_int_equal(um_loop_run_once(loop, 10), UM_OK);
    assert_int_equal(num_order, 1);
    /* Posted twice before it runs: it runs once. */
    um_loop_post(loop, &t.t);
    um_loop_post(loop, &t.t);
    assert_int_equal(um_loop_run_once(loop, 1000), UM_OK);
    static const int want2[] = {1, 5};
    order_is(want2, 2);
}

/* A timer that posts a task to its own loop, as a fill wakes a reader of its worker. */
struct posting_timer {
    struct um_timer t;
    struct id_task *task;
};

static void on_posting_timer(struct um_timer *t)
{
    struct posting_timer *pt = (struct posting_timer *)t;
    seen(3);
    um_loop_post(loop, &pt->task->t);
}

static void test_post_from_the_loops_own_thread_runs_this_turn(void **state)
{
    (void)state;
    struct id_task task = {.t.cb = on_id_task, .id = 4};
    struct posting_timer pt = {.t.cb = on_posting_timer, .task = &task};
    um_loop_timer_start(loop, &pt.t, 0);
    assert_int_equal(um_loop_run_once(loop, 1000), UM_OK);
    /* The task ran in the turn it was posted in, after the timer. */
    static const int want[] = {3, 4};
    order_is(want, 2);
    /* And the loop's eventfd was not written: the next turn waits its whole bound. */
    uint64_t start = monotonic_ms();
    assert_int_equal(um_loop_run_once(loop, 60), UM_OK);
    uint64_t took = monotonic_ms() - start;
    if (took < 50)
        fail_msg("the turn after a local post was woken after %llu ms", (unsigned long long)took);
    assert_int_equal(num_order, 2);
    /* Withdrawn after a local post: it never runs. */
    um_loop_timer_start(loop, &pt.t, 0);
    assert_int_equal(um_loop_poll(loop, 1000), UM_OK);
    um_loop_run_timers(loop);
    um_loop_unpost(loop, &task.t);
    um_loop_run_deferred(loop);
    static const int want2[] = {3, 4, 3};
    order_is(want2, 3);
}

/* ---------------------------------------------------------------- on_stop */

static void test_on_stop_runs_in_queued_order(void **state)
{
    (void)state;
    struct id_task ts[3];
    memset(ts, 0, sizeof ts);
    for (int i = 0; i < 3; i++) {
        ts[i].t.cb = on_id_task;
        ts[i].id = 10 + i;
        um_loop_on_stop(loop, &ts[i].t);
    }
    assert_int_equal(um_loop_run_once(loop, 0), UM_OK);
    assert_int_equal(num_order, 0); /* not before the owner stops the loop */
    um_loop_run_on_stop(loop);
    static const int want[] = {10, 11, 12};
    order_is(want, 3);
    um_loop_run_on_stop(loop); /* each once */
    assert_int_equal(num_order, 3);
    /* Those not run yet run when the loop is destroyed. */
    um_loop_on_stop(loop, &ts[0].t);
    um_loop_destroy(loop);
    loop = um_loop_create();
    static const int want2[] = {10, 11, 12, 10};
    order_is(want2, 4);
}

/* ---------------------------------------------------------------- timeout queues */

struct id_entry {
    struct um_tq_entry e;
    int id;
    struct um_tq *again; /* armed in this queue again when it expires (once) */
};

static void on_expire(struct um_tq *q, struct um_tq_entry *e)
{
    (void)q;
    struct id_entry *ie = (struct id_entry *)e;
    assert_false(um_tq_armed(e));
    seen(ie->id);
    if (ie->again) {
        struct um_tq *to = ie->again;
        ie->again = NULL;
        um_tq_arm(to, e);
    }
}

static void test_timeout_queues_expire_in_order(void **state)
{
    (void)state;
    struct um_tq now_q, later_q;
    um_loop_tq_init(loop, &now_q, 0, on_expire);
    um_loop_tq_init(loop, &later_q, 20, on_expire);
    struct id_entry es[5];
    memset(es, 0, sizeof es);
    for (int i = 0; i < 5; i++)
        es[i].id = i;
    um_tq_arm(&later_q, &es[0].e);
    um_tq_arm(&now_q, &es[1].e);
    um_tq_arm(&now_q, &es[2].e);
    um_tq_arm(&now_q, &es[3].e);
    um_tq_arm(&now_q, &es[4].e);
    um_tq_disarm(&es[2].e);        /* never expires */
    um_tq_disarm(&es[2].e);        /* disarming twice is nothing */
    um_tq_arm(&now_q, &es[1].e);   /* re-arming moves it to the end */
    es[3].again = &later_q;        /* expires, then waits in later_q behind 0 */
    assert_true(um_tq_armed(&es[0].e));
    assert_false(um_tq_armed(&es[2].e));

    assert_int_equal(um_loop_run_once(loop, 0), UM_OK);
    static const int want[] = {3, 4, 1};
    order_is(want, 3);
    assert_true(um_tq_armed(&es[3].e));

    /* The loop waits for later_q's head by itself. */
    uint64_t start = um_loop_now(loop);
    while (num_order < 5)
        assert_int_equal(um_loop_run_once(loop, -1), UM_OK);
    static const int want2[] = {3, 4, 1, 0, 3};
    order_is(want2, 5);
    assert_true(um_loop_now(loop) >= start + 20);

    /* A queue's duration applies to entries armed after it changed. */
    later_q.duration_ms = 0;
    um_tq_arm(&later_q, &es[2].e);
    assert_int_equal(um_loop_run_once(loop, 0), UM_OK);
    static const int want3[] = {3, 4, 1, 0, 3, 2};
    order_is(want3, 6);

    /* Disposing disarms what is left. */
    um_tq_arm(&now_q, &es[4].e);
    um_loop_tq_dispose(&now_q);
    assert_false(um_tq_armed(&es[4].e));
    um_loop_tq_dispose(&later_q);
    assert_int_equal(um_loop_run_once(loop, 0), UM_OK);
    assert_int_equal(num_order, 6);
}

/* Every module's slot in the worker context gets an index of its own, the same at every
 * call, and two slots keep two states in one context. */
static void test_module_slots_are_distinct(void **state)
{
    (void)state;
    um_modules_init();
    bool seen[UM_CONTEXT_MAX_SLOTS] = {false};
    size_t n = 0;
    for (size_t m = 0; um_modules[m]; m++) {
        assert_non_null(um_modules[m]->name);
        for (size_t s = 0; um_modules[m]->slots && um_modules[m]->slots[s]; s++) {
            unsigned i = um_context_slot_index(um_modules[m]->slots[s]);
            assert_true(i < UM_CONTEXT_MAX_SLOTS);
            assert_false(seen[i]);
            seen[i] = true;
            n++;
            assert_int_equal(um_context_slot_index(um_modules[m]->slots[s]), i);
            assert_non_null(um_modules[m]->slots[s]->stop); /* its state goes with the worker */
        }
    }
    assert_int_equal(n, 9); /* cache, curl, h1, h2, static, cgi, access log, l2, access */

    static struct um_context_slot a = {.name = "a"}, b = {.name = "b"};
    struct um_context ctx;
    um_context_init(&ctx, loop, 0);
    int x, y;
    assert_null(um_context_get(&ctx, &a));
    um_context_set(&ctx, &a, &x);
    um_context_set(&ctx, &b, &y);
    assert_ptr_equal(um_context_get(&ctx, &a), &x);
    assert_ptr_equal(um_context_get(&ctx, &b), &y);
    um_context_set(&ctx, &a, NULL);
    um_context_set(&ctx, &b, NULL);
    um_context_dispose(&ctx);
}

/* um_context_stop: the stops of the slots holding state, in the order they were first
 * set (a layer before the origin it wraps), including state a stop made again. */
static char stopped[8];
static size_t num_stopped;
static struct um_context_slot slot_a, slot_b, slot_c;
static int again_state;

static void note_stop(struct um_context *ctx, void *state)
{
    char tag = *(char *)state;
    stopped[num_stopped++] = tag;
    /* b's stop wakes a, which makes its state again (as a fill cancelled into its origin
     * may): that state must be stopped too. */
    if (tag == 'b' && um_context_get(ctx, &slot_a) == NULL)
        um_context_set(ctx, &slot_a, &again_state);
}

static void test_context_stop_runs_in_first_set_order(void **state)
{
    (void)state;
    slot_a = (struct um_context_slot){.name = "a", .stop = note_stop};
    slot_b = (struct um_context_slot){.name = "b", .stop = note_stop};
    slot_c = (struct um_context_slot){.name = "c", .stop = note_stop};
    static char a = 'a', b = 'b', c = 'c';
    again_state = 'A';
    (void)um_context_slot_index(&slot_a); /* indexes a < b < c */
    (void)um_context_slot_index(&slot_b);
    (void)um_context_slot_index(&slot_c);
    struct um_context ctx;
    um_context_init(&ctx, loop, 0);
    um_context_set(&ctx, &slot_c, &c); /* c first, though its index comes last */
    um_context_set(&ctx, &slot_a, &a);
    um_context_set(&ctx, &slot_b, &b);
    um_context_stop(&ctx);
    assert_int_equal(num_stopped, 4);
    assert_memory_equal(stopped, "cabA", 4);
    assert_null(um_context_get(&ctx, &slot_a));
    assert_null(um_context_get(&ctx, &slot_b));
    assert_null(um_context_get(&ctx, &slot_c));
    um_context_dispose(&ctx); /* asserts every slot empty */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_timers_fire_in_deadline_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_and_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_defer_runs_after_the_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_from_another_thread_wakes_the_loop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_post_from_the_loops_own_thread_runs_this_turn, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_on_stop_runs_in_queued_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_queues_expire_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_module_slots_are_distinct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_stop_runs_in_first_set_order, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
