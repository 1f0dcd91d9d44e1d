/* Unit tests for the disk store (src/disk/): write and read back, the log wrapping many
 * times within its file, corruption never read back as a body, reopening after a close
 * and after a crash (a forked child that exits without closing), format version refusal
 * and reset, index bytes per object, the bounded write queue, removal, store picking.
 *
 * Each test gets a store in a fresh temporary directory and a loop that the reads
 * complete on. Bodies are a pattern of their key and offset, so a body of another key or
 * a shifted one shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define _XOPEN_SOURCE_EXTENDED 1
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "umbra/disk.h"
#include "umbra/loop.h"

#include "disk/internal.h"

static char dir[64];
static char path[128];
static struct um_loop *loop;

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/umbra-disk-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof(path), "%s/store", dir);
    loop = um_loop_create();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    um_loop_destroy(loop);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static struct um_disk_key key(int i)
{
    uint32_t v = (uint32_t)i;
    return um_disk_key_of(&v, sizeof(v));
}

/* The body of key i in its version gen: every byte depends on both and on its offset. */
static char *body(int i, int gen, size_t len)
{
    char *b = malloc(len ? len : 1);
    for (size_t k = 0; k < len; k++)
        b[k] = (char)(i * 131 + gen * 29 + k * 7 + (k >> 9));
    return b;
}

static um_str meta(int i, int gen, char *buf)
{
    int n = snprintf(buf, 32, "meta %d/%d", i, gen);
    return (um_str){buf, (size_t)n};
}

static int put(struct um_disk *d, int i, int gen, size_t len)
{
    char mb[32];
    char *b = body(i, gen, len);
    int rc = um_disk_write(d, key(i), meta(i, gen, mb), b, len);
    free(b);
    return rc;
}

struct got {
    bool done;
    int status;
    char *meta, *body;
    size_t meta_len, body_len;
};

