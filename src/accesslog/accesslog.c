/* SPDX-License-Identifier: BSD-2-Clause */
/* The access log (see accesslog.h). */
#include "umbra/accesslog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "umbra/buf.h"
#include "umbra/context.h"
#include "umbra/log.h"
#include "umbra/loop.h"
#include "umbra/metrics.h"
#include "umbra/module.h"

/* The worker's buffer of lines (struct worker_log). */
static void on_worker_stop(struct um_context *ctx, void *state);
static struct um_context_slot log_slot = {.name = "access log buffer", .stop = on_worker_stop};

const struct um_module um_accesslog_module = {
    .name = "accesslog",
    .settings = &um_access_log_settings,
    .configure = um_access_log_configure,
    .slots = (struct um_context_slot *const[]){&log_slot, NULL},
};

#define FLUSH_AT (32 * 1024)
#define FLUSH_MS 1000
#define LINE_MAX_BYTES 8192

/* The descriptor workers write to: -1 until a file or stderr is configured. It keeps its
 * number for the life of the process; new files are dup2'ed onto it. */
static atomic_int out_fd = -1;
static char *cur_path; /* main thread only; NULL: stderr */

/* The state of a worker context's access log slot (log_slot). */
struct worker_log {
    struct um_context *ctx;
    struct um_loop *loop;
    char *buf;
    size_t len;
    struct um_timer timer;
};

/* ---------------------------------------------------------------- formatting */

