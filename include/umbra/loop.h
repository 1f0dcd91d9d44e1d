/* SPDX-License-Identifier: BSD-2-Clause */
/* The event loop (src/loop/): the floor every worker runs on.
 *
 * A loop owns an epoll set, a heap of one-shot timers, the tasks deferred to the end of
 * the current turn, the tasks other threads post to it (under a mutex, with an eventfd
 * to wake it), the tasks to run when its owner stops it, and timeout queues (one per
 * fixed duration, O(1) to arm, disarm and expire). The time is read once per turn.
 *
 * Threads: a loop is made and destroyed by its owner while it does not run; everything
 * else is called on the one thread that runs it, except um_loop_post, which any thread
 * may call. Nothing here blocks but the wait for events, nor takes a lock but post's. */
#ifndef UMBRA_LOOP_H
#define UMBRA_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "umbra/common.h"

struct um_loop;

/* A watched descriptor. Embed it; zero-initialise it and set cb before um_loop_io_set. */
struct um_io {
    int fd;
    uint32_t _events;
    void (*cb)(struct um_io *io, uint32_t events); /* EPOLLIN, EPOLLOUT, EPOLLERR, ... */
};

/* A one-shot timer. Embed it; zero-initialise it first. */
struct um_timer {
    uint64_t _deadline;
    size_t _index; /* position in the heap + 1; 0: not armed */
    void (*cb)(struct um_timer *t);
};

/* A deferred call, run after this turn's events (never inside the caller's stack). */
struct um_task {
    struct um_task *_next;
    int _queued;
    void (*cb)(struct um_task *t);
};

/* A timeout queue: entries that all wait the same duration, so that appending keeps the
 * queue sorted by deadline. Embed it; um_loop_tq_init registers it with a loop. */
struct um_tq_entry {
    struct um_tq_entry *_prev, *_next;
    struct um_tq *_queue; /* NULL: not armed */
    uint64_t _deadline;
};

struct um_tq {
    /* How long an entry armed from now on waits, in milliseconds. It may change; entries
     * already armed keep their deadline. */
    uint64_t duration_ms;
    /* Called for an expired entry, already disarmed (it may be armed again). */
    void (*cb)(struct um_tq *q, struct um_tq_entry *e);
    struct um_tq_entry *_head, *_tail;
    struct um_tq *_next; /* the loop's queues */
    struct um_loop *_loop;
};

/* ---------------------------------------------------------------- life */

/* Makes a loop (its epoll set and wake-up eventfd) and reads the time. Never NULL: a
 * loop that cannot get descriptors is a crash. Free it with um_loop_destroy. */
struct um_loop *um_loop_create(void);

/* Runs the on_stop tasks not run yet, then frees l. Descriptors still watched are not
 * closed; timers and timeout queues still armed are forgotten. l must not be running. */
void um_loop_destroy(struct um_loop *l);

/* ---------------------------------------------------------------- running */

/* Runs turns until um_loop_stop. Returns UM_OK when stopped (l may run again), UM_ERR
 * when waiting for events failed (errno set). */
int um_loop_run(struct um_loop *l);

/* Makes um_loop_run return after the current turn (called while l does not run: the
 * next um_loop_run returns at once). */
void um_loop_stop(struct um_loop *l);

/* One turn: um_loop_poll, then timers, deferred tasks, timeout queues, deferred tasks
 * again. max_wait_ms < 0: as long as nothing is due. Returns what um_loop_poll did. */
int um_loop_run_once(struct um_loop *l, int max_wait_ms);

/* The phases of a turn, for an owner that does work of its own between them (the worker
 * serves its connections with leftover work between the tasks and the timeouts).
 *
 * um_loop_poll waits for events, at most max_wait_ms (< 0: no limit of the caller's), no
 * longer than until the first timer or timeout queue entry is due, not at all when a
 * task is deferred, and never more than a second; then reads the time and calls the
 * callbacks of the descriptors that are ready (posted tasks run here too). Returns UM_OK,
 * or UM_ERR when epoll_wait failed (errno set; EINTR is not a failure). */
int um_loop_poll(struct um_loop *l, int max_wait_ms);
/* Fires the timers that are due, earliest first. */
void um_loop_run_timers(struct um_loop *l);
/* Runs the tasks posted from this loop's own thread, then the deferred tasks and the ones
 * they defer, for a bounded number of rounds (what is left runs next turn, which then
 * does not wait). */
void um_loop_run_deferred(struct um_loop *l);
/* Expires the due entries of every timeout queue. */
void um_loop_run_timeouts(struct um_loop *l);
/* Runs the tasks queued with um_loop_on_stop, in their order, each once. Its owner calls
 * it when it stops the loop for good, after closing what it owns. */
void um_loop_run_on_stop(struct um_loop *l);

/* ---------------------------------------------------------------- time */

/* Milliseconds of CLOCK_MONOTONIC, read once per loop turn. */
uint64_t um_loop_now(const struct um_loop *l);

/* Seconds since the epoch (CLOCK_REALTIME), read once per loop turn. */
time_t um_loop_wall(const struct um_loop *l);

/* ---------------------------------------------------------------- services */

/* Watches fd for events (the EPOLLIN/EPOLLOUT/EPOLLRDHUP/EPOLLET bits of epoll); events 0
 * stops watching. Returns UM_OK or UM_ERR (errno set). Closing fd stops it only when no
 * copy of the descriptor lives on: a child being spawned (CGI) holds one until its exec,
 * so call this with events 0 before closing a descriptor whose um_io is then freed. */
int um_loop_io_set(struct um_loop *l, struct um_io *io, int fd, uint32_t events);

/* Arms t to fire once after ms milliseconds (re-arming moves it). */
void um_loop_timer_start(struct um_loop *l, struct um_timer *t, uint64_t ms);
void um_loop_timer_stop(struct um_loop *l, struct um_timer *t);
static inline bool um_loop_timer_armed(const struct um_timer *t)
{
    return t->_index != 0;
}

/* Queues t to run at the end of the current loop turn (once, however often queued). */
void um_loop_defer(struct um_loop *l, struct um_task *t);

/* From any thread: queues t to run on loop l's thread (once, however often posted before
 * it runs). From another thread the loop is woken; from l's own, during its turn, t runs
 * with this turn's deferred tasks. */
void um_loop_post(struct um_loop *l, struct um_task *t);

/* On l's own thread: withdraws t if it is still queued by um_loop_post, so that its owner
 * may free it. */
void um_loop_unpost(struct um_loop *l, struct um_task *t);

/* Queues t to run once when the loop stops (um_loop_run_on_stop), for state kept per
 * loop. Tasks run in the order they were queued. */
void um_loop_on_stop(struct um_loop *l, struct um_task *t);

/* ---------------------------------------------------------------- timeout queues */

/* Registers q with l: its entries expire in the loop's turns (the queues in the order
 * they were registered). */
void um_loop_tq_init(struct um_loop *l, struct um_tq *q, uint64_t duration_ms,
                     void (*cb)(struct um_tq *q, struct um_tq_entry *e));
/* Disarms every entry of q and takes q out of its loop. */
void um_loop_tq_dispose(struct um_tq *q);
/* Arms e in q, due q->duration_ms from the time of this turn (an armed e moves, from
 * whichever queue, to the end of q). */
void um_tq_arm(struct um_tq *q, struct um_tq_entry *e);
/* Disarms e; nothing when it is not armed. */
void um_tq_disarm(struct um_tq_entry *e);
static inline bool um_tq_armed(const struct um_tq_entry *e)
{
    return e->_queue != NULL;
}

#endif