static void on_read(void *arg, int status, um_str m, um_str b)
{
    struct got *g = arg;
    g->done = true;
    g->status = status;
    g->meta = malloc(m.len + 1);
    memcpy(g->meta, m.base ? m.base : "", m.len);
    g->meta_len = m.len;
    g->body = malloc(b.len + 1);
    if (b.len)
        memcpy(g->body, b.base, b.len);
    g->body_len = b.len;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Reads key i: UM_OK (g filled), UM_DONE (a miss, at once or after the read). */
static int get(struct um_disk *d, int i, struct got *g)
{
    memset(g, 0, sizeof(*g));
    int rc = um_disk_read(d, key(i), loop, on_read, g);
    if (rc == UM_DONE)
        return UM_DONE;
    assert_int_equal(rc, UM_AGAIN);
    uint64_t deadline = mono_ms() + 10000;
    while (!g->done && mono_ms() < deadline)
        um_loop_run_once(loop, 50);
    assert_true(g->done);
    return g->status;
}

static void got_free(struct got *g)
{
    free(g->meta);
    free(g->body);
}

/* Key i reads back as version gen of length len, exactly. */
static void assert_object(struct um_disk *d, int i, int gen, size_t len)
{
    struct got g;
    int rc = get(d, i, &g);
    if (rc != UM_OK)
        fail_msg("object %d: status %d, want its body", i, rc);
    char mb[32];
    um_str m = meta(i, gen, mb);
    assert_int_equal(g.meta_len, m.len);
    assert_memory_equal(g.meta, m.base, m.len);
    assert_int_equal(g.body_len, len);
    char *want = body(i, gen, len);
    if (len)
        assert_memory_equal(g.body, want, len);
    free(want);
    got_free(&g);
}

/* Key i reads back either as version gen of length len, or as a miss: never anything
 * else. Returns whether it was found. */
static bool object_or_miss(struct um_disk *d, int i, int gen, size_t len)
{
    struct got g;
    int rc = get(d, i, &g);
    if (rc == UM_OK) {
        char *want = body(i, gen, len);
        if (g.body_len != len || (len && memcmp(g.body, want, len) != 0))
            fail_msg("object %d: a wrong body (%zu bytes, want %zu)", i, g.body_len, len);
        free(want);
    } else {
        assert_int_equal(rc, UM_DONE);
    }
    got_free(&g);
    return rc == UM_OK;
}

static struct um_disk_opts opts_of(uint64_t size)
{
    return (struct um_disk_opts){.path = path, .size = size, .snapshot_ms = 600000};
}

static struct um_disk *open_ok(const struct um_disk_opts *o)
{
    char *err = NULL;
    struct um_disk *d = um_disk_open(o, &err);
    if (!d)
        fail_msg("open: %s", err);
    return d;
}

static struct um_disk_stats stats(struct um_disk *d)
{
    struct um_disk_stats st;
    um_disk_stats(d, &st);
    return st;
}

static size_t size_of(int i)
{
    static const size_t sizes[] = {0, 1, 100, 4000, 4024, 4025, 9000, 20000, 65536, 100001};
    return sizes[i % 10];
}

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* ---------------------------------------------------------------- the index alone */

static void test_index(void **state)
{
    (void)state;
    struct um__disk_index x;
    um__disk_index_init(&x);
    for (uint64_t i = 0; i < 5000; i++)
        assert_int_equal(um__disk_index_put(&x, i, i * 977, i * 10, 100), 1);
    assert_int_equal(x.count, 5000);
    /* A newer record replaces, an older one is ignored. */
    assert_int_equal(um__disk_index_put(&x, 7, 7 * 977, 60000, 200), 0);
    assert_int_equal(um__disk_index_put(&x, 8, 8 * 977, 5, 200), -1);
    assert_int_equal(um__disk_index_find(&x, 7, 7 * 977)->pos, 60000);
    assert_int_equal(um__disk_index_find(&x, 8, 8 * 977)->pos, 80);
    assert_null(um__disk_index_find(&x, 8, 8 * 978));
    /* Eviction takes log order: key 7 moved to the end. */
    assert_int_equal(um__disk_index_evict(&x, 100), 9); /* pos 0..90 but 70 */
    assert_null(um__disk_index_find(&x, 0, 0));
    assert_non_null(um__disk_index_find(&x, 7, 7 * 977));
    assert_non_null(um__disk_index_find(&x, 10, 10 * 977));
    assert_true(um__disk_index_del(&x, 10, 10 * 977, UINT64_MAX));
    assert_false(um__disk_index_del(&x, 10, 10 * 977, UINT64_MAX));
    assert_false(um__disk_index_del(&x, 11, 11 * 977, 110)); /* not older than 110 */
    assert_int_equal(x.count, 5000 - 9 - 1);
    assert_int_equal(x.bytes, (5000 - 11) * 100 + 200);
    um__disk_index_dispose(&x);
}

/* ---------------------------------------------------------------- tests */

static void test_write_read_back(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(4 << 20);
    struct um_disk *d = open_ok(&o);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(put(d, i, 0, size_of(i)), UM_OK);
        if (i % 10 == 9) /* within the queue's bound */
            um_disk_sync(d, false);
    }
    for (int i = 0; i < 40; i++) {
        struct um_disk_info info;
        assert_true(um_disk_lookup(d, key(i), &info));
        assert_int_equal(info.offset % 4096, 0);
        assert_int_equal(info.length, UM__DISK_REC_LEN(8 + (i > 9), size_of(i)));
        assert_object(d, i, 0, size_of(i));
    }
    /* A miss is known at once, with no read. */
    struct got g;
    assert_false(um_disk_lookup(d, key(1000), NULL));
    assert_int_equal(um_disk_read(d, key(1000), loop, on_read, &g), UM_DONE);
    /* An overwrite replaces. */
    assert_int_equal(put(d, 3, 1, 777), UM_OK);
    um_disk_sync(d, false);
    assert_object(d, 3, 1, 777);
    struct um_disk_stats st = stats(d);
    assert_int_equal(st.objects, 40);
    assert_int_equal(st.writes, 41);
    assert_int_equal(st.reads, 41);
    assert_int_equal(st.read_misses, 1);
    assert_int_equal(st.checksum_failures, 0);
    assert_int_equal(st.drops, 0);
    assert_int_equal(st.queue_bytes, 0);
    um_disk_close(d);
}

