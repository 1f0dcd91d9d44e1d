/* SPDX-License-Identifier: BSD-2-Clause */
/* The purge bus (see umbra/l2.h): a thread with a loop of its own and two Redis
 * connections, one subscribed to L2_CHANNEL, one that publishes and deletes.
 *
 * A message is text: "NODE\nPURGE", PURGE the wire form of umbra/purge.h (the one a
 * ring's peers send each other); no purge holds a newline, so the split is exact.
 *
 * What a purge covers in Redis is deleted once, by the node that published it:
 *   URL:    DEL of the key;
 *   tags:   one script per purge that deletes every member of each tag's set, then the
 *           set (sets are kept at write time, so a tag purge costs its members, not the
 *           keyspace);
 *   prefix: SCAN with a MATCH pattern, deleting what each step returns. Prefix purges
 *           are rare and a set per prefix cannot be kept (any prefix may be asked for);
 *           SCAN walks the keyspace in small steps and never blocks Redis for long. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "umbra/buf.h"
#include "umbra/log.h"
#include "umbra/purge.h"

#define BUS_QUEUE_MAX 4096 /* purges waiting for the bus; more are dropped (logged) */
#define SCAN_MAX_STEPS 100000

struct l2_msg {
    struct l2_msg *next;
    size_t len, purge_off; /* the purge's wire form is text + purge_off */
    char text[]; /* the message as published */
};

static const char TAG_SCRIPT[] =
    "local n = 0 "
    "for _, t in ipairs(KEYS) do "
    "  for _, k in ipairs(redis.call('SMEMBERS', t)) do n = n + redis.call('DEL', k) end "
    "  redis.call('DEL', t) "
    "end "
    "return n";

static void bus_state(struct um_l2 *l2)
{
    atomic_store(&l2->bus_up, l2->sub.state == UM__REDIS_UP && l2->pub.state == UM__REDIS_UP);
}

/* ---------------------------------------------------------------- receiving */

static void on_message(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    struct um_l2 *l2 = priv;
    redisReply *r = reply;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    const char *s = r->element[2]->str, *end = s + r->element[2]->len;
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    if (nl == NULL)
        return;
    if ((size_t)(nl - s) == strlen(l2->node_id) && memcmp(s, l2->node_id, (size_t)(nl - s)) == 0)
        return; /* our own */
    struct um_purge p;
    um_str tags[UM_PURGE_MAX_TAGS];
    if (!um_purge_decode(nl + 1, (size_t)(end - nl - 1), &p, tags, UM_NELEMS(tags)))
        return;
    atomic_fetch_add(&l2->purges_received, 1);
    if (l2->apply)
        l2->apply(l2->apply_arg, &p);
}

static void sub_on_up(struct um__redis *r)
{
    struct um_l2 *l2 = r->data;
    redisAsyncCommand(r->ac, on_message, l2, "SUBSCRIBE " L2_CHANNEL);
    bus_state(l2);
}

static void bus_on_down(struct um__redis *r, const char *why)
{
    struct um_l2 *l2 = r->data;
    bus_state(l2);
    um__l2_note_down(l2, r == &l2->sub ? "purge subscriber" : "purge publisher", why);
}

static void pub_on_up(struct um__redis *r)
{
    bus_state(r->data);
}

/* ---------------------------------------------------------------- deleting */

struct scan {
    struct um_l2 *l2;
    char *pattern;
    unsigned steps;
};

static void on_scan(redisAsyncContext *ac, void *reply, void *priv)
{
    struct scan *sc = priv;
    redisReply *r = reply;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
        free(sc->pattern);
        free(sc);
        return;
    }
    redisReply *keys = r->element[1];
    if (keys->elements > 0) {
        size_t n = keys->elements + 1;
        const char **argv = um_calloc(n, sizeof(*argv));
        size_t *lens = um_calloc(n, sizeof(*lens));
        argv[0] = "UNLINK";
        lens[0] = 6;
        for (size_t i = 0; i < keys->elements; i++) {
            argv[i + 1] = keys->element[i]->str;
            lens[i + 1] = (size_t)keys->element[i]->len;
        }
        redisAsyncCommandArgv(ac, NULL, NULL, (int)n, argv, lens);
        free(argv);
        free(lens);
    }
    if (strcmp(r->element[0]->str, "0") == 0 || ++sc->steps >= SCAN_MAX_STEPS ||
        redisAsyncCommand(ac, on_scan, sc, "SCAN %s MATCH %s COUNT 1000", r->element[0]->str,
                          sc->pattern) != REDIS_OK) {
        free(sc->pattern);
        free(sc);
    }
}

