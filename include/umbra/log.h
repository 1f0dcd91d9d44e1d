/* Error log to stderr. Thread-safe: each line is one write(2). */
#ifndef UMBRA_LOG_H
#define UMBRA_LOG_H

enum um_log_level { UM_LOG_ERR, UM_LOG_WARN, UM_LOG_INFO, UM_LOG_DEBUG };

/* Lines above this level are dropped. Set once at start-up. */
extern enum um_log_level um_log_level;

/* Writes "TIMESTAMP [level] message\n" to stderr. */
void um_log(enum um_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define um_log_err(...) um_log(UM_LOG_ERR, __VA_ARGS__)
#define um_log_warn(...) um_log(UM_LOG_WARN, __VA_ARGS__)
#define um_log_info(...) um_log(UM_LOG_INFO, __VA_ARGS__)
#define um_log_debug(...) (um_log_level >= UM_LOG_DEBUG ? um_log(UM_LOG_DEBUG, __VA_ARGS__) : (void)0)

#endif
