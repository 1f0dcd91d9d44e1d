/* SPDX-License-Identifier: BSD-2-Clause */
/* Rate limits and the shared dictionary (src/limits/): state one for all workers.
 *
 *     rate_limits = { api = { rate = 10, burst = 20, key = "client", size = "10MB" } }
 *     routes = { { path = "/api/", upstream = "app", rate_limit = "api" } }
 *     shared = { counters = "1MB" }
 *
 * A rate limit is a token bucket per key (the client's address, the Host, a request
 * field, or what a script computes: umbra.limit): `rate` tokens a second, `burst` at
 * most, one token a request. The shared dictionary is umbra.shared.NAME in every
 * worker's Lua state. Both live in a store (struct um_store): a hash table split in 64
 * stripes, each with its own lock, its own least-recently-used list and its share of
 * `size`, so no operation holds more than one stripe's lock, and never while it waits
 * for anything else.
 *
 * Surviving a reload: the stores are process-wide, in a registry keyed by what a store
 * is (rate limit or dictionary, name, and its settings). Reading a configuration takes
 * a reference on the store its settings name, found again when another configuration
 * (the running one) has it, made otherwise; disposing of the configuration drops the
 * reference, and the last one frees the store. A reload that keeps a limit or a
 * dictionary as it was thus keeps its buckets and entries; a changed one starts empty.
 *
 * Threads: the settings are read on the main thread and read-only afterwards; every
 * store operation may run on any thread at once. */
#ifndef UMBRA_LIMITS_H
#define UMBRA_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "umbra/common.h"

struct um_config;
struct um_route;
struct um_request;
struct um_store;

/* ---------------------------------------------------------------- settings */

enum um_limit_key { UM_LIMIT_KEY_CLIENT, UM_LIMIT_KEY_HOST, UM_LIMIT_KEY_HEADER };

/* rate_limits.NAME */
struct um_limit_def {
    char *name;
    double rate, burst;
    enum um_limit_key key;
    char *header; /* key = "header:NAME": NAME lower-cased; else NULL */
    uint64_t size;
    struct um_store *store; /* a reference of the snapshot's (registry above) */
};

/* shared.NAME */
struct um_shared_def {
    char *name;
    uint64_t size;
    struct um_store *store;
};

/* The rate-limit module's part of a snapshot and of each route (a route's is a memcpy of
 * the global one: limits points to the global part's array, which its dispose frees). */
struct um_limits_conf {
    struct um_limit_def *limits;
    size_t num_limits;
    const struct um_limit_def *route; /* routes[N].rate_limit, or NULL */
};

struct um_shared_conf {
    struct um_shared_def *dicts;
    size_t num_dicts;
};

extern const struct um_settings um_limits_settings;
extern const struct um_settings um_shared_settings;

/* The parts of snapshot c (and of route r, which may be NULL); NULL for a snapshot made
 * by hand without them. */
const struct um_limits_conf *um_limits_conf(const struct um_config *c, const struct um_route *r);
const struct um_shared_conf *um_shared_conf(const struct um_config *c);
/* The limit or dictionary called name in c, or NULL. */
const struct um_limit_def *um_limits_find(const struct um_config *c, const char *name, size_t n);
struct um_store *um_shared_find(const struct um_config *c, const char *name, size_t n);

/* ---------------------------------------------------------------- the token bucket */

/* One request against a bucket of *tokens at time *last (seconds), refilled at rate up to
 * burst, at time now: takes a token and returns 0, or returns the seconds until one is
 * there (> 0) and takes none. A pure function (time is a parameter). */
double um_limit_bucket_take(double *tokens, double *last, double now, double rate, double burst);

/* Retry-After's value for a wait of `wait` seconds: whole seconds rounded up, at least 1. */
long um_limit_retry_after(double wait);

/* Seconds on the clock every store uses (CLOCK_MONOTONIC). */
double um_limits_now(void);

/* A request under limit d with key (any bytes; an empty key is counted like any other):
 * 0 when it may go on, else the seconds to wait. Counted in d's store. Any thread. */
double um_limit_take(const struct um_limit_def *d, um_str key, double now);

/* The key of req under d: the client's address, the Host, or the field's value (*key
 * borrows from req or client_ip). False when req has no such field: not limited. */
bool um_limit_key_of(const struct um_limit_def *d, const struct um_request *req,
                     const char *client_ip, um_str *key);

/* ---------------------------------------------------------------- the stores */

/* Makes a store of size bytes, not in the registry (tests); um_store_destroy frees it.
 * The registry's are made by the settings' readers (um__limits_store_ref). */
struct um_store *um_store_create(uint64_t size);
void um_store_destroy(struct um_store *s);

/* A dictionary's value: a string (borrowed: copied in and out), a number or a boolean. */
enum um_shared_type { UM_SHARED_NONE, UM_SHARED_STR, UM_SHARED_NUM, UM_SHARED_BOOL };
struct um_shared_value {
    enum um_shared_type type;
    double num; /* a number; a boolean: 0 or 1 */
    um_str str;
};

/* What a dictionary operation did. */
enum um_shared_result {
    UM_SHARED_OK,
    UM_SHARED_EXISTS,   /* add: the key is there */
    UM_SHARED_NOT_NUM,  /* incr: the value is not a number */
    UM_SHARED_TOO_BIG,  /* key and value do not fit in a stripe's share of the size */
};

/* ttl: seconds from now; 0: never expires. Every operation is atomic (one stripe lock).
 * get copies a string value into buf (cap bytes; a longer one is cut to cap and *full
 * gets its length): false when absent or expired. */
bool um_shared_get(struct um_store *s, um_str key, double now, struct um_shared_value *out,
                   char *buf, size_t cap, size_t *full);
enum um_shared_result um_shared_set(struct um_store *s, um_str key,
                                    const struct um_shared_value *v, double ttl, double now);
enum um_shared_result um_shared_add(struct um_store *s, um_str key,
                                    const struct um_shared_value *v, double ttl, double now);
/* Adds n to the number at key (created as init + n with ttl when absent); *out: the new
 * value. ttl is applied only to a new entry. */
enum um_shared_result um_shared_incr(struct um_store *s, um_str key, double n, double init,
                                     double ttl, double now, double *out);
/* Whether a live (unexpired) entry was there. */
bool um_shared_delete(struct um_store *s, um_str key, double now);
/* Calls cb with up to max keys that are not expired (0: all), one stripe at a time: cb
 * must not call the store. Returns how many. */
size_t um_shared_keys(struct um_store *s, size_t max, double now,
                      void (*cb)(void *arg, um_str key), void *arg);

/* A store's figures, summed over its stripes. */
struct um_store_stats {
    uint64_t entries, bytes, evicted, passed, limited;
};
void um_store_stats(struct um_store *s, struct um_store_stats *out);

#endif