/* What the page cache holds is read at once, on the caller's thread, with the same checks:
 * the right body, a miss for a key not stored, and a damaged record never handed out. */
static void test_read_cached(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(4 << 20);
    struct um_disk *d = open_ok(&o);
    for (int i = 0; i < 20; i++)
        assert_int_equal(put(d, i, 0, size_of(i)), UM_OK);
    um_disk_sync(d, false);
    int found = 0;
    for (int i = 0; i < 20; i++) {
        struct got g;
        memset(&g, 0, sizeof(g));
        int rc = um_disk_read_cached(d, key(i), on_read, &g);
        if (rc == UM_AGAIN)
            continue; /* not in the page cache after all: the threads' way */
        assert_int_equal(rc, UM_OK);
        assert_true(g.done); /* before it returned */
        char *want = body(i, 0, size_of(i));
        assert_int_equal(g.body_len, size_of(i));
        if (g.body_len)
            assert_memory_equal(g.body, want, g.body_len);
        free(want);
        got_free(&g);
        found++;
    }
    assert_true(found > 0); /* just written: the page cache holds them */
    struct got g;
    memset(&g, 0, sizeof(g));
    assert_int_equal(um_disk_read_cached(d, key(1000), on_read, &g), UM_DONE);
    assert_false(g.done);
    /* A byte of object 7's body changed on disk: never read back, dropped, counted. */
    struct um_disk_info info;
    assert_true(um_disk_lookup(d, key(7), &info));
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char c = 0x5a;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)(info.offset + info.length - 100)), 1);
    close(fd);
    int rc = um_disk_read_cached(d, key(7), on_read, &g);
    assert_true(rc == UM_DONE || rc == UM_AGAIN);
    assert_false(g.done);
    if (rc == UM_DONE)
        assert_int_equal(stats(d).checksum_failures, 1);
    um_disk_close(d);
}

/* Record buffers go back to the store after a write or a cached read and serve the next
 * of their size with the last one's bytes still in them: every record must come back as
 * written, across generations that reuse each other's buffers. */
static void test_reused_buffers_keep_records_whole(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(8 << 20);
    struct um_disk *d = open_ok(&o);
    for (int gen = 0; gen < 3; gen++) {
        for (int i = 0; i < 20; i++)
            assert_int_equal(put(d, i, gen, size_of(i + gen)), UM_OK);
        um_disk_sync(d, false);
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < 20; i++) {
                struct got g;
                memset(&g, 0, sizeof(g));
                int rc = um_disk_read_cached(d, key(i), on_read, &g);
                if (rc == UM_AGAIN) {
                    assert_object(d, i, gen, size_of(i + gen)); /* the threads' way */
                    continue;
                }
                assert_int_equal(rc, UM_OK);
                char *want = body(i, gen, size_of(i + gen));
                assert_int_equal(g.body_len, size_of(i + gen));
                if (g.body_len) assert_memory_equal(g.body, want, g.body_len);
                free(want);
                got_free(&g);
            }
    }
    assert_int_equal(stats(d).checksum_failures, 0);
    um_disk_close(d);
}