/* Appends s to b with the glob characters of MATCH escaped. */
static size_t glob_escape(char *b, um_str s)
{
    size_t o = 0;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.base[i];
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\')
            b[o++] = '\\';
        b[o++] = c;
    }
    return o;
}

static void delete_covered(struct um_l2 *l2, const struct um_purge *p)
{
    redisAsyncContext *ac = l2->pub.ac;
    if (p->kind == UM_PURGE_URL) {
        redisAsyncCommand(ac, NULL, NULL, "UNLINK " L2_OBJ_PREFIX "%b", p->key.base,
                          p->key.len);
    } else if (p->kind == UM_PURGE_TAGS) {
        const char *argv[3 + UM_PURGE_MAX_TAGS];
        size_t lens[UM_NELEMS(argv)];
        char *names[UM_NELEMS(argv)];
        int n = 3, k = 0;
        for (size_t i = 0; i < p->ntags && n < (int)UM_NELEMS(argv); i++) {
            size_t tl = p->tags[i].len;
            names[k] = um_malloc(sizeof(L2_TAG_PREFIX) + tl);
            memcpy(names[k], L2_TAG_PREFIX, sizeof(L2_TAG_PREFIX) - 1);
            memcpy(names[k] + sizeof(L2_TAG_PREFIX) - 1, p->tags[i].base, tl);
            argv[n] = names[k];
            lens[n] = sizeof(L2_TAG_PREFIX) - 1 + tl;
            n++;
            k++;
        }
        char nk[16];
        snprintf(nk, sizeof(nk), "%d", k);
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = TAG_SCRIPT;
        lens[1] = sizeof(TAG_SCRIPT) - 1;
        argv[2] = nk;
        lens[2] = strlen(nk);
        if (k > 0)
            redisAsyncCommandArgv(ac, NULL, NULL, n, argv, lens);
        for (int i = 0; i < k; i++)
            free(names[i]);
    } else {
        /* "umbra:o:HOST PREFIX*", any host when none is given. */
        char *pat = um_malloc(sizeof(L2_OBJ_PREFIX) + 2 * (p->host.len + p->prefix.len) + 4);
        size_t o = sizeof(L2_OBJ_PREFIX) - 1;
        memcpy(pat, L2_OBJ_PREFIX, o);
        if (p->host.len > 0) {
            o += glob_escape(pat + o, p->host);
        } else {
            pat[o++] = '*';
        }
        pat[o++] = ' ';
        o += glob_escape(pat + o, p->prefix);
        pat[o++] = '*';
        pat[o] = '\0';
        struct scan *sc = um_calloc(1, sizeof(*sc));
        sc->l2 = l2;
        sc->pattern = pat;
        if (redisAsyncCommand(ac, on_scan, sc, "SCAN 0 MATCH %s COUNT 1000", pat) != REDIS_OK) {
            free(pat);
            free(sc);
        }
    }
}

/* ---------------------------------------------------------------- publishing */

static void on_bus_wake(struct um_task *t)
{
    struct um_l2 *l2 = um_container_of(t, struct um_l2, bus_wake);
    pthread_mutex_lock(&l2->bus_lock);
    struct l2_msg *list = l2->queue;
    l2->queue = NULL;
    l2->queue_tail = &l2->queue;
    l2->queued = 0;
    pthread_mutex_unlock(&l2->bus_lock);
    while (list) {
        struct l2_msg *m = list;
        list = m->next;
        if (l2->pub.state == UM__REDIS_UP &&
            redisAsyncCommand(l2->pub.ac, NULL, NULL, "PUBLISH " L2_CHANNEL " %b", m->text,
                              m->len) == REDIS_OK) {
            atomic_fetch_add(&l2->purges_sent, 1);
            struct um_purge p;
            um_str tags[UM_PURGE_MAX_TAGS];
            if (um_purge_decode(m->text + m->purge_off, m->len - m->purge_off, &p, tags,
                                UM_NELEMS(tags)))
                delete_covered(l2, &p);
        } else {
            atomic_fetch_add(&l2->purges_dropped, 1);
            um_log_warn("l2: Redis is down: a purge was applied here only (not on the other "
                        "nodes, nor in Redis)");
        }
        free(m);
    }
}

