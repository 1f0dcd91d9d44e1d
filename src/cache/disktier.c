/* SPDX-License-Identifier: BSD-2-Clause */
/* The disk tier's stores (umbra/disktier.h): opened from cache.disk, picked by key hash,
 * purged, counted. The origin layer that uses them is origin_disk.c. */
#include "disktier_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "umbra/cache.h"
#include "umbra/buf.h"
#include "umbra/config.h"
#include "umbra/log.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

#define STORE_FILE "umbra.store"
#define PURGED_FILE "umbra.purged"

static void store_path(const char *dir, const char *file, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", dir, file);
}

bool um_disk_tier_check(const struct um_config *config, char *err, size_t errlen)
{
    const struct um_cache_conf *cc = um_cache_conf(config);
    for (size_t i = 0; i < cc->num_disks; i++) {
        const struct um_disk_conf *dc = &cc->disks[i];
        struct stat st;
        int r = stat(dc->path, &st);
        if (r != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s:%d: cache.disk: %s: %s", config->file, dc->line, dc->path,
                     r != 0 ? strerror(errno) : "not a directory");
            return false;
        }
        if (access(dc->path, W_OK | X_OK) != 0) {
            snprintf(err, errlen, "%s:%d: cache.disk: %s: not writable (%s)", config->file,
                     dc->line, dc->path, strerror(errno));
            return false;
        }
        char file[4096];
        store_path(dc->path, STORE_FILE, file, sizeof file);
        uint64_t have = 0;
        if (stat(file, &st) == 0) have = (uint64_t)st.st_blocks * 512;
        struct statvfs vfs;
        if (statvfs(dc->path, &vfs) == 0) {
            uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
            if (dc->size > have && dc->size - have > avail) {
                snprintf(err, errlen,
                         "%s:%d: cache.disk: %s: size %llu bytes, but the filesystem has %llu "
                         "bytes free",
                         config->file, dc->line, dc->path, (unsigned long long)dc->size,
                         (unsigned long long)(avail + have));
                return false;
            }
        }
    }
    return true;
}

/* The purge time kept in the first store's directory (and every other one, the newest
 * wins at start). */
static int64_t purged_read(const char *dir)
{
    char file[4096];
    store_path(dir, PURGED_FILE, file, sizeof file);
    FILE *f = fopen(file, "r");
    if (f == NULL) return 0;
    long long v = 0;
    if (fscanf(f, "%lld", &v) != 1) v = 0;
    fclose(f);
    return (int64_t)v;
}

static void purged_write(const char *dir, int64_t when)
{
    char file[4096], tmp[4200];
    store_path(dir, PURGED_FILE, file, sizeof file);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        um_log_err("cache.disk: %s: %s (a purge by prefix or tag may not outlive a restart)", tmp,
                   strerror(errno));
        return;
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld\n", (long long)when);
    bool ok = write(fd, buf, (size_t)n) == n && fdatasync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, file) != 0)
        um_log_err("cache.disk: %s: could not be written (a purge by prefix or tag may not "
                   "outlive a restart)",
                   file);
}

/* The purge writer: writes the newest purge time until the tier closes, the last one
 * included. */
static void *purge_writer_main(void *arg)
{
    struct um_disk_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->to_write == t->written && !t->closing)
            pthread_cond_wait(&t->cond, &t->mu);
        if (t->to_write == t->written) break; /* closing, nothing left */
        int64_t when = t->to_write;
        pthread_mutex_unlock(&t->mu);
        for (size_t i = 0; i < t->n; i++)
            purged_write(t->dirs[i], when);
        pthread_mutex_lock(&t->mu);
        t->written = when;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

