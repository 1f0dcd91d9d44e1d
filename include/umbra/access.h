/* SPDX-License-Identifier: BSD-2-Clause */
/* Access rules without Lua (src/access/): allow and deny lists per route, basic auth per
 * route from an htpasswd file, and header rules (set, add, remove) on the request before
 * its origin and on the response before its head goes out, globally and per route.
 *
 *     headers = { request = { set = {...}, add = {...}, remove = {...} }, response = {...} }
 *     routes = { { path = "/", allow = { "10.0.0.0/8" }, deny = { "10.1.0.0/16" },
 *                  auth = { basic = "staff.htpasswd", realm = "staff" },
 *                  headers = { response = { set = { ["X-Frame-Options"] = "DENY" } } } } }
 *
 * The server asks um_access_check before any hook or origin sees the request. Basic auth
 * verifies a password with libcrypt (bcrypt, SHA-crypt), which costs tens of milliseconds:
 * never on a worker's loop. A password verified once is remembered in a process-wide
 * cache keyed by a keyed hash (two SipHash-2-4 with keys drawn at start) of the user, the
 * password and the file's hash of it, so that a request with the right password costs a
 * lookup; a miss goes to the verifier thread (um_access_verify), which posts the answer
 * back to the worker's loop.
 *
 * Threads: parts are read-only once loaded, read by any worker; um_access_verify may be
 * called by any worker; the cache takes its own lock. */
#ifndef UMBRA_ACCESS_H
#define UMBRA_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

#include "umbra/common.h"
#include "umbra/loop.h"
struct um_context; /* umbra/context.h */

struct um_config;
struct um_route;
struct um_request;
struct um_netmask;
struct um_header;

/* One field of a rule: name and value (NUL-terminated too), owned by the snapshot. */
struct um_access_field {
    um_str name;
    um_str value;
};

/* set (replace every field of the name by one), add (one more), remove (every one). */
struct um_access_rules {
    struct um_access_field *set, *add;
    size_t num_set, num_add;
    um_str *remove;
    size_t num_remove;
};

struct um_access_headers {
    struct um_access_rules request, response;
};

/* One line of an htpasswd file: "user:hash" with a hash libcrypt checks. */
struct um_access_user {
    char *name;
    char *hash;
    size_t name_len;
};

/* auth = { basic = "FILE", realm = "staff", pass_auth = false } */
struct um_access_auth {
    char *file;      /* absolute */
    char *realm;     /* "Restricted" when not given */
    char *challenge; /* the WWW-Authenticate value: Basic realm="..." */
    bool pass;       /* pass_auth: the Authorization field goes on to the origin */
    struct um_access_user *users;
    size_t num_users;
    uint64_t tag_key[2]; /* the verified-password cache's key for these users (their
                          * names and hashes: an edited file changes every tag) */
};

struct um_access_store; /* what a snapshot's parts point to (access/settings.c) */

/* The module's part of a snapshot and of each route (umbra/settings.h). */
struct um_access_conf {
    struct um_access_store *store; /* the global part's; routes' copies borrow it */
    const struct um_netmask *allow, *deny;
    size_t num_allow, num_deny;
    bool has_allow;                         /* allow given: everyone else gets 403 */
    const struct um_access_headers *global; /* the global headers = ...; or NULL */
    const struct um_access_headers *route;  /* the route's headers = ...; or NULL */
    const struct um_access_auth *auth;      /* NULL: no basic auth */
};

extern const struct um_settings um_access_settings;

/* The part of route r (NULL: a request without a route, which only the global header
 * rules apply to) in snapshot c. Never NULL. */
const struct um_access_conf *um_access_conf(const struct um_config *c, const struct um_route *r);

/* What um_access_check found. */
enum um_access_result {
    UM_ACCESS_OK = 0,             /* go on */
    UM_ACCESS_VERIFY = 1,         /* a password to verify: um_access_verify, then go on */
    UM_ACCESS_UNAUTHORIZED = 401, /* answer 401 with WWW-Authenticate: a->auth->challenge */
    UM_ACCESS_FORBIDDEN = 403,
};

/* A password to verify off the loop. The caller makes it (um_access_check fills user,
 * pass and hash), owns it, and frees it with free() once on_done ran; cb runs on loop's
 * thread with ok set. A job whose requester left is freed by its on_done all the same. */
struct um_access_job {
    struct um_task task; /* task.cb: the caller's, run on loop with ok set */
    struct um_loop *loop;
    bool ok;
    void *owner; /* the caller's */
    struct um_access_job *_next;
    unsigned char tag[16]; /* the credentials' tag, for the cache once verified */
    char user[256], pass[256], hash[256];
};

/* Checks client_ip (text, as the exchange has it) against a's lists and, when a asks for
 * basic auth, req's Authorization field. UM_ACCESS_VERIFY fills *job (zeroed by the
 * caller) with the credentials to verify; UM_ACCESS_OK without auth, or with a password
 * the cache has seen verified. Reads only; any worker. */
enum um_access_result um_access_check(const struct um_access_conf *a, const struct um_request *req,
                                      const char *client_ip, struct um_access_job *job);

/* Queues job (job->loop: ctx's loop) to the verifier thread (started on the first call),
 * which checks the password, remembers it when right and posts job->task to job->loop.
 * Returns false, keeping nothing, when UM_ACCESS_QUEUE_MAX jobs wait already (the caller
 * answers 503). When ctx's worker stops, its jobs are given back to their task.cb on that
 * worker, ok false, before the stop returns (the verifier never posts to a freed loop). */
#define UM_ACCESS_QUEUE_MAX 1024
bool um_access_verify(struct um_context *ctx, struct um_access_job *job);

/* Applies a's request rules (the global ones, then the route's) to req's fields, and
 * takes the Authorization field off unless a route's auth has pass_auth. Values point
 * into the snapshot, which outlives the request. */
void um_access_request(const struct um_access_conf *a, struct um_request *req);

/* Whether a has response rules to apply. */
bool um_access_has_response_rules(const struct um_access_conf *a);

/* The response fields in (n of them) after a's response rules (global, then the
 * route's), into out (room for cap fields); returns the count. */
size_t um_access_response(const struct um_access_conf *a, const struct um_header *in, size_t n,
                          struct um_header *out, size_t cap);

/* The verified-password cache's key for a list of users (um_access_auth.tag_key): drawn
 * from the process's random key and every name and hash. */
void um_access_auth_key(const struct um_access_user *users, size_t n, uint64_t out[2]);

/* --- pure parts, for the tests --------------------------------------------------------- */

/* Reads an htpasswd file's text (len bytes) into users (um_calloc'd, *n of them; each
 * entry's strings freed with the array by um_access_users_free). Returns false with
 * "line N: message" in err for a line it refuses (MD5 "$apr1$", DES crypt, plain text,
 * a malformed line, a user twice). */
bool um_access_parse_htpasswd(const char *text, size_t len, struct um_access_user **users,
                              size_t *n, char *err, size_t errlen);
void um_access_users_free(struct um_access_user *users, size_t n);

/* Whether pass is user's password by hash (libcrypt; slow: never on a loop). */
bool um_access_crypt_check(const char *pass, const char *hash);

#endif
