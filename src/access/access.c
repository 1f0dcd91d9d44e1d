/* SPDX-License-Identifier: BSD-2-Clause */
/* Access rules at request time (umbra/access.h): the allow and deny lists, basic auth with
 * its verified-credentials cache and verifier thread, and the header rules.
 *
 * Why a cache and a thread: bcrypt at the cost htpasswd -B uses (5) takes a few
 * milliseconds, at the costs operators pick (10 and up) tens of them; SHA-crypt's 5000
 * rounds about one. Run on a worker's loop it would stall every connection of the worker
 * for that long, per request. So a worker only looks up the cache: an entry is the
 * 128-bit tag (SipHash-2-4's 128-bit output, a MAC) of the Authorization value as the
 * client sent it, under a key drawn from a random one (never leaves the process) and the
 * route's users, names and hashes, put there by the verifier thread once it checked the
 * password. The users are part of the key so that a reload with a changed file makes old
 * entries miss (they age out: the table is direct-mapped and bounded). A value the cache
 * knows costs one hash: no decoding, no user lookup. Only verified passwords are
 * kept; a wrong one costs a verification each time, as with any server that hashes.
 *
 * The table takes no lock: a slot is two atomic 64-bit words, read and written relaxed, so
 * that workers checking the same password read a shared cache line instead of taking
 * turns at a mutex (measured: bench/traffic.sh auth-ok). A reader that meets a slot being
 * rewritten may see one word of each tag; that pair matches its own tag only if both
 * halves do, and each half is 64 bits of a keyed MAC of the whole input, so it matches only
 * a tag that was verified (but for a 2^-64 chance). `queue_lock` guards the job queue the verifier thread waits on; it is
 * not held while hashing. */
#include <crypt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "umbra/access.h"
#include "umbra/base64.h"
#include "umbra/buf.h"
#include "umbra/config.h"
#include "umbra/context.h"
#include "umbra/http1.h"
#include "umbra/log.h"
#include "umbra/module.h"
#include "umbra/settings.h"
#include "umbra/siphash.h"

/* ---------------------------------------------------------------- the part */

const struct um_access_conf *um_access_conf(const struct um_config *c, const struct um_route *r)
{
    return r ? um_route_part(r, &um_access_settings) : um_config_part(c, &um_access_settings);
}

/* ---------------------------------------------------------------- htpasswd */

/* The schemes libcrypt checks that are worth a password: bcrypt and SHA-crypt. */
static bool accepted_hash(const char *h)
{
    return strncmp(h, "$2y$", 4) == 0 || strncmp(h, "$2b$", 4) == 0 || strncmp(h, "$2a$", 4) == 0 ||
           strncmp(h, "$5$", 3) == 0 || strncmp(h, "$6$", 3) == 0;
}

/* crypt_checksalt reads the setting only: a hash cut short would never match, and the
 * user never get in, with no word of why. bcrypt is 60 characters; SHA-crypt's checksum
 * after the last '$' is 43 (SHA-256) or 86 (SHA-512). */
static bool whole_hash(const char *h)
{
    if (h[1] == '2') return strlen(h) == 60;
    const char *d = strrchr(h, '$');
    return strlen(d + 1) == (h[1] == '5' ? 43u : 86u);
}

static const char *refusal(const char *h, size_t len)
{
    if (strncmp(h, "$apr1$", 6) == 0 || strncmp(h, "$1$", 3) == 0)
        return "an MD5 hash ($apr1$), which is refused: too fast to resist a search; write "
               "the password again with htpasswd -B (bcrypt)";
    if (strncmp(h, "{SHA}", 5) == 0)
        return "a SHA-1 hash ({SHA}), which is refused: unsalted; write the password again "
               "with htpasswd -B (bcrypt)";
    if (len == 13 && h[0] != '$')
        return "a crypt(3) DES hash, which is refused: it uses 8 characters of the password; "
               "write the password again with htpasswd -B (bcrypt)";
    return "a plain-text password or an unknown scheme, which is refused: only bcrypt "
           "($2y$, htpasswd -B) and SHA-crypt ($5$, $6$) are taken";
}