struct um_disk_tier *um_disk_tier_open(const struct um_config *config, char *err, size_t errlen)
{
    const struct um_cache_conf *cc = um_cache_conf(config);
    err[0] = '\0';
    if (cc->num_disks == 0) return NULL;
    if (!um_disk_tier_check(config, err, errlen)) return NULL;
    struct um_disk_tier *t = um_calloc(1, sizeof(*t));
    t->stores = um_calloc(cc->num_disks, sizeof(*t->stores));
    t->dirs = um_calloc(cc->num_disks, sizeof(*t->dirs));
    t->max_object = cc->max_object;
    um__disk_admit_init(&t->admit, cc->memory);
    int64_t purged = 0;
    /* A slow disk for the tests (tests/integration/test_disk.py): every I/O of the stores
     * waits this long first. An environment variable, not a setting: no user wants it. */
    const char *delay = getenv("UMBRA_TEST_DISK_DELAY_MS");
    for (size_t i = 0; i < cc->num_disks; i++) {
        const struct um_disk_conf *dc = &cc->disks[i];
        char file[4096];
        store_path(dc->path, STORE_FILE, file, sizeof file);
        struct um_disk_opts o = {
            .path = file,
            .size = dc->size,
            .sync_ms = (uint32_t)(cc->disk_sync * 1000),
            .reset_incompatible = cc->disk_reset_incompatible,
            .delay_ms = delay ? (uint32_t)strtoul(delay, NULL, 10) : 0,
        };
        char *msg = NULL;
        t->stores[i] = um_disk_open(&o, &msg);
        if (t->stores[i] == NULL) {
            snprintf(err, errlen, "%s:%d: cache.disk: %s", config->file, dc->line,
                     msg ? msg : "cannot open the store");
            free(msg);
            t->n = i;
            um_disk_tier_close(t);
            return NULL;
        }
        t->dirs[i] = um_strndup(dc->path, strlen(dc->path));
        t->n = i + 1;
        int64_t p = purged_read(dc->path);
        if (p > purged) purged = p;
        /* A store opened smaller than the largest object is given only what fits. */
        struct um_disk_stats st;
        um_disk_stats(t->stores[i], &st);
        if (st.queue_max < t->max_object) t->max_object = st.queue_max;
    }
    atomic_store(&t->purged_before, purged);
    t->to_write = t->written = purged;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->gens_mu, NULL);
    pthread_cond_init(&t->cond, NULL);
    int e = pthread_create(&t->purge_writer, NULL, purge_writer_main, t);
    if (e != 0) {
        snprintf(err, errlen, "cache.disk: cannot start the purge writer: %s", strerror(e));
        um_disk_tier_close(t);
        return NULL;
    }
    t->started = true;
    struct um_disk_tier_stats s;
    um_disk_tier_stats(t, &s);
    um_log_info("cache.disk: %zu store(s), %llu bytes, %llu objects found", t->n,
                (unsigned long long)s.disk.size, (unsigned long long)s.disk.objects);
    return t;
}

void um_disk_tier_close(struct um_disk_tier *t)
{
    if (t == NULL) return;
    if (t->started) {
        pthread_mutex_lock(&t->mu);
        t->closing = true;
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->purge_writer, NULL);
        pthread_cond_destroy(&t->cond);
        pthread_mutex_destroy(&t->mu);
        pthread_mutex_destroy(&t->gens_mu);
    }
    for (size_t i = 0; i < t->n; i++) {
        um_disk_close(t->stores[i]);
        free(t->dirs[i]);
    }
    free(t->stores);
    free(t->dirs);
    um__disk_admit_dispose(&t->admit);
    free(t);
}

uint64_t um__disk_tier_marker_gen(struct um_disk_tier *t, struct um_disk_key key, uint64_t gen)
{
    size_t i = (size_t)(key.lo % (sizeof(t->gens) / sizeof(t->gens[0])));
    pthread_mutex_lock(&t->gens_mu);
    if (t->gens[i].gen != 0 && t->gens[i].hi == key.hi && t->gens[i].lo == key.lo)
        gen = t->gens[i].gen;
    else
        t->gens[i].hi = key.hi, t->gens[i].lo = key.lo, t->gens[i].gen = gen;
    pthread_mutex_unlock(&t->gens_mu);
    return gen;
}

