/* Stand-ins for the worker loop's clock and timers and for the log, for targets that
 * include an upstream source file with um_loop_now, um_loop_timer_stop and um_log
 * renamed to these (#define before the #include). Time stands still at 0; a timer only
 * records whether it is armed. */
#ifndef UMBRA_FUZZ_LOOP_STUBS_H
#define UMBRA_FUZZ_LOOP_STUBS_H

void fuzz_log(enum um_log_level level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}

uint64_t fuzz_loop_now(const struct um_loop *l)
{
    (void)l;
    return 0;
}

void fuzz_loop_timer_stop(struct um_loop *l, struct um_timer *t)
{
    (void)l;
    t->_index = 0;
}

#endif
