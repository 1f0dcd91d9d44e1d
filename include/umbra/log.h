/* SPDX-License-Identifier: BSD-2-Clause */
/* Error log to stderr. Thread-safe: each line is one write(2). */
#ifndef UMBRA_LOG_H
#define UMBRA_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum um_log_level { UM_LOG_ERR, UM_LOG_WARN, UM_LOG_INFO, UM_LOG_DEBUG };

/* Lines above this level are dropped. Set at start-up and on reload (main thread), read
 * with relaxed atomics anywhere. */
extern _Atomic int um_log_level; /* an enum um_log_level */

/* Writes "TIMESTAMP [level] [wN cM] message\n" to stderr: "wN" is the worker of the
 * calling thread and "cM" the connection it is working on, when um_log_context set
 * them. */
void um_log(enum um_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's context for its lines: worker (-1: none), connection (0: none). */
void um_log_context(int worker, uint64_t conn);
/* Sets the connection of the calling thread's context; returns the previous one. */
uint64_t um_log_set_conn(uint64_t conn);
/* The connection of the calling thread's context (0: none). */
uint64_t um_log_conn(void);

static inline enum um_log_level um_log_level_get(void)
{
    return (enum um_log_level)atomic_load_explicit(&um_log_level, memory_order_relaxed);
}
static inline void um_log_level_set(enum um_log_level l)
{
    atomic_store_explicit(&um_log_level, (int)l, memory_order_relaxed);
}

#define um_log_err(...) um_log(UM_LOG_ERR, __VA_ARGS__)
#define um_log_warn(...) um_log(UM_LOG_WARN, __VA_ARGS__)
#define um_log_info(...) um_log(UM_LOG_INFO, __VA_ARGS__)
#define um_log_debug(...) (um_log_level_get() >= UM_LOG_DEBUG ? um_log(UM_LOG_DEBUG, __VA_ARGS__) : (void)0)

#endif