static void forget_gen(struct um_disk_tier *t, struct um_disk_key key)
{
    size_t i = (size_t)(key.lo % (sizeof(t->gens) / sizeof(t->gens[0])));
    pthread_mutex_lock(&t->gens_mu);
    if (t->gens[i].hi == key.hi && t->gens[i].lo == key.lo) t->gens[i].gen = 0;
    pthread_mutex_unlock(&t->gens_mu);
}

struct um_disk *um__disk_tier_store(struct um_disk_tier *t, struct um_disk_key key)
{
    return t->n == 1 ? t->stores[0] : um_disk_pick(t->stores, t->n, key);
}

void um_disk_tier_purge_key(struct um_disk_tier *t, um_str key)
{
    if (t == NULL) return;
    struct um_disk_key k = um_disk_key_of(key.base, key.len);
    forget_gen(t, k); /* a new marker, a new generation: the variants go with the URL */
    um_disk_remove(um__disk_tier_store(t, k), k);
}

void um_disk_tier_purge_all(struct um_disk_tier *t)
{
    if (t == NULL) return;
    /* Records written in this second may predate the purge: the next second is the limit,
     * so nothing stored before the purge is served after it. */
    int64_t when = (int64_t)time(NULL) + 1;
    atomic_store(&t->purged_before, when);
    atomic_fetch_add(&t->purges, 1);
    pthread_mutex_lock(&t->mu);
    if (when > t->to_write) {
        t->to_write = when;
        pthread_cond_signal(&t->cond);
    }
    pthread_mutex_unlock(&t->mu);
}

void um_disk_tier_stats(struct um_disk_tier *t, struct um_disk_tier_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (t == NULL) return;
    st->stores = t->n;
    for (size_t i = 0; i < t->n; i++) {
        struct um_disk_stats d;
        um_disk_stats(t->stores[i], &d);
        um_disk_stats_add(&st->disk, &d);
    }
    st->hits = atomic_load(&t->hits);
    st->misses = atomic_load(&t->misses);
    st->purged = atomic_load(&t->purged);
    st->rewrites = atomic_load(&t->rewrites);
    st->revalidations = atomic_load(&t->revalidations);
    st->promotions = atomic_load(&t->promotions);
}

/* ---------------------------------------------------------------- the module's record */

