/* The event loop of the calling worker thread, as origins see it: watch a socket, set a
 * timer, run a task at the end of the loop turn. Every function must be called on the
 * worker thread that owns the loop; nothing here blocks or locks. */
#ifndef UMBRA_LOOP_H
#define UMBRA_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "umbra/common.h"

struct um_loop;

/* A watched descriptor. Embed it; set cb before um_loop_io_set. */
struct um_io {
    int _kind; /* private */
    int fd;
    uint32_t _events;
    void (*cb)(struct um_io *io, uint32_t events); /* EPOLLIN, EPOLLOUT, EPOLLERR, ... */
};

/* A one-shot timer. Embed it; zero-initialise it (or call um_loop_timer_init) first. */
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

/* The loop of the calling worker thread; NULL on other threads. */
struct um_loop *um_loop_current(void);

/* Milliseconds of CLOCK_MONOTONIC, read once per loop turn. */
uint64_t um_loop_now(const struct um_loop *l);

/* Watches fd for events (level-triggered EPOLLIN/EPOLLOUT bits); events 0 stops watching.
 * Returns UM_OK or UM_ERR (errno set). */
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
 * it runs). The loop is woken. */
void um_loop_post(struct um_loop *l, struct um_task *t);

/* On l's own thread: withdraws t if it is still queued by um_loop_post, so that its owner
 * may free it. */
void um_loop_unpost(struct um_loop *l, struct um_task *t);

/* Queues t to run once when the loop stops, after its connections are closed (for state
 * that an origin keeps per worker). Tasks run in the order they were queued. */
void um_loop_on_stop(struct um_loop *l, struct um_task *t);

#endif