bool um_access_parse_htpasswd(const char *text, size_t len, struct um_access_user **users,
                              size_t *n, char *err, size_t errlen)
{
    size_t cap = 0, count = 0;
    struct um_access_user *u = NULL;
    int line = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        line++;
        size_t e = end;
        if (e > pos && text[e - 1] == '\r') e--;
        const char *l = text + pos;
        size_t ll = e - pos;
        pos = end + 1;
        size_t i = 0;
        while (i < ll && (l[i] == ' ' || l[i] == '\t'))
            i++;
        if (i == ll || l[i] == '#') continue; /* blank or a comment */
        const char *colon = memchr(l, ':', ll);
        if (colon == NULL || colon == l) {
            snprintf(err, errlen, "line %d: expected \"user:hash\"", line);
            goto fail;
        }
        size_t ul = (size_t)(colon - l), hl = ll - ul - 1;
        const char *h = colon + 1;
        if (memchr(l, '\0', ll) != NULL || hl == 0) {
            snprintf(err, errlen, "line %d: expected \"user:hash\"", line);
            goto fail;
        }
        char hash[256];
        if (hl >= sizeof hash || !accepted_hash(h)) {
            snprintf(err, errlen, "line %d: user '%.*s' has %s", line, (int)(ul > 64 ? 64 : ul), l,
                     hl >= sizeof hash ? "a hash too long to be one" : refusal(h, hl));
            goto fail;
        }
        memcpy(hash, h, hl);
        hash[hl] = '\0';
        /* libxcrypt calls SHA-256-crypt "legacy" and a low bcrypt cost "too cheap": both
         * still verify, and both are what htpasswd writes. */
        int cs = crypt_checksalt(hash);
        if (cs == CRYPT_SALT_INVALID || cs == CRYPT_SALT_METHOD_DISABLED || !whole_hash(hash)) {
            snprintf(err, errlen, "line %d: user '%.*s' has a hash libcrypt does not take", line,
                     (int)(ul > 64 ? 64 : ul), l);
            goto fail;
        }
        for (size_t k = 0; k < count; k++)
            if (strlen(u[k].name) == ul && memcmp(u[k].name, l, ul) == 0) {
                snprintf(err, errlen, "line %d: user '%.*s' is listed twice", line,
                         (int)(ul > 64 ? 64 : ul), l);
                goto fail;
            }
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            struct um_access_user *nu = realloc(u, cap * sizeof(*nu));
            UM_ASSERT(nu != NULL);
            u = nu;
        }
        u[count].name = um_strndup(l, ul);
        u[count].hash = um_strndup(h, hl);
        u[count].name_len = ul;
        count++;
    }
    if (u == NULL) u = um_calloc(1, sizeof(*u));
    *users = u;
    *n = count;
    return true;
fail:
    um_access_users_free(u, count);
    return false;
}

void um_access_users_free(struct um_access_user *users, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(users[i].name);
        free(users[i].hash);
    }
    free(users);
}

bool um_access_crypt_check(const char *pass, const char *hash)
{
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    UM_ASSERT(cd != NULL);
    const char *out = crypt_rn(pass, hash, cd, (int)sizeof(*cd));
    size_t hl = strlen(hash);
    /* Compared in full, without an early exit on the first differing byte. */
    bool ok = out != NULL && strlen(out) == hl;
    unsigned char diff = 0;
    for (size_t i = 0; ok && i < hl; i++)
        diff |= (unsigned char)(out[i] ^ hash[i]);
    ok = ok && diff == 0;
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return ok;
}

/* ---------------------------------------------------------------- the cache */

#define CACHE_SLOTS 4096 /* verified credentials remembered, at most */
#define MAC_LEN 16

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
/* The process's SipHash key, drawn at start; each user's tag key is drawn from it. */
static uint64_t mac_key[2];
static _Atomic uint64_t cache[CACHE_SLOTS][2]; /* all zero: empty */