static void test_wraps_within_its_size(void **state)
{
    (void)state;
    const uint64_t size = 512 * 1024;
    struct um_disk_opts o = opts_of(size);
    struct um_disk *d = open_ok(&o);
    const int n = 2000;
    int accepted = 0;
    for (int i = 0; i < n; i++) {
        accepted += put(d, i, 0, (size_t)(i * 37) % 20000) == UM_OK;
        if (i % 4 == 0)
            um_disk_sync(d, false);
    }
    um_disk_sync(d, false);
    assert_int_equal(accepted, n);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal((uint64_t)sb.st_size, size);
    struct um_disk_stats st = stats(d);
    uint64_t span = size - 4096;
    assert_true(st.cursor > 10 * span); /* many laps */
    assert_true(st.evictions > (uint64_t)n / 2);
    assert_true(st.bytes <= span);
    assert_int_equal(st.objects + st.evictions, (uint64_t)n);
    /* The oldest are gone, the newest are there, and whatever is there is right. */
    assert_false(um_disk_lookup(d, key(0), NULL));
    struct um_disk_info newest, oldest;
    assert_true(um_disk_lookup(d, key(n - 1), &newest));
    assert_int_equal(newest.left, span - (st.cursor - newest.seq));
    int first = 0;
    while (!um_disk_lookup(d, key(first), &oldest))
        first++;
    assert_true(oldest.left < newest.left);
    assert_true(oldest.left < 2 * 20480); /* the next record or two reach it */
    int found = 0;
    for (int i = 0; i < n; i++)
        found += object_or_miss(d, i, 0, (size_t)(i * 37) % 20000);
    assert_int_equal((uint64_t)found, st.objects);
    assert_int_equal(stats(d).checksum_failures, 0);
    um_disk_close(d);

    /* And after a reopen, the same. */
    d = open_ok(&o);
    assert_int_equal(stats(d).objects, st.objects);
    found = 0;
    for (int i = 0; i < n; i++)
        found += object_or_miss(d, i, 0, (size_t)(i * 37) % 20000);
    assert_int_equal((uint64_t)found, st.objects);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal((uint64_t)sb.st_size, size);
    um_disk_close(d);
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void test_corruption_never_read_back(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(2 << 20);
    struct um_disk *d = open_ok(&o);
    const int n = 100;
    const size_t len = 8000; /* a record of two blocks, nearly full */
    for (int i = 0; i < n; i++) {
        assert_int_equal(put(d, i, 0, len), UM_OK);
        if (i % 10 == 9) /* within the queue's bound */
            um_disk_sync(d, false);
    }
    um_disk_sync(d, false);
    uint64_t end = stats(d).cursor;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    for (int k = 0; k < 60; k++) {
        off_t at = (off_t)(4096 + rnd() % end);
        unsigned char c;
        assert_int_equal(pread(fd, &c, 1, at), 1);
        c ^= (unsigned char)(1 + rnd() % 255);
        assert_int_equal(pwrite(fd, &c, 1, at), 1);
    }
    close(fd);
    int found = 0;
    for (int i = 0; i < n; i++)
        found += object_or_miss(d, i, 0, len);
    struct um_disk_stats st = stats(d);
    assert_true(found < n);
    assert_true(found > 0);
    assert_int_equal(st.checksum_failures, (uint64_t)(n - found));
    assert_int_equal(st.objects, (uint64_t)found);
    /* Dropped: the next look costs nothing. */
    for (int i = 0; i < n; i++)
        if (!um_disk_lookup(d, key(i), NULL))
            assert_int_equal(um_disk_read(d, key(i), loop, on_read, NULL), UM_DONE);
    um_disk_close(d);

    /* A reopen scans nothing wrong back in. */
    char snap[160];
    snprintf(snap, sizeof(snap), "%s.index", path);
    assert_int_equal(unlink(snap), 0);
    d = open_ok(&o);
    for (int i = 0; i < n; i++)
        object_or_miss(d, i, 0, len);
    assert_int_equal(stats(d).checksum_failures, 0);
    assert_int_equal(stats(d).objects, (uint64_t)found);
    um_disk_close(d);
}

static void test_reopen_after_close(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(8 << 20);
    struct um_disk *d = open_ok(&o);
    for (int i = 0; i < 200; i++)
        assert_int_equal(put(d, i, 0, size_of(i) / 4), UM_OK);
    um_disk_close(d);
    char snap[160];
    snprintf(snap, sizeof(snap), "%s.index", path);
    struct stat sb;
    assert_int_equal(stat(snap, &sb), 0);

    d = open_ok(&o);
    assert_int_equal(stats(d).objects, 200);
    for (int i = 0; i < 200; i++)
        assert_object(d, i, 0, size_of(i) / 4);
    /* Writes go on after what was there. */
    assert_int_equal(put(d, 500, 0, 3000), UM_OK);
    um_disk_sync(d, false);
    assert_object(d, 500, 0, 3000);
    assert_object(d, 0, 0, 0);
    um_disk_close(d);
}

/* The child: stores A0 (snapshot, kept as .old), A1 (snapshot), then B, overwrites,
 * removes and a last object, synced but with no snapshot, and dies without closing.
 * It writes the last object's file offset to fd out. */
static void crashing_child(int out)
{
    struct um_disk_opts o = opts_of(8 << 20);
    char *err = NULL;
    struct um_disk *d = um_disk_open(&o, &err);
    if (!d)
        _exit(2);
    char snap[160], old[160];
    snprintf(snap, sizeof(snap), "%s.index", path);
    snprintf(old, sizeof(old), "%s.index.old", path);
    for (int i = 0; i < 100; i++)
        put(d, i, 0, size_of(i) / 8);
    um_disk_sync(d, true);
    copy_file(snap, old);
    for (int i = 200; i < 300; i++)
        put(d, i, 0, size_of(i) / 8);
    um_disk_sync(d, true);
    for (int i = 100; i < 200; i++)
        put(d, i, 0, size_of(i) / 8);
    for (int i = 0; i < 10; i++)
        put(d, i, 1, 5000 + (size_t)i);
    for (int i = 10; i < 20; i++)
        um_disk_remove(d, key(i));
    for (int i = 200; i < 205; i++)
        um_disk_remove(d, key(i));
    put(d, 999, 0, 12000);
    um_disk_sync(d, false);
    struct um_disk_info info;
    if (!um_disk_lookup(d, key(999), &info))
        _exit(3);
    if (write(out, &info.offset, sizeof(info.offset)) != (ssize_t)sizeof(info.offset))
        _exit(4);
    _exit(0); /* no close: no snapshot, the threads die with the process */
}

static void check_after_crash(struct um_disk *d)
{
    for (int i = 0; i < 10; i++)
        assert_object(d, i, 1, 5000 + (size_t)i);
    for (int i = 10; i < 20; i++)
        assert_false(um_disk_lookup(d, key(i), NULL));
    for (int i = 20; i < 200; i++)
        assert_object(d, i, 0, size_of(i) / 8);
    for (int i = 200; i < 205; i++)
        assert_false(um_disk_lookup(d, key(i), NULL));
    for (int i = 205; i < 300; i++)
        assert_object(d, i, 0, size_of(i) / 8);
    /* The torn last record is not in the index at all. */
    assert_false(um_disk_lookup(d, key(999), NULL));
    struct um_disk_stats st = stats(d);
    assert_int_equal(st.objects, 10 + 180 + 95);
    assert_int_equal(st.checksum_failures, 0);
}

static void test_reopen_after_crash(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        crashing_child(p[1]);
    }
    close(p[1]);
    uint64_t last = 0;
    assert_int_equal(read(p[0], &last, sizeof(last)), sizeof(last));
    close(p[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* Tear the last record, as a crash in the middle of its write would. */
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    char junk[4096];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)last + 4096), sizeof(junk));
    close(fd);

    char snap[160], old[160];
    snprintf(snap, sizeof(snap), "%s.index", path);
    snprintf(old, sizeof(old), "%s.index.old", path);
    struct um_disk_opts o = opts_of(8 << 20);

    /* The last snapshot plus a scan of what came after. */
    struct um_disk *d = open_ok(&o);
    check_after_crash(d);
    um_disk_close(d);

    /* A stale snapshot: the scan covers more. */
    copy_file(old, snap);
    d = open_ok(&o);
    check_after_crash(d);
    um_disk_close(d);

    /* No snapshot: the whole store is scanned. */
    assert_int_equal(unlink(snap), 0);
    d = open_ok(&o);
    check_after_crash(d);
    um_disk_close(d);

    /* A damaged snapshot is not used either. */
    fd = open(snap, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "xx", 2, 100), 2);
    close(fd);
    d = open_ok(&o);
    check_after_crash(d);
    um_disk_close(d);
}