/* Bytes written as they are: printable ASCII but '"' and '\'. */
static bool plain_byte(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* Appends the run of plain bytes of s from i whole; returns where it ends (the next byte
 * to escape, or s.len). */
static size_t put_plain_run(struct um_buf *o, um_str s, size_t i)
{
    size_t run = i;
    while (run < s.len && plain_byte((unsigned char)s.base[run]))
        run++;
    if (run > i)
        um_buf_append(o, s.base + i, run - i);
    return run;
}

/* A field of the combined format: '"', '\' and bytes outside printable ASCII as \xHH.
 * Runs of plain bytes are appended whole (a line is mostly such runs). */
static void put_escaped(struct um_buf *o, um_str s)
{
    static const char hex[] = "0123456789ABCDEF";
    if (s.len == 0) {
        um_buf_append(o, "-", 1);
        return;
    }
    size_t i = 0;
    while (i < s.len) {
        size_t run = put_plain_run(o, s, i);
        if (run == s.len)
            break;
        unsigned char c = (unsigned char)s.base[run];
        char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
        um_buf_append(o, e, 4);
        i = run + 1;
    }
}

/* A JSON string; bytes >= 0x80 are written as the code points U+0080..U+00FF, so that a
 * line is valid JSON whatever a client sent. Runs of plain bytes are appended whole. */
static void put_json(struct um_buf *o, um_str s)
{
    static const char hex[] = "0123456789abcdef";
    um_buf_append(o, "\"", 1);
    size_t i = 0;
    while (i < s.len) {
        size_t run = put_plain_run(o, s, i);
        if (run == s.len)
            break;
        unsigned char c = (unsigned char)s.base[run];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            um_buf_append(o, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            um_buf_append(o, e, 6);
        }
        i = run + 1;
    }
    um_buf_append(o, "\"", 1);
}

/* Decimal v, without printf. */
static void put_u64(struct um_buf *o, uint64_t v)
{
    char tmp[20];
    um_buf_append(o, tmp, (size_t)(um_u64_dec(tmp, v) - tmp));
}

/* Two digits of v (0..99). */
static void put_2(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

/* Milliseconds as seconds with three decimals ("0.042"), as "%.3f" of ms / 1000 writes
 * them. */
static void put_ms(struct um_buf *o, uint64_t ms)
{
    put_u64(o, ms / 1000);
    char frac[4] = {'.', (char)('0' + ms % 1000 / 100), (char)('0' + ms % 100 / 10),
                    (char)('0' + ms % 10)};
    um_buf_append(o, frac, 4);
}

/* The UTC date and time of t (seconds since the epoch) into tm's year, month, day, hour,
 * minute and second, by arithmetic (days to a civil date, proleptic Gregorian): gmtime_r
 * cost more than the rest of a log line. */
static void utc_fields(int64_t t, struct tm *tm)
{
    int64_t days = t / 86400, secs = t % 86400;
    if (secs < 0) {
        secs += 86400;
        days--;
    }
    tm->tm_hour = (int)(secs / 3600);
    tm->tm_min = (int)(secs % 3600 / 60);
    tm->tm_sec = (int)(secs % 60);
    /* Eras of 400 years from 0000-03-01, so that the leap day ends a year. */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;                                     /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);              /* [0, 365] */
    int64_t mp = (5 * doy + 2) / 153;                                   /* [0, 11] from March */
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (m <= 2);
    tm->tm_year = (int)(y - 1900);
    tm->tm_mon = (int)(m - 1);
    tm->tm_mday = (int)d;
}

static um_str cstr(const char *s)
{
    return (um_str){s ? s : "", s ? strlen(s) : 0};
}

size_t um_access_log_format(char *out, size_t n, enum um_access_format format,
                            const struct um_access_rec *r, int64_t now_sec, int now_ms)
{
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct um_buf o;
    um_buf_init_fixed(&o, out, n);
    struct tm tm;
    utc_fields(now_sec, &tm);
    bool has_req = r->minor_version >= 0 && r->method.len > 0;
    if (format == UM_ACCESS_JSON) {
        um_buf_printf(&o, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"client\":",
                      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                      tm.tm_sec, now_ms);
        put_json(&o, cstr(r->client_ip));
        um_buf_append_str(&o, ",\"method\":");
        put_json(&o, has_req ? r->method : (um_str){NULL, 0});
        um_buf_append_str(&o, ",\"target\":");
        put_json(&o, has_req ? r->target : (um_str){NULL, 0});
        um_buf_append_str(&o, ",\"protocol\":");
        if (has_req)
            um_buf_printf(&o, r->http2 ? "\"HTTP/2.0\"" : "\"HTTP/1.%d\"", r->minor_version);
        else
            um_buf_append_str(&o, "\"\"");
        um_buf_append_str(&o, ",\"host\":");
        put_json(&o, r->host);
        um_buf_printf(&o, ",\"status\":%d,\"bytes\":%llu,\"referer\":", r->status,
                      (unsigned long long)r->body_bytes);
        put_json(&o, r->referer);
        um_buf_append_str(&o, ",\"user_agent\":");
        put_json(&o, r->user_agent);
        um_buf_append_str(&o, ",\"cache_status\":");
        put_json(&o, r->cache_status);
        if (r->upstream_ms >= 0)
            um_buf_printf(&o, ",\"upstream_time\":%.3f", (double)r->upstream_ms / 1000);
        else
            um_buf_append_str(&o, ",\"upstream_time\":null");
        if (r->tunnel)
            um_buf_printf(&o, ",\"tunnel_up\":%llu,\"tunnel_down\":%llu",
                          (unsigned long long)r->tunnel_up, (unsigned long long)r->tunnel_down);
        um_buf_printf(&o, ",\"duration\":%.3f,\"worker\":%d,\"connection\":%llu}\n",
                      (double)r->duration_ms / 1000, r->worker, (unsigned long long)r->conn_id);
    } else {
        /* Combined, then the cache status and the upstream time in seconds:
         * ip - - [10/Oct/2026:13:55:36 +0000] "GET / HTTP/1.1" 200 5 "ref" "ua" "cache" 0.012 */
        /* Written without printf: this runs for every request. */
        put_escaped(&o, cstr(r->client_ip));
        char date[] = " - - [dd/Mon/yyyy:hh:mm:ss +0000] \"";
        put_2(date + 6, tm.tm_mday);
        memcpy(date + 9, months[tm.tm_mon], 3);
        int year = tm.tm_year + 1900;
        put_2(date + 13, year / 100 % 100);
        put_2(date + 15, year % 100);
        put_2(date + 18, tm.tm_hour);
        put_2(date + 21, tm.tm_min);
        put_2(date + 24, tm.tm_sec);
        um_buf_append(&o, date, sizeof(date) - 1);
        if (has_req) {
            put_escaped(&o, r->method);
            um_buf_append(&o, " ", 1);
            put_escaped(&o, r->target);
            if (r->http2 || r->minor_version > 9) {
                um_buf_printf(&o, r->http2 ? " HTTP/2.0" : " HTTP/1.%d", r->minor_version);
            } else {
                char v[] = " HTTP/1.x";
                v[8] = (char)('0' + r->minor_version);
                um_buf_append(&o, v, sizeof(v) - 1);
            }
        } else {
            um_buf_append(&o, "-", 1);
        }
        um_buf_append(&o, "\" ", 2);
        if (r->status >= 0)
            put_u64(&o, (uint64_t)r->status);
        else
            um_buf_printf(&o, "%d", r->status);
        um_buf_append(&o, " ", 1);
        put_u64(&o, r->body_bytes);
        um_buf_append(&o, " \"", 2);
        put_escaped(&o, r->referer);
        um_buf_append_str(&o, "\" \"");
        put_escaped(&o, r->user_agent);
        um_buf_append_str(&o, "\" \"");
        put_escaped(&o, r->cache_status);
        um_buf_append_str(&o, "\" ");
        if (r->upstream_ms >= 0)
            put_ms(&o, (uint64_t)r->upstream_ms);
        else
            um_buf_append_str(&o, "-");
        /* A tunnel adds its bytes each way and its duration. */
        if (r->tunnel)
            um_buf_printf(&o, " tunnel up=%llu down=%llu time=%.3f",
                          (unsigned long long)r->tunnel_up, (unsigned long long)r->tunnel_down,
                          (double)r->duration_ms / 1000);
        um_buf_append(&o, "\n", 1);
    }
    return o.len;
}

/* ---------------------------------------------------------------- output */

static void write_all(const char *p, size_t len)
{
    int fd = atomic_load_explicit(&out_fd, memory_order_acquire);
    if (fd < 0)
        return;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* a full disk loses lines; the server goes on */
        p += w;
        len -= (size_t)w;
    }
}