static void make_key(void)
{
    size_t got = 0;
    unsigned char *k = (unsigned char *)mac_key;
    while (got < sizeof mac_key) {
        ssize_t r = getrandom(k + got, sizeof mac_key - got, 0);
        UM_ASSERT(r > 0);
        got += (size_t)r;
    }
}

void um_access_auth_key(const struct um_access_user *users, size_t n, uint64_t out[2])
{
    pthread_once(&key_once, make_key);
    struct um_buf b;
    um_buf_init(&b);
    um_buf_append(&b, "k", 1); /* the byte that tells the two halves apart */
    for (size_t i = 0; i < n; i++) {
        uint32_t lens[2] = {(uint32_t)users[i].name_len, (uint32_t)strlen(users[i].hash)};
        um_buf_append(&b, lens, sizeof lens);
        um_buf_append(&b, users[i].name, lens[0]);
        um_buf_append(&b, users[i].hash, lens[1]);
    }
    for (int j = 0; j < 2; j++) {
        b.base[0] = (char)j;
        out[j] = um_siphash24(mac_key, b.base, b.len);
    }
    um_buf_dispose(&b);
}

/* The tag of an Authorization value as it came (a different spelling of the same
 * credentials is only another miss) under a user list's key: SipHash-2-4's 128 bits. */
static void credentials_tag(const uint64_t key[2], const char *value, size_t len,
                            unsigned char out[MAC_LEN])
{
    uint64_t t[2];
    um_siphash24_128(key, value, len, t);
    memcpy(out, t, MAC_LEN);
}

static size_t slot_of(const unsigned char mac[MAC_LEN])
{
    uint32_t v;
    memcpy(&v, mac, sizeof v);
    return v % CACHE_SLOTS;
}

static bool cache_has(const unsigned char mac[MAC_LEN])
{
    size_t s = slot_of(mac);
    uint64_t t[2];
    memcpy(t, mac, MAC_LEN);
    return atomic_load_explicit(&cache[s][0], memory_order_relaxed) == t[0] &&
           atomic_load_explicit(&cache[s][1], memory_order_relaxed) == t[1];
}

static void cache_put(const unsigned char mac[MAC_LEN])
{
    size_t s = slot_of(mac);
    uint64_t t[2];
    memcpy(t, mac, MAC_LEN);
    atomic_store_explicit(&cache[s][0], t[0], memory_order_relaxed);
    atomic_store_explicit(&cache[s][1], t[1], memory_order_relaxed);
}

/* ---------------------------------------------------------------- the verifier thread */

static pthread_once_t thread_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t job_done = PTHREAD_COND_INITIALIZER; /* busy went back to NULL */
static struct um_access_job *queue_head, **queue_tail = &queue_head;
static size_t queue_len;
static struct um_access_job *busy; /* the job being hashed, under queue_lock */

static void *verifier(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (queue_head == NULL)
            pthread_cond_wait(&queue_wake, &queue_lock);
        struct um_access_job *j = queue_head;
        queue_head = j->_next;
        queue_len--;
        if (queue_head == NULL) queue_tail = &queue_head;
        busy = j;
        pthread_mutex_unlock(&queue_lock);
        j->ok = um_access_crypt_check(j->pass, j->hash);
        if (j->ok) cache_put(j->tag);
        explicit_bzero(j->pass, sizeof j->pass);
        /* Posted under the lock: a worker's stop (on_worker_stop) that waits for this job
         * finds it posted, and withdraws it, before its loop is freed. */
        pthread_mutex_lock(&queue_lock);
        um_loop_post(j->loop, &j->task);
        busy = NULL;
        pthread_cond_broadcast(&job_done);
        pthread_mutex_unlock(&queue_lock);
    }
    return NULL;
}

static void start_thread(void)
{
    pthread_t t;
    UM_ASSERT(pthread_create(&t, NULL, verifier, NULL) == 0);
    pthread_detach(t);
}

/* A worker that stops (its connections closed: every job's requester has left) takes
 * its jobs back, so that the verifier never posts to a loop that is freed next: the
 * queued ones, and the one being hashed once it is done. Each is given to its on_done,
 * not passed, on this thread. */