/* The tier's lines of /metrics, when there is one. */
static void render_metrics(struct um_buf *b, void *running)
{
    if (running == NULL) return;
    struct um_disk_tier_stats d;
    um_disk_tier_stats(running, &d);
    um_metrics_line(b, "umbra_disk_hits_total", "counter", "Memory misses the disk tier answered.",
                    d.hits);
    um_metrics_line(b, "umbra_disk_promotions_total", "counter",
                    "Disk hits that went into memory (asked again within the memory's reach).",
                    d.promotions);
    um_metrics_line(b, "umbra_disk_misses_total", "counter",
                    "Fills the disk tier could not answer (not there, stale, purged or damaged).",
                    d.misses);
    um_metrics_line(b, "umbra_disk_objects", "gauge", "Objects in the disk stores' indexes.",
                    d.disk.objects);
    um_metrics_line(b, "umbra_disk_bytes", "gauge", "Bytes of the objects' records on disk.",
                    d.disk.bytes);
    um_metrics_line(b, "umbra_disk_size_bytes", "gauge", "Bytes of the store files.", d.disk.size);
    um_metrics_line(b, "umbra_disk_index_bytes", "gauge", "Memory of the disk indexes.",
                    d.disk.index_bytes);
    um_metrics_line(b, "umbra_disk_reads_total", "counter", "Records read from disk.",
                    d.disk.reads);
    um_metrics_line(b, "umbra_disk_read_bytes_total", "counter", "Bytes read from disk.",
                    d.disk.read_bytes);
    uint64_t reads = 0;
    for (size_t k = 0; k <= UM_DISK_READ_BUCKETS; k++)
        reads += d.disk.read_us[k];
    um_metrics_histogram_us(b, "umbra_disk_read_seconds",
                            "Time a read of a record took, from the request to the record "
                            "checked (the page cache's at once, else the store's threads).",
                            um_disk_read_bounds_us, UM_DISK_READ_BUCKETS, d.disk.read_us,
                            d.disk.read_us_sum, reads);
    um_metrics_line(b, "umbra_disk_writes_total", "counter", "Records written to disk.",
                    d.disk.writes);
    um_metrics_line(b, "umbra_disk_write_bytes_total", "counter", "Bytes written to disk.",
                    d.disk.write_bytes);
    um_metrics_line(b, "umbra_disk_evictions_total", "counter",
                    "Records overwritten by the log's cursor.", d.disk.evictions);
    um_metrics_line(b, "umbra_disk_checksum_failures_total", "counter",
                    "Records found damaged on a read (dropped and fetched again).",
                    d.disk.checksum_failures);
    um_metrics_line(b, "umbra_disk_io_errors_total", "counter", "Reads and writes the disk failed.",
                    d.disk.io_errors);
    um_metrics_line(b, "umbra_disk_write_queue_bytes", "gauge",
                    "Bytes of records waiting to be written.", d.disk.queue_bytes);
    um_metrics_line(b, "umbra_disk_write_drops_total", "counter",
                    "Writes dropped because the write queue was full.", d.disk.drops);
    um_metrics_line(b, "umbra_disk_purged_total", "counter",
                    "Records not served because a purge by prefix or tag came after them.",
                    d.purged);
    um_metrics_line(b, "umbra_disk_rewrites_total", "counter",
                    "Records hit near the log's cursor and written again ahead of it.", d.rewrites);
    um_metrics_line(b, "umbra_disk_revalidations_total", "counter",
                    "Stale records revalidated with the origin (a 304 freshens and rewrites them).",
                    d.revalidations);
}

/* The tier's member of /status.json. */
static void render_status(struct um_buf *b, void *running)
{
    struct um_disk_tier_stats d;
    um_disk_tier_stats(running, &d);
    um_buf_printf(b,
                  "\"disk\":{\"stores\":%llu,\"size\":%llu,\"used\":%llu,\"objects\":%llu,"
                  "\"index_bytes\":%llu,\"hits\":%llu,\"misses\":%llu,\"writes\":%llu,"
                  "\"write_drops\":%llu,\"evictions\":%llu,\"checksum_failures\":%llu}",
                  (unsigned long long)d.stores, (unsigned long long)d.disk.size,
                  (unsigned long long)d.disk.bytes, (unsigned long long)d.disk.objects,
                  (unsigned long long)d.disk.index_bytes, (unsigned long long)d.hits,
                  (unsigned long long)d.misses, (unsigned long long)d.disk.writes,
                  (unsigned long long)d.disk.drops, (unsigned long long)d.disk.evictions,
                  (unsigned long long)d.disk.checksum_failures);
}

/* The stores are opened at start (before the workers): a reload keeps the running ones. */
static void check_reload(const struct um_config *was, const struct um_config *now, void *running)
{
    (void)running;
    const struct um_cache_conf *ncc = um_cache_conf(now);
    const struct um_cache_conf *wcc = um_cache_conf(was);
    bool same = ncc->num_disks == wcc->num_disks && ncc->disk_sync == wcc->disk_sync &&
                ncc->disk_reset_incompatible == wcc->disk_reset_incompatible;
    for (size_t i = 0; same && i < ncc->num_disks; i++)
        same = strcmp(ncc->disks[i].path, wcc->disks[i].path) == 0 &&
               ncc->disks[i].size == wcc->disks[i].size;
    if (!same)
        um_log_warn("SIGHUP: cache.disk takes a restart; keeping the running disk stores (%zu)",
                    wcc->num_disks);
}

const struct um_module um_disk_module = {
    .name = "disk",
    .verify = um_disk_tier_check,
    .check_reload = check_reload,
    .metrics = render_metrics,
    .status = render_status,
};