static void flush_worker(struct worker_log *wl)
{
    if (wl->len == 0)
        return;
    write_all(wl->buf, wl->len);
    wl->len = 0;
}

void um_access_log_flush(struct um_context *ctx)
{
    struct worker_log *wl = um_context_get(ctx, &log_slot);
    if (wl)
        flush_worker(wl);
}

static void on_flush_timer(struct um_timer *t)
{
    struct worker_log *wl = um_container_of(t, struct worker_log, timer);
    flush_worker(wl);
}

static void on_worker_stop(struct um_context *ctx, void *state)
{
    (void)ctx;
    struct worker_log *wl = state;
    flush_worker(wl);
    um_loop_timer_stop(wl->loop, &wl->timer);
    free(wl->buf);
    um_context_set(wl->ctx, &log_slot, NULL);
    free(wl);
}

static struct worker_log *worker_log(struct um_context *ctx)
{
    if (ctx == NULL)
        return NULL;
    struct worker_log *wl = um_context_get(ctx, &log_slot);
    if (wl)
        return wl;
    wl = um_calloc(1, sizeof(*wl));
    wl->ctx = ctx;
    wl->loop = ctx->loop;
    wl->buf = um_malloc(FLUSH_AT + LINE_MAX_BYTES);
    wl->timer.cb = on_flush_timer;
    um_context_set(ctx, &log_slot, wl);
    return wl;
}

