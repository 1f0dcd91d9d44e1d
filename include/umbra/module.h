/* SPDX-License-Identifier: BSD-2-Clause */
/* A module's record: what the runtime needs to know of a module, so that the loop, the
 * context and the server name none (nginx's ngx_module_t and h2o's handlers are the
 * models). Each module folder defines one, const and static in storage:
 *
 *     const struct um_module um_NAME_module = { .name = "NAME", ... };
 *
 * and the server lists it once (src/server/modules.c). A new module is a folder and one
 * line in that list.
 *
 * Threads: records are constant; read by any thread. */
#ifndef UMBRA_MODULE_H
#define UMBRA_MODULE_H

#include "umbra/context.h"

struct um_buf;
struct um_config;
struct um_metric_block;

struct um_module {
    const char *name;
    /* The module's slots in every worker's context (umbra/context.h), ended by NULL;
     * NULL when it keeps no state per worker. The module makes and frees that state
     * itself, as context.h says. */
    struct um_context_slot *const *slots;
    /* The module's settings that a reload cannot change: called on SIGHUP, on the main
     * thread, with the running configuration and the new one (both borrowed for the
     * call) and the module's running state (um_module_run; NULL when it does not run);
     * logs a warning for what changed, whose running value stays. NULL: every setting of
     * the module takes effect at a reload. */
    void (*check_reload)(const struct um_config *was, const struct um_config *now, void *running);
    /* Puts a configuration's settings into effect for the process (a file to open), at
     * start and at each reload, on the main thread, before the workers see it. Returns
     * false with "FILE:LINE: message" in err when it cannot: the start fails, a reload is
     * refused (what ran before stays). NULL: nothing to do. */
    bool (*configure)(const struct um_config *c, char *err, size_t errlen);
    /* Checks what the loader cannot (the files a setting names, OpenSSL's view of the
     * certificates, a store's free space): run by `umbra -t`, at start and at each reload,
     * on the main thread, before anything is bound. Returns false with "FILE:LINE:
     * message" (or "FILE: message") in err. NULL: nothing to check. */
    bool (*verify)(const struct um_config *c, char *err, size_t errlen);
    /* State one configuration needs while it runs, beside its origins (the certificate
     * store, the workers' Lua states), held by the runtime (umbra/runtime.h,
     * um_runtime_state): the workers and connections take it with their runtime, and it
     * is dropped with the runtime, on the main thread, after its last use. make runs on
     * the main thread at start and at each reload, before anything changes (a failure
     * fails the start or refuses the reload); was and was_state are the running
     * configuration and this module's state in it (NULL at start): make may return
     * was_state again, with a reference of its own, when now does not change it.
     * workers is the number of workers that run; 0 for `umbra -t` (um_modules_try), where
     * nothing will serve with the state: make starts no thread then. Returns the state, or NULL:
     * none (err empty) or a failure ("FILE:LINE: message" in err). NULL make: no such state. */
    void *(*make)(const struct um_config *now, const struct um_config *was, void *was_state,
                  int workers, char *err, size_t errlen);
    void (*drop)(void *state);
    /* A descriptor of state (from make) the main thread polls for reading, or -1 (a
     * certificate directory's watch), and what to do when it is readable (main thread).
     * Only the running runtime's state is watched. NULL: none. */
    int (*watch_fd)(void *state);
    void (*on_watch)(void *state);
    /* SIGHUP, on the running runtime's state, before the configuration is read again
     * (whether or not it then loads): reads again the files state was made from (the
     * certificates), logging what it did. NULL: nothing. */
    void (*reread)(void *state);
    /* Its settings: the global (and route key) it owns, their reader and documentation
     * (umbra/settings.h); its part of a snapshot is um_config_part(c, settings). NULL:
     * it has no settings of its own. */
    const struct um_settings *settings;
    /* Its counters (umbra/metrics.h): given their place by um_modules_init, before any
     * worker starts, and shown in /metrics in the order of their table. NULL: none. */
    struct um_metric_block *counters;
    /* The rest of its /metrics lines (gauges of its running state, histograms; running
     * NULL: it does not run, and may add nothing), and its member of /status.json
     * ("NAME":{...}; called only while it runs: the admin writes "NAME":null otherwise),
     * made from running: the state the server gave um_module_run. Called on the worker
     * that serves the admin connection, maybe on two workers at once: read only what any
     * thread may (atomics, the module's own locks); NULL: nothing to add (the counters alone are shown). */
    void (*metrics)(struct um_buf *b, void *running);
    void (*status)(struct um_buf *b, void *running);
};

/* The list of every module's record, ended by NULL, in the order the runtime walks it.
 * Defined by the server floor (src/server/modules.c): only the server may name it. */
extern const struct um_module *const um_modules[];

/* Gives every module's slots their indexes, in the order of um_modules (so they are the
 * same from run to run). Called once by the server before any worker starts. */
void um_modules_init(void);

/* Runs every module's verify (above) on c, in the order of the list; false with the
 * first failure's message in err. */
bool um_modules_verify(const struct um_config *c, char *err, size_t errlen);

/* What `umbra -t` does beyond verify: makes every module's state for c as a start would
 * (running the file in each worker's Lua state, loading the certificates), then drops it.
 * False with the first failure's message in err. */
bool um_modules_try(const struct um_config *c, char *err, size_t errlen);

/* Where m is in um_modules: the index of its state in a runtime (umbra/runtime.h). */
size_t um_module_index(const struct um_module *m);

#define UM_MODULES_MAX 64

/* The process-wide state of m while it runs (the disk tier, the L2), for its renderers;
 * NULL when it stops. Set by the server on the main thread, read on the admin thread. */
void um_module_run(const struct um_module *m, void *running);
void *um_module_running(const struct um_module *m);

#endif