void um_l2_purge_publish(struct um_l2 *l2, const struct um_purge *p)
{
    struct um_buf b;
    um_buf_init(&b);
    um_buf_append_str(&b, l2->node_id);
    um_buf_append(&b, "\n", 1);
    size_t off = b.len;
    if (!um_purge_encode(p, &b)) {
        um_buf_dispose(&b);
        return; /* no such key, host or tag (an admin's form may decode one) */
    }
    struct l2_msg *m = um_malloc(sizeof(*m) + b.len + 1);
    memcpy(m->text, b.base, b.len);
    m->text[b.len] = '\0';
    m->len = b.len;
    m->purge_off = off;
    m->next = NULL;
    um_buf_dispose(&b);
    pthread_mutex_lock(&l2->bus_lock);
    bool full = l2->queued >= BUS_QUEUE_MAX;
    if (!full) {
        *l2->queue_tail = m;
        l2->queue_tail = &m->next;
        l2->queued++;
    }
    pthread_mutex_unlock(&l2->bus_lock);
    if (full) {
        free(m);
        atomic_fetch_add(&l2->purges_dropped, 1);
        return;
    }
    um_loop_post(l2->bus_loop, &l2->bus_wake);
}

/* ---------------------------------------------------------------- the thread */

static void *bus_main(void *arg)
{
    struct um_l2 *l2 = arg;
    um_log_context(-1, 0);
    um__redis_start(&l2->sub);
    um__redis_start(&l2->pub);
    while (!atomic_load(&l2->bus_stop))
        if (um_loop_run_once(l2->bus_loop, -1) != UM_OK)
            break;
    um__redis_dispose(&l2->sub);
    um__redis_dispose(&l2->pub);
    return NULL;
}

static void on_bus_stop(struct um_task *t)
{
    (void)t; /* the loop turn it runs in ends with bus_stop set */
}

void um__l2_bus_start(struct um_l2 *l2)
{
    unsigned char rnd[8] = {0};
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)l2;
        memcpy(rnd, &t, sizeof(rnd));
    }
    for (int i = 0; i < 8; i++)
        snprintf(l2->node_id + 2 * i, 3, "%02x", rnd[i]);
    pthread_mutex_init(&l2->bus_lock, NULL);
    l2->queue_tail = &l2->queue;
    l2->bus_loop = um_loop_create();
    l2->bus_wake.cb = on_bus_wake;
    um__redis_init(&l2->sub, l2->bus_loop, l2->host, l2->port);
    l2->sub.data = l2;
    l2->sub.on_up = sub_on_up;
    l2->sub.on_down = bus_on_down;
    um__redis_init(&l2->pub, l2->bus_loop, l2->host, l2->port);
    l2->pub.data = l2;
    l2->pub.on_up = pub_on_up;
    l2->pub.on_down = bus_on_down;
    UM_ASSERT(pthread_create(&l2->bus_thread, NULL, bus_main, l2) == 0);
}

void um__l2_bus_stop(struct um_l2 *l2)
{
    static struct um_task stop = {.cb = on_bus_stop};
    atomic_store(&l2->bus_stop, true);
    um_loop_post(l2->bus_loop, &stop);
    pthread_join(l2->bus_thread, NULL);
    while (l2->queue) {
        struct l2_msg *m = l2->queue;
        l2->queue = m->next;
        free(m);
    }
    um_loop_destroy(l2->bus_loop);
    pthread_mutex_destroy(&l2->bus_lock);
}
