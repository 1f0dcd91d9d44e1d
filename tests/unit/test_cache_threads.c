/* Concurrency test for the cache store (run under ThreadSanitizer in CI).
 *
 * Worker threads hammer a small key space with a small memory cap for a bounded time:
 * lookup_or_insert (and then fill, or follow the fill as a reader), plain lookups,
 * unlink, purge, expiry sweeps; a streaming thread fills objects slowly so that readers
 * on other threads wait on them, woken through on_progress -> their thread's eventfd;
 * a monitor thread watches the memory counter; the cleaner thread runs throughout.
 *
 * Invariants checked: every byte a reader sees is the byte the filler wrote; a COMPLETE
 * body has its full length; memory never passes the cap; a waiting reader is always woken
 * (a wait that times out fails the test); everything is freed at the end (destroy asserts
 * that, and ASan checks for leaks and use after free of the heap-allocated waiters). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "umbra/cache.h"

#define NWORKERS 6
#define NKEYS 16
#define NSTREAM 4
#define CAP (512u << 10)
#define RUN_SECONDS 2.0
#define WAKE_TIMEOUT_MS 20000

static struct um_cache *cache;
static atomic_bool stop;
static _Atomic int64_t clock_now = 1000;

static int64_t now_cb(void *arg)
{
    return atomic_load(&clock_now);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static char body_byte(uint32_t seed, size_t i)
{
    return (char)(seed * 131u + i * 31u + (i >> 9));
}

static size_t body_len(uint32_t seed)
{
    return 1 + (seed * 2654435761u) % 40000;
}

struct meta {
    uint32_t seed;
};

/* Matches the variant tag "v0" / "v1". */
static bool match_tag(const struct um_cache_obj *o, void *arg)
{
    um_str t = um_cache_obj_tag(o);
    return t.len == 2 && memcmp(t.base, arg, 2) == 0;
}

struct stats {
    unsigned long fills, fills_aborted, reads_complete, reads_partial, waits, nospace, unlinks,
        purges, sweeps, stream_reads;
};

struct waiter_box {
    struct um_cache_waiter w;
    int efd;
    unsigned long calls;
};

static void on_progress(struct um_cache_waiter *w)
{
    /* On the filler's thread: only thread-safe work, as the proxy's loop mailbox will do. */
    struct waiter_box *b = (struct waiter_box *)w;
    b->calls++;
    uint64_t one = 1;
    ssize_t k = write(b->efd, &one, sizeof(one));
    (void)k;
}

struct worker {
    pthread_t th;
    int id;
    uint64_t rng;
    int efd;
    struct stats st;
    int failed;
};

#define CHECK(w, cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            (w)->failed = 1;                                                                       \
            atomic_store(&stop, true);                                                             \
        }                                                                                          \
    } while (0)

/* Follows o to its end (or its abort, or a random give-up), checking every byte. seed:
 * the expected pattern, or UINT32_MAX to take it from the object's meta. */
static void follow(struct worker *w, struct um_cache_obj *o, uint32_t seed, bool stream)
{
    struct waiter_box *b = malloc(sizeof(*b)); /* freed right after unwait */
    um_cache_waiter_init(&b->w, on_progress);
    b->efd = w->efd;
    b->calls = 0;
    struct um_cache_cursor cur;
    um_cache_cursor_init(&cur, o);
    bool head = false;
    size_t len = 0;
    for (;;) {
        if (!head) {
            um_str meta;
            if (um_cache_obj_head(o, &meta, NULL)) {
                CHECK(w, meta.len == sizeof(struct meta));
                uint32_t s = ((const struct meta *)(const void *)meta.base)->seed;
                if (seed != UINT32_MAX) CHECK(w, s == seed);
                seed = s;
                len = body_len(seed);
                head = true;
            }
        }
        if (head) {
            struct iovec iov[4];
            bool complete = false;
            size_t n = um_cache_obj_read(o, &cur, iov, 1 + rnd(&w->rng) % 4, &complete);
            bool all = true; /* consumed every slice returned */
            for (size_t i = 0; i < n; i++) {
                const char *p = iov[i].iov_base;
                for (size_t k = 0; k < iov[i].iov_len; k++) {
                    if (p[k] != body_byte(seed, cur.off + k)) {
                        CHECK(w, p[k] == body_byte(seed, cur.off + k));
                        goto out;
                    }
                }
                /* Sometimes only part of a slice, as a short write would. */
                size_t take = iov[i].iov_len;
                if (rnd(&w->rng) % 4 == 0) take = take / 2;
                um_cache_cursor_advance(&cur, take);
                if (take < iov[i].iov_len) {
                    all = false;
                    break;
                }
            }
            CHECK(w, cur.off <= len);
            if (complete && all) {
                CHECK(w, cur.off == len);
                w->st.reads_complete++;
                if (stream) w->st.stream_reads++;
                break;
            }
            if (n > 0) continue;
        }
        enum um_cache_state st = um_cache_obj_state(o);
        if (st == UM_CACHE_ABORTED || atomic_load(&stop) || rnd(&w->rng) % 200 == 0) {
            w->st.reads_partial++;
            break;
        }
        if (!um_cache_obj_wait(o, &cur, &b->w)) continue;
        w->st.waits++;
        struct pollfd pfd = {.fd = w->efd, .events = POLLIN};
        int r = poll(&pfd, 1, WAKE_TIMEOUT_MS);
        CHECK(w, r == 1); /* a lost wake-up */
        if (r != 1) break;
        uint64_t cnt;
        ssize_t k = read(w->efd, &cnt, sizeof(cnt));
        (void)k;
    }
out:
    um_cache_obj_unwait(o, &b->w);
    free(b);
}