static void on_worker_stop(struct um_context *ctx, void *state)
{
    (void)state;
    struct um_loop *l = ctx->loop;
    struct um_access_job *mine = NULL, **tail = &mine, *waited = NULL;
    pthread_mutex_lock(&queue_lock);
    for (struct um_access_job **p = &queue_head; *p;) {
        struct um_access_job *j = *p;
        if (j->loop != l) {
            p = &j->_next;
            continue;
        }
        *p = j->_next;
        queue_len--;
        j->_next = NULL;
        *tail = j;
        tail = &j->_next;
    }
    queue_tail = &queue_head;
    while (*queue_tail)
        queue_tail = &(*queue_tail)->_next;
    while (busy != NULL && busy->loop == l) {
        waited = busy;
        pthread_cond_wait(&job_done, &queue_lock);
    }
    pthread_mutex_unlock(&queue_lock);
    if (waited) {
        um_loop_unpost(l, &waited->task);
        waited->ok = false;
        waited->task.cb(&waited->task);
    }
    while (mine) {
        struct um_access_job *j = mine;
        mine = j->_next;
        explicit_bzero(j->pass, sizeof j->pass);
        j->ok = false;
        j->task.cb(&j->task);
    }
}

/* Marks the workers that queued a job (state: a non-NULL marker), for their stop. */
static struct um_context_slot jobs_slot = {.name = "password checks queued",
                                           .stop = on_worker_stop};

bool um_access_verify(struct um_context *ctx, struct um_access_job *job)
{
    pthread_once(&thread_once, start_thread);
    if (um_context_get(ctx, &jobs_slot) == NULL) um_context_set(ctx, &jobs_slot, &jobs_slot);
    UM_ASSERT(job->loop == ctx->loop);
    pthread_mutex_lock(&queue_lock);
    /* A flood of wrong passwords would otherwise queue without end, each costing a hash. */
    bool ok = queue_len < UM_ACCESS_QUEUE_MAX;
    if (ok) {
        job->_next = NULL;
        *queue_tail = job;
        queue_tail = &job->_next;
        queue_len++;
        pthread_cond_signal(&queue_wake);
    }
    pthread_mutex_unlock(&queue_lock);
    return ok;
}

/* ---------------------------------------------------------------- the check */

/* "Basic TOKEN" decoded into cred ("user:pass", *len bytes, not NUL-terminated; the user
 * its first *user_len); false when it is not one or a part is too long for a job. */
#define CRED_MAX 512
static bool parse_basic(um_str v, char cred[CRED_MAX], size_t *len, size_t *user_len)
{
    size_t i = 0;
    if (v.len < 6 || !um_str_eq_ci((um_str){v.base, 5}, "basic") || v.base[5] != ' ') return false;
    i = 6;
    while (i < v.len && v.base[i] == ' ')
        i++;
    size_t e = v.len;
    while (e > i && (v.base[e - 1] == ' ' || v.base[e - 1] == '\t'))
        e--;
    size_t dl;
    if (!um_base64_decode((um_str){v.base + i, e - i}, cred, CRED_MAX, &dl)) return false;
    const char *colon = memchr(cred, ':', dl);
    size_t ul = colon ? (size_t)(colon - cred) : 0;
    if (colon == NULL || memchr(cred, '\0', dl) != NULL || ul == 0 || ul >= 256 ||
        dl - ul - 1 >= 256) {
        explicit_bzero(cred, dl);
        return false;
    }
    *len = dl;
    *user_len = ul;
    return true;
}