/* The child: a store of a little more than 42 records of 3 blocks a lap; `before`
 * records, a snapshot, `after` more, synced, and it dies. */
static void wrapping_child(int before, int after)
{
    struct um_disk_opts o = opts_of(512 * 1024);
    char *err = NULL;
    struct um_disk *d = um_disk_open(&o, &err);
    if (!d)
        _exit(2);
    for (int i = 0; i < before + after; i++) {
        if (i == before)
            um_disk_sync(d, true);
        if (put(d, i, 0, 9000) != UM_OK)
            _exit(3);
        if (i % 5 == 4)
            um_disk_sync(d, false);
    }
    um_disk_sync(d, false);
    _exit(0);
}

static void run_child(void (*child)(int, int), int before, int after)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child(before, after);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The records of 3 blocks: a lap of 127 blocks holds 42, skipping its last block. */
static void check_wrapped(int n)
{
    struct um_disk_opts o = opts_of(512 * 1024);
    struct um_disk *d = open_ok(&o);
    int found = 0;
    for (int i = 0; i < n; i++) {
        bool there = um_disk_lookup(d, key(i), NULL);
        found += there;
        if (there)
            assert_object(d, i, 0, 9000);
    }
    /* The newest lap's worth is there (every record the cursor has not passed). */
    for (int i = n - 34; i < n; i++)
        assert_true(um_disk_lookup(d, key(i), NULL));
    assert_true(found >= 34 && found <= 42);
    assert_int_equal(stats(d).checksum_failures, 0);
    um_disk_close(d);
}