/* Fills o with seed's body in random pieces, now and then pausing so that readers attach
 * and wait; sometimes aborts half way. */
static void fill(struct worker *w, struct um_cache_obj *o, uint32_t seed, bool slow)
{
    struct meta m = {.seed = seed};
    size_t len = body_len(seed);
    w->st.fills++;
    if (rnd(&w->rng) % 3 == 0 && um_cache_obj_expect(o, len) != UM_OK) goto aborted;
    if (um_cache_obj_set_head(o, &m, sizeof(m), "HTTP/1.1 200 OK\r\n\r\n", 19) != UM_OK)
        goto aborted;
    char buf[5000];
    bool abort_midway = rnd(&w->rng) % 25 == 0;
    for (size_t off = 0; off < len;) {
        size_t n = 1 + rnd(&w->rng) % sizeof(buf);
        if (n > len - off) n = len - off;
        for (size_t k = 0; k < n; k++)
            buf[k] = body_byte(seed, off + k);
        if (um_cache_obj_append(o, buf, n) != UM_OK) goto aborted;
        CHECK(w, um_cache_memory_used(cache) <= CAP);
        off += n;
        if (abort_midway && off > len / 2) {
            um_cache_obj_finish(o, false);
            goto aborted;
        }
        if (slow)
            usleep(50 + rnd(&w->rng) % 200);
        else if (rnd(&w->rng) % 4 == 0)
            sched_yield();
    }
    um_cache_obj_set_stale_until(o, atomic_load(&clock_now) + (int64_t)(rnd(&w->rng) % 8));
    um_cache_obj_finish(o, true);
    CHECK(w, um_cache_obj_state(o) == UM_CACHE_COMPLETE);
    return;
aborted:
    w->st.fills_aborted++;
    um_cache_obj_finish(o, true); /* a no-op after an abort */
    CHECK(w, um_cache_obj_state(o) == UM_CACHE_ABORTED);
    CHECK(w, !um_cache_obj_linked(o));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char key[32];
    while (!atomic_load(&stop)) {
        unsigned op = (unsigned)(rnd(&w->rng) % 100);
        unsigned k = (unsigned)(rnd(&w->rng) % NKEYS), v = (unsigned)(rnd(&w->rng) % 2);
        char tag[3] = {'v', (char)('0' + v), 0};
        uint32_t seed = k * 2 + v;
        snprintf(key, sizeof(key), "/t/%u", k);
        struct um_cache_obj *o = NULL;
        if (op < 55) {
            enum um_cache_result r = um_cache_lookup_or_insert(cache, (um_str){key, strlen(key)},
                                                               match_tag, tag, tag, 2, &o);
            if (r == UM_CACHE_CREATED)
                fill(w, o, seed, rnd(&w->rng) % 8 == 0);
            else if (r == UM_CACHE_FOUND)
                follow(w, o, seed, false);
            else
                w->st.nospace++;
        } else if (op < 70) {
            snprintf(key, sizeof(key), "/s/%u", k % NSTREAM);
            o = um_cache_lookup(cache, (um_str){key, strlen(key)}, NULL, NULL);
            if (o != NULL) follow(w, o, UINT32_MAX, true);
        } else if (op < 82) {
            o = um_cache_lookup(cache, (um_str){key, strlen(key)}, match_tag, tag);
            if (o != NULL) {
                um_cache_unlink(cache, o);
                CHECK(w, !um_cache_obj_linked(o));
                w->st.unlinks++;
                follow(w, o, seed, false); /* still readable */
            }
        } else if (op < 90) {
            um_cache_purge(cache, (um_str){key, strlen(key)});
            w->st.purges++;
        } else if (op < 93) {
            atomic_fetch_add(&clock_now, 1);
            um_cache_clean_now(cache);
            w->st.sweeps++;
        } else {
            /* Hold a reference across some other work, so eviction meets busy objects. */
            o = um_cache_lookup(cache, (um_str){key, strlen(key)}, match_tag, tag);
            if (o != NULL) {
                usleep(100);
                follow(w, o, seed, false);
            }
        }
        if (o != NULL) um_cache_obj_unref(o);
        CHECK(w, um_cache_memory_used(cache) <= CAP);
    }
    return NULL;
}