static void count(const struct um_access_rec *r)
{
    struct um_metrics_worker *m = um_metrics_worker();
    int slot = r->route_slot >= 0 && r->route_slot < UM_METRICS_MAX_ROUTES ? r->route_slot : 0;
    um_counter_add(&m->requests[slot][um_metrics_status_class(r->status)], 1);
    um_counter_add(&m->bytes_out, r->bytes_out);
    const struct um_cache_status *cs = r->cache;
    if (cs == NULL)
        return;
    if (cs->hit) {
        um_counter_add(&m->cache_hits, 1);
    } else if (cs->fwd == UM_FWD_STALE) {
        um_counter_add(&m->cache_stale, 1);
        if (cs->fwd_status == 304)
            um_counter_add(&m->cache_revalidated, 1);
    } else if (cs->collapsed) {
        um_counter_add(&m->cache_coalesced, 1);
    } else if (cs->fwd == UM_FWD_URI_MISS || cs->fwd == UM_FWD_VARY_MISS ||
               cs->fwd == UM_FWD_MISS) {
        um_counter_add(&m->cache_misses, 1);
    }
}

void um_access_log_request(struct um_context *ctx, const struct um_config *cfg,
                           const struct um_access_rec *r)
{
    count(r);
    if (cfg == NULL || !um_access_log_conf(cfg)->enabled) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct worker_log *wl = worker_log(ctx);
    if (wl == NULL) {
        char line[LINE_MAX_BYTES];
        size_t n = um_access_log_format(line, sizeof line, um_access_log_conf(cfg)->format, r,
                                        ts.tv_sec, (int)(ts.tv_nsec / 1000000));
        if (n >= sizeof line) {
            n = sizeof line - 1;
            line[n - 1] = '\n';
        }
        write_all(line, n);
        return;
    }
    size_t n =
        um_access_log_format(wl->buf + wl->len, LINE_MAX_BYTES, um_access_log_conf(cfg)->format, r,
                             ts.tv_sec, (int)(ts.tv_nsec / 1000000));
    if (n >= LINE_MAX_BYTES) {
        /* Cut to the buffer, still one line. */
        n = LINE_MAX_BYTES - 1;
        wl->buf[wl->len + n - 1] = '\n';
    }
    wl->len += n;
    if (wl->len >= FLUSH_AT)
        flush_worker(wl);
    else if (!um_loop_timer_armed(&wl->timer))
        um_loop_timer_start(wl->loop, &wl->timer, FLUSH_MS);
}

/* ---------------------------------------------------------------- files */

static int open_log(const char *path, char *err, size_t errlen, const struct um_config *cfg)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (cfg)
            snprintf(err, errlen, "%s:%d: access_log.path: cannot open '%s': %s", cfg->file,
                     um_access_log_conf(cfg)->line, path, strerror(errno));
        else
            snprintf(err, errlen, "access log: cannot open '%s': %s", path, strerror(errno));
    }
    return fd;
}

/* Puts fd (or stderr when fd < 0) in place as the workers' descriptor. */
static void install(int fd)
{
    int src = fd >= 0 ? fd : STDERR_FILENO;
    int cur = atomic_load_explicit(&out_fd, memory_order_relaxed);
    if (cur < 0) {
        int d = fcntl(src, F_DUPFD_CLOEXEC, 3);
        if (d >= 0)
            atomic_store_explicit(&out_fd, d, memory_order_release);
    } else {
        dup3(src, cur, O_CLOEXEC);
    }
    if (fd >= 0)
        close(fd);
}

bool um_access_log_configure(const struct um_config *cfg, char *err, size_t errlen)
{
    const struct um_access_log_conf *al = um_access_log_conf(cfg);
    if (!al->enabled)
        return true; /* the descriptor stays; the configuration says not to write */
    if (al->path == NULL) {
        if (cur_path != NULL || atomic_load(&out_fd) < 0)
            install(-1);
        free(cur_path);
        cur_path = NULL;
        return true;
    }
    int fd = open_log(al->path, err, errlen, cfg);
    if (fd < 0)
        return false;
    install(fd);
    free(cur_path);
    cur_path = um_strndup(al->path, strlen(al->path));
    return true;
}

bool um_access_log_reopen(char *err, size_t errlen)
{
    if (cur_path == NULL)
        return true;
    int fd = open_log(cur_path, err, errlen, NULL);
    if (fd < 0)
        return false;
    install(fd);
    return true;
}