enum um_access_result um_access_check(const struct um_access_conf *a, const struct um_request *req,
                                      const char *client_ip, struct um_access_job *job)
{
    if (a->num_deny > 0 && um_netmask_match_text(a->deny, a->num_deny, client_ip))
        return UM_ACCESS_FORBIDDEN;
    if (a->has_allow && !um_netmask_match_text(a->allow, a->num_allow, client_ip))
        return UM_ACCESS_FORBIDDEN;
    if (a->auth == NULL) return UM_ACCESS_OK;
    const um_str *v = um_http1_find_header(req, "authorization");
    if (v == NULL) return UM_ACCESS_UNAUTHORIZED;
    /* The value's tag first: a password verified before costs no decoding, no lookup. */
    unsigned char mac[MAC_LEN];
    credentials_tag(a->auth->tag_key, v->base, v->len, mac);
    if (cache_has(mac)) return UM_ACCESS_OK;
    char cred[CRED_MAX];
    size_t len, ul;
    if (!parse_basic(*v, cred, &len, &ul)) return UM_ACCESS_UNAUTHORIZED;
    const struct um_access_user *u = NULL;
    for (size_t i = 0; i < a->auth->num_users && u == NULL; i++)
        if (a->auth->users[i].name_len == ul && memcmp(a->auth->users[i].name, cred, ul) == 0)
            u = &a->auth->users[i];
    if (u != NULL) {
        memcpy(job->user, cred, ul);
        job->user[ul] = '\0';
        memcpy(job->pass, cred + ul + 1, len - ul - 1);
        job->pass[len - ul - 1] = '\0';
        memcpy(job->hash, u->hash, strlen(u->hash) + 1);
        memcpy(job->tag, mac, sizeof job->tag);
    }
    explicit_bzero(cred, len);
    return u != NULL ? UM_ACCESS_VERIFY : UM_ACCESS_UNAUTHORIZED;
}

/* ---------------------------------------------------------------- header rules */

static bool named(const um_str *name, const struct um_header *h)
{
    return name->len == h->name.len && strncasecmp(name->base, h->name.base, name->len) == 0;
}

/* Applies r to the n fields of h (room for cap); returns the new count. */
static size_t apply(const struct um_access_rules *r, struct um_header *h, size_t n, size_t cap)
{
    for (size_t k = 0; k < r->num_remove + r->num_set; k++) {
        const um_str *name = k < r->num_remove ? &r->remove[k] : &r->set[k - r->num_remove].name;
        size_t w = 0;
        for (size_t i = 0; i < n; i++)
            if (!named(name, &h[i])) h[w++] = h[i];
        n = w;
    }
    for (size_t k = 0; k < r->num_set && n < cap; k++)
        h[n++] = (struct um_header){r->set[k].name, r->set[k].value};
    for (size_t k = 0; k < r->num_add && n < cap; k++)
        h[n++] = (struct um_header){r->add[k].name, r->add[k].value};
    return n;
}

void um_access_request(const struct um_access_conf *a, struct um_request *req)
{
    if (a->auth && !a->auth->pass) {
        static const um_str authz = {"Authorization", 13};
        const struct um_access_rules r = {.remove = (um_str *)&authz, .num_remove = 1};
        req->num_headers = apply(&r, req->headers, req->num_headers, UM_HTTP1_MAX_HEADERS);
    }
    if (a->global)
        req->num_headers =
            apply(&a->global->request, req->headers, req->num_headers, UM_HTTP1_MAX_HEADERS);
    if (a->route)
        req->num_headers =
            apply(&a->route->request, req->headers, req->num_headers, UM_HTTP1_MAX_HEADERS);
}

static bool has_rules(const struct um_access_rules *r)
{
    return r->num_set + r->num_add + r->num_remove > 0;
}

bool um_access_has_response_rules(const struct um_access_conf *a)
{
    return (a->global && has_rules(&a->global->response)) ||
           (a->route && has_rules(&a->route->response));
}

size_t um_access_response(const struct um_access_conf *a, const struct um_header *in, size_t n,
                          struct um_header *out, size_t cap)
{
    if (n > cap) n = cap;
    memcpy(out, in, n * sizeof(*out));
    if (a->global) n = apply(&a->global->response, out, n, cap);
    if (a->route) n = apply(&a->route->response, out, n, cap);
    return n;
}

/* ---------------------------------------------------------------- the record */

const struct um_module um_access_module = {
    .name = "access",
    .settings = &um_access_settings,
    .slots = (struct um_context_slot *const[]){&jobs_slot, NULL},
};