/* Slow fills of a few keys that readers elsewhere follow and wait on; each new generation
 * replaces the previous one (insert the new, unlink the old once complete). */
static void *stream_main(void *arg)
{
    struct worker *w = arg;
    struct um_cache_obj *prev[NSTREAM] = {0};
    char key[32];
    for (uint32_t n = 0; !atomic_load(&stop); n++) {
        unsigned slot = n % NSTREAM;
        snprintf(key, sizeof(key), "/s/%u", slot);
        struct um_cache_obj *o = um_cache_insert(cache, (um_str){key, strlen(key)}, NULL, 0);
        if (o == NULL) {
            w->st.nospace++;
            usleep(100);
            continue;
        }
        fill(w, o, 100000 + n, true);
        if (prev[slot] != NULL) {
            um_cache_unlink(cache, prev[slot]);
            um_cache_obj_unref(prev[slot]);
        }
        prev[slot] = o;
    }
    for (unsigned i = 0; i < NSTREAM; i++)
        if (prev[i] != NULL) um_cache_obj_unref(prev[i]);
    return NULL;
}

static atomic_size_t max_seen;

static void *monitor_main(void *arg)
{
    while (!atomic_load(&stop)) {
        size_t u = um_cache_memory_used(cache);
        if (u > atomic_load(&max_seen)) atomic_store(&max_seen, u);
        sched_yield();
    }
    return NULL;
}

static void test_hammer(void **state)
{
    struct um_cache_opts o = {
        .memory_cap = CAP,
        .max_object = 48 << 10,
        .shards = 4,
        .clean_interval = 1,
        .high_water_pct = 80,
        .low_water_pct = 60,
        .now = now_cb,
    };
    cache = um_cache_create(&o);
    um_cache_start_cleaner(cache);
    atomic_store(&stop, false);

    struct worker ws[NWORKERS + 1];
    memset(ws, 0, sizeof(ws));
    for (int i = 0; i <= NWORKERS; i++) {
        ws[i].id = i;
        ws[i].rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) ^ (uint64_t)time(NULL);
        ws[i].efd = eventfd(0, EFD_CLOEXEC);
        assert_true(ws[i].efd >= 0);
    }
    pthread_t mon;
    assert_int_equal(pthread_create(&mon, NULL, monitor_main, NULL), 0);
    assert_int_equal(pthread_create(&ws[NWORKERS].th, NULL, stream_main, &ws[NWORKERS]), 0);
    for (int i = 0; i < NWORKERS; i++)
        assert_int_equal(pthread_create(&ws[i].th, NULL, worker_main, &ws[i]), 0);

    double t0 = mono();
    while (!atomic_load(&stop) && mono() - t0 < RUN_SECONDS)
        usleep(10000);
    atomic_store(&stop, true);
    for (int i = 0; i <= NWORKERS; i++)
        pthread_join(ws[i].th, NULL);
    pthread_join(mon, NULL);
    /* Before the final counts: mid-eviction, the cleaner holds a reference of its own. */
    um_cache_stop_cleaner(cache);

    struct stats tot = {0};
    int failed = 0;
    for (int i = 0; i <= NWORKERS; i++) {
        failed |= ws[i].failed;
        tot.fills += ws[i].st.fills;
        tot.fills_aborted += ws[i].st.fills_aborted;
        tot.reads_complete += ws[i].st.reads_complete;
        tot.reads_partial += ws[i].st.reads_partial;
        tot.waits += ws[i].st.waits;
        tot.nospace += ws[i].st.nospace;
        tot.unlinks += ws[i].st.unlinks;
        tot.purges += ws[i].st.purges;
        tot.sweeps += ws[i].st.sweeps;
        tot.stream_reads += ws[i].st.stream_reads;
        close(ws[i].efd);
    }
    struct um_cache_stats cs;
    um_cache_stats(cache, &cs);
    print_message("fills %lu (aborted %lu), reads %lu complete / %lu partial (%lu of streams), "
                  "waits %lu, nospace %lu, unlinks %lu, purges %lu, sweeps %lu; "
                  "evictions %llu, expired %llu, max memory %zu of %u\n",
                  tot.fills, tot.fills_aborted, tot.reads_complete, tot.reads_partial,
                  tot.stream_reads, tot.waits, tot.nospace, tot.unlinks, tot.purges, tot.sweeps,
                  (unsigned long long)cs.evictions, (unsigned long long)cs.expired,
                  atomic_load(&max_seen), CAP);
    assert_false(failed);
    assert_true(atomic_load(&max_seen) <= CAP);
    assert_true(cs.memory_used <= CAP);
    /* The run exercised what it is meant to. */
    assert_true(tot.fills > 50);
    assert_true(tot.reads_complete > 50);
    assert_true(tot.waits > 10);
    assert_true(tot.stream_reads > 0);
    assert_true(cs.evictions > 0);
    /* Nobody holds anything now: destroy checks that every object is freed. */
    assert_int_equal(cs.objects_allocated, cs.objects);
    um_cache_destroy(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hammer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