static void test_reopen_after_crash_across_the_lap(void **state)
{
    (void)state;
    /* The scan after the snapshot crosses the end of the region (a skipped tail). */
    run_child(wrapping_child, 30, 20);
    check_wrapped(50);
}

static void test_reopen_after_crash_laps_after_snapshot(void **state)
{
    (void)state;
    /* The log went round more than once since the snapshot: it cannot be used. */
    run_child(wrapping_child, 10, 120);
    check_wrapped(130);
}

static void test_version_refused_or_reset(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(1 << 20);
    struct um_disk *d = open_ok(&o);
    assert_int_equal(put(d, 1, 0, 100), UM_OK);
    um_disk_close(d);

    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint32_t v = 99;
    assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct um__disk_super, version)), sizeof(v));
    close(fd);
    char *err = NULL;
    assert_null(um_disk_open(&o, &err));
    assert_non_null(err);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "format version 99"));
    assert_non_null(strstr(err, "reset_incompatible"));
    free(err);

    /* Another size is refused too. */
    struct um_disk_opts bigger = opts_of(2 << 20);
    fd = open(path, O_RDWR);
    v = UM__DISK_VERSION;
    assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct um__disk_super, version)), sizeof(v));
    close(fd);
    err = NULL;
    assert_null(um_disk_open(&bigger, &err));
    assert_non_null(strstr(err, "size"));
    free(err);

    /* Reset: emptied, and usable. */
    fd = open(path, O_RDWR);
    v = 99;
    assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct um__disk_super, version)), sizeof(v));
    close(fd);
    o.reset_incompatible = true;
    d = open_ok(&o);
    assert_int_equal(stats(d).objects, 0);
    assert_false(um_disk_lookup(d, key(1), NULL));
    assert_int_equal(put(d, 2, 0, 300), UM_OK);
    um_disk_sync(d, false);
    assert_object(d, 2, 0, 300);
    um_disk_close(d);
    o.reset_incompatible = false;
    d = open_ok(&o);
    assert_object(d, 2, 0, 300);
    assert_false(um_disk_lookup(d, key(1), NULL));
    um_disk_close(d);

    /* A file that is not a store at all. */
    FILE *f = fopen(path, "wb");
    fputs("hello, not a store\n", f);
    fclose(f);
    err = NULL;
    assert_null(um_disk_open(&o, &err));
    assert_non_null(strstr(err, "not an Umbra disk store"));
    free(err);
}

