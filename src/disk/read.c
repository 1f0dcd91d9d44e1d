/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk store's reads: the reader threads and the read on the caller's thread (store.c's note: Reads). */
#include "store_internal.h"

/* ---------------------------------------------------------------- reads */

static void on_read_done(struct um_task *t)
{
    struct rjob *j = (struct rjob *)t;
    j->cb(j->arg, j->status, j->meta, j->body);
    free(j->buf);
    free(j);
}

/* The checks of a record read into j->buf: UM_OK with j->meta and j->body set, or UM_DONE
 * when it is not the one expected. */
static int check_record(struct um_disk *d, struct rjob *j)
{
    struct um__disk_rec h;
    memcpy(&h, j->buf, sizeof(h));
    if (h.magic != UM__DISK_REC_MAGIC || h.version != UM__DISK_VERSION || h.flags != 0 ||
        h.store_id != d->store_id || h.key_hi != j->hi || h.key_lo != j->lo ||
        h.pos != j->pos || UM__DISK_REC_LEN(h.meta_len, h.body_len) != j->len)
        return UM_DONE;
    uint64_t check;
    memcpy(&check, j->buf + j->len - 8, 8);
    if (check != XXH3_64bits(j->buf, j->len - 8))
        return UM_DONE;
    j->meta = (um_str){j->buf + sizeof(h), h.meta_len};
    j->body = (um_str){j->buf + sizeof(h) + h.meta_len, h.body_len};
    (void)d;
    return UM_OK;
}

/* UM_OK: j->meta and j->body set; UM_DONE: the record is not the one expected. */
static int read_record(struct um_disk *d, struct rjob *j)
{
    sleep_ms(d->delay_ms);
    j->buf = um_malloc(j->len);
    if (pread_all(d->fd, j->buf, j->len, phys(d, j->pos)) != UM_OK) {
        um_log(UM_LOG_ERR, "disk store %s: read at %llu: %s", d->path,
               (unsigned long long)phys(d, j->pos), strerror(errno));
        return UM_ERR;
    }
    return check_record(d, j);
}

const uint64_t um_disk_read_bounds_us[UM_DISK_READ_BUCKETS] = {10,   50,    100,    500,
                                                               1000, 10000, 100000, 1000000};

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Under d->mu: the counters of a read that ended with r after us microseconds, and a
 * bad record dropped. */
static void read_account(struct um_disk *d, struct rjob *j, int r, uint64_t us)
{
    if (r == UM_OK) {
        d->st.reads++;
        d->st.read_bytes += j->len;
        size_t b = 0;
        while (b < UM_DISK_READ_BUCKETS && us > um_disk_read_bounds_us[b])
            b++;
        d->st.read_us[b]++;
        d->st.read_us_sum += us;
    } else if (r == UM_DONE) {
        /* Bad, unless the cursor (which evicts before it writes) or a newer write took the
         * entry meanwhile: then it is only gone. */
        if (um__disk_index_del(&d->idx, j->hi, j->lo, j->pos + 1)) {
            d->st.checksum_failures++;
            d->changed = true;
            um_log(UM_LOG_WARN, "disk store %s: bad record at %llu dropped", d->path,
                   (unsigned long long)phys(d, j->pos));
        }
    } else {
        d->st.io_errors++;
    }
}

void *um__disk_reader_main(void *arg)
{
    struct um_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->rq_head && !d->closing)
            pthread_cond_wait(&d->rcond, &d->mu);
        struct rjob *j = d->rq_head;
        if (!j)
            break;
        d->rq_head = j->next;
        if (!d->rq_head)
            d->rq_tail = NULL;
        pthread_mutex_unlock(&d->mu);
        int r = read_record(d, j);
        uint64_t us = mono_us() - j->t0;
        pthread_mutex_lock(&d->mu);
        read_account(d, j, r, us);
        pthread_mutex_unlock(&d->mu);
        if (r != UM_OK) {
            free(j->buf);
            j->buf = NULL;
            j->meta = j->body = (um_str){NULL, 0};
        }
        j->status = r;
        um_loop_post(j->loop, &j->task);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

int um_disk_read(struct um_disk *d, struct um_disk_key key, struct um_loop *loop,
                 um_disk_read_cb cb, void *arg)
{
    pthread_mutex_lock(&d->mu);
    const struct um__disk_ent *e = um__disk_index_find(&d->idx, key.hi, key.lo);
    uint64_t pos = e ? e->pos : 0;
    uint32_t len = e ? e->len : 0;
    if (!e || d->closing)
        d->st.read_misses++;
    bool miss = !e || d->closing;
    pthread_mutex_unlock(&d->mu);
    if (miss)
        return UM_DONE;
    struct rjob *j = um_calloc(1, sizeof(*j));
    j->task.cb = on_read_done;
    j->d = d;
    j->hi = key.hi;
    j->lo = key.lo;
    j->pos = pos;
    j->len = len;
    j->loop = loop;
    j->cb = cb;
    j->arg = arg;
    j->t0 = mono_us();
    pthread_mutex_lock(&d->mu);
    if (d->rq_tail)
        d->rq_tail->next = j;
    else
        d->rq_head = j;
    d->rq_tail = j;
    pthread_cond_signal(&d->rcond);
    pthread_mutex_unlock(&d->mu);
    return UM_AGAIN;
}

int um_disk_read_cached(struct um_disk *d, struct um_disk_key key, um_disk_read_cb cb, void *arg)
{
    if (d->delay_ms)
        return UM_AGAIN; /* a slow disk (tests): the threads' way */
    pthread_mutex_lock(&d->mu);
    const struct um__disk_ent *e = um__disk_index_find(&d->idx, key.hi, key.lo);
    struct rjob j = {
        .hi = key.hi, .lo = key.lo, .pos = e ? e->pos : 0, .len = e ? e->len : 0, .t0 = mono_us()};
    bool miss = !e || d->closing;
    uint64_t alen = round_up(j.len, BLOCK);
    if (miss)
        d->st.read_misses++;
    else
        j.buf = um__disk_buf_take(d, alen);
    pthread_mutex_unlock(&d->mu);
    if (miss)
        return UM_DONE;
    /* RWF_NOWAIT: the kernel copies what the page cache holds and never waits for the
     * device; anything short of the whole record goes to the reader threads. */
    struct iovec iov = {j.buf, j.len};
    ssize_t n = preadv2(d->fd, &iov, 1, (off_t)phys(d, j.pos), RWF_NOWAIT);
    int r = n == (ssize_t)j.len ? check_record(d, &j) : UM_AGAIN;
    uint64_t us = mono_us() - j.t0;
    if (r == UM_OK)
        cb(arg, UM_OK, j.meta, j.body);
    /* Counted (a bad record dropped) and the buffer kept, in one critical section. */
    pthread_mutex_lock(&d->mu);
    if (r != UM_AGAIN) read_account(d, &j, r, us);
    um__disk_buf_give(d, j.buf, alen);
    pthread_mutex_unlock(&d->mu);
    return r == UM_OK ? UM_OK : r == UM_AGAIN ? UM_AGAIN : UM_DONE;
}
