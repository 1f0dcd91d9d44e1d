/* SPDX-License-Identifier: BSD-2-Clause */
#include "umbra/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

_Atomic int um_log_level = UM_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static _Thread_local int ctx_worker = -1;
static _Thread_local uint64_t ctx_conn;

void um_log_context(int worker, uint64_t conn)
{
    ctx_worker = worker;
    ctx_conn = conn;
}

uint64_t um_log_set_conn(uint64_t conn)
{
    uint64_t old = ctx_conn;
    ctx_conn = conn;
    return old;
}

uint64_t um_log_conn(void)
{
    return ctx_conn;
}

void um_log(enum um_log_level level, const char *fmt, ...)
{
    if (level > um_log_level_get())
        return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, level_names[level]);
    if (ctx_worker >= 0 && ctx_conn != 0)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "[w%d c%llu] ", ctx_worker,
                      (unsigned long long)ctx_conn);
    else if (ctx_worker >= 0)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "[w%d] ", ctx_worker);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line keeps lines from different threads whole. */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