static void test_index_bytes_per_object(void **state)
{
    (void)state;
    assert_true(sizeof(struct um__disk_ent) <= 64);
    const int n = 10000;
    struct um_disk_opts o = opts_of((uint64_t)(n + 2000) * 4096);
    struct um_disk *d = open_ok(&o);
    for (int i = 0; i < n; i++) {
        assert_int_equal(put(d, i, 0, 100), UM_OK);
        if (i % 1000 == 999)
            um_disk_sync(d, false);
    }
    um_disk_sync(d, false);
    struct um_disk_stats st = stats(d);
    assert_int_equal(st.objects, (uint64_t)n);
    double per = (double)st.index_bytes / (double)st.objects;
    print_message("index: %llu bytes for %llu objects, %.1f an object\n",
                  (unsigned long long)st.index_bytes, (unsigned long long)st.objects, per);
    assert_true(per <= 64.0);
    um_disk_close(d);
}

static void test_full_queue_drops(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(4 << 20);
    o.queue_max = 64 * 1024;
    o.delay_ms = 400; /* a slow disk */
    struct um_disk *d = open_ok(&o);
    const size_t len = 16384 - 72 - strlen("meta 0/0"); /* a record of exactly 4 blocks */
    int ok = 0;
    for (int i = 0; i < 10; i++)
        ok += put(d, i, 0, len) == UM_OK;
    struct um_disk_stats st = stats(d);
    assert_int_equal(ok, 4);
    assert_int_equal(st.drops, 6);
    assert_true(st.queue_bytes <= st.queue_max);
    /* Larger than the whole queue: dropped at once. */
    assert_int_equal(put(d, 50, 0, 70000), UM_ERR);
    assert_int_equal(stats(d).drops, 7);
    um_disk_sync(d, false);
    st = stats(d);
    assert_int_equal(st.writes, 4);
    assert_int_equal(st.objects, 4);
    assert_int_equal(st.queue_bytes, 0);
    for (int i = 0; i < 4; i++)
        assert_object(d, i, 0, len);
    for (int i = 4; i < 10; i++)
        assert_false(um_disk_lookup(d, key(i), NULL));
    /* Room again once written. */
    assert_int_equal(put(d, 7, 0, len), UM_OK);
    um_disk_close(d);
}

static void test_remove(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(1 << 20);
    o.delay_ms = 100; /* so that a write is still queued when its key is removed */
    struct um_disk *d = open_ok(&o);
    assert_int_equal(put(d, 1, 0, 1000), UM_OK);
    assert_int_equal(put(d, 2, 0, 1000), UM_OK);
    um_disk_sync(d, true);
    assert_true(um_disk_remove(d, key(1)));
    assert_false(um_disk_remove(d, key(1)));
    assert_false(um_disk_lookup(d, key(1), NULL));
    struct got g;
    assert_int_equal(get(d, 1, &g), UM_DONE);
    /* A write still queued when its key is removed does not come in later. */
    assert_int_equal(put(d, 3, 0, 1000), UM_OK);
    um_disk_remove(d, key(3));
    um_disk_sync(d, false);
    assert_false(um_disk_lookup(d, key(3), NULL));
    um_disk_close(d);
    /* The snapshot at close has neither; nor has a scan (the tombstones). */
    d = open_ok(&o);
    assert_false(um_disk_lookup(d, key(1), NULL));
    assert_false(um_disk_lookup(d, key(3), NULL));
    assert_object(d, 2, 0, 1000);
    um_disk_close(d);
    char snap[160];
    snprintf(snap, sizeof(snap), "%s.index", path);
    unlink(snap);
    d = open_ok(&o);
    assert_false(um_disk_lookup(d, key(1), NULL));
    assert_false(um_disk_lookup(d, key(3), NULL));
    assert_object(d, 2, 0, 1000);
    um_disk_close(d);
}

static void test_check(void **state)
{
    (void)state;
    char *err = NULL;
    struct um_disk_opts o = opts_of(1 << 20);
    assert_int_equal(um_disk_check(&o, &err), UM_OK);
    assert_null(err);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0); /* touched nothing */
    um_disk_close(open_ok(&o));
    assert_int_equal(um_disk_check(&o, &err), UM_OK);

    o.size = (uint64_t)1 << 60; /* more than any filesystem here */
    assert_int_equal(um_disk_check(&o, &err), UM_ERR);
    assert_non_null(strstr(err, "room"));
    free(err);

    o.size = 1000;
    assert_int_equal(um_disk_check(&o, &err), UM_ERR);
    assert_non_null(strstr(err, "minimum"));
    free(err);

    char nowhere[160];
    snprintf(nowhere, sizeof(nowhere), "%s/no/such/store", dir);
    o = opts_of(1 << 20);
    o.path = nowhere;
    assert_int_equal(um_disk_check(&o, &err), UM_ERR);
    assert_non_null(strstr(err, "directory"));
    free(err);
}

/* Several threads writing, reading (each on its own loop), removing and looking up at
 * once, as workers would (and for ThreadSanitizer's eyes). */
struct worker {
    struct um_disk *d;
    int id;
    int wrong; /* bodies that were not their key's */
    int found;
};

static void on_worker_read(void *arg, int status, um_str m, um_str b)
{
    struct got *g = arg;
    g->done = true;
    g->status = status;
    g->body = malloc(b.len + 1);
    if (b.len)
        memcpy(g->body, b.base, b.len);
    g->body_len = b.len;
    (void)m;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct um_loop *l = um_loop_create();
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 150; k++) {
            int i = w->id * 1000 + k;
            put(w->d, i, round, (size_t)(k * 53) % 6000);
            if (k % 10 == 0)
                um_disk_remove(w->d, key(i - 5));
            um_disk_lookup(w->d, key(i - 1), NULL);
        }
        um_disk_sync(w->d, round == 1);
        for (int k = 0; k < 150; k++) {
            int i = w->id * 1000 + k;
            struct got g;
            memset(&g, 0, sizeof(g));
            if (um_disk_read(w->d, key(i), l, on_worker_read, &g) != UM_AGAIN)
                continue;
            uint64_t deadline = mono_ms() + 10000;
            while (!g.done && mono_ms() < deadline)
                um_loop_run_once(l, 50);
            if (g.done && g.status == UM_OK) {
                size_t len = (size_t)(k * 53) % 6000;
                char *want = body(i, round, len);
                w->wrong += g.body_len != len || (len && memcmp(g.body, want, len) != 0);
                w->found++;
                free(want);
            }
            free(g.body);
        }
    }
    um_loop_destroy(l);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    struct um_disk_opts o = opts_of(16 << 20);
    struct um_disk *d = open_ok(&o);
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.d = d, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(w[i].wrong, 0);
        assert_true(w[i].found > 0);
    }
    struct um_disk_stats st = stats(d);
    assert_int_equal(st.checksum_failures, 0);
    assert_int_equal(st.queue_bytes, 0);
    um_disk_close(d);
}

static void test_pick_spreads_and_is_stable(void **state)
{
    (void)state;
    struct um_disk *s[3];
    for (int i = 0; i < 3; i++) {
        char p[160];
        snprintf(p, sizeof(p), "%s/store%d", dir, i);
        struct um_disk_opts o = {.path = p, .size = 256 * 1024};
        s[i] = open_ok(&o);
    }
    int count[3] = {0};
    for (int k = 0; k < 3000; k++) {
        struct um_disk *d = um_disk_pick(s, 3, key(k));
        assert_ptr_equal(d, um_disk_pick(s, 3, key(k)));
        int which = d == s[0] ? 0 : d == s[1] ? 1 : 2;
        count[which]++;
        /* Without store 2, the keys of 0 and 1 stay where they were. */
        if (which != 2)
            assert_ptr_equal(um_disk_pick(s, 2, key(k)), d);
    }
    for (int i = 0; i < 3; i++)
        assert_true(count[i] > 800);
    for (int i = 0; i < 3; i++)
        um_disk_close(s[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index),
        cmocka_unit_test_setup_teardown(test_write_read_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reused_buffers_keep_records_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wraps_within_its_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_never_read_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_crash_across_the_lap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_crash_laps_after_snapshot, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_version_refused_or_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_bytes_per_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_queue_drops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pick_spreads_and_is_stable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
