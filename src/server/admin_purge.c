/* SPDX-License-Identifier: BSD-2-Clause */
/* POST /purge on the admin listener: the purges of the cache (by tag, by path prefix, by
 * URL, hard or soft) for operators and deploy scripts, with a JSON or a form body:
 *
 *   {"tags": ["product-17", "home"], "soft": true}
 *   {"host": "example.com", "path": "/products/" followed by an asterisk}
 *   tag=product-17&tag=home&soft=1        (application/x-www-form-urlencoded)
 *
 * "tags" (or "tag", a string or a list; a string may hold several, space separated) purges
 * every object with any of them; "path" purges one URL, or every URL starting with the
 * rest when it ends in '*', of "host" (every host when a prefix has none); "soft" marks
 * stale instead of dropping. The answer is {"purged": N}, the number of objects affected.
 * Runs on the admin thread (admin.c): a large purge never holds up a worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "umbra/ascii.h"
#include "umbra/cacheorigin.h"
#include "umbra/cluster.h"
#include "umbra/buf.h"
#include "umbra/cache.h"
#include "umbra/json.h"

#define PURGE_MAX_ITEMS UM_PURGE_MAX_TAGS

struct purge_req {
    /* Slices of the decoded copy. */
    um_str tags[PURGE_MAX_ITEMS];
    size_t ntags;
    um_str host, path;
    bool soft;
    const char *error;
    char errbuf[160];
};

static void add_tags(struct purge_req *p, char *s, size_t n)
{
    size_t i = 0;
    while (i < n && p->ntags < PURGE_MAX_ITEMS) {
        while (i < n && (s[i] == ' ' || s[i] == ',' || s[i] == '\t'))
            i++;
        size_t b = i;
        while (i < n && s[i] != ' ' && s[i] != ',' && s[i] != '\t')
            i++;
        if (i > b)
            p->tags[p->ntags++] = (um_str){s + b, i - b};
    }
}

static bool truthy(um_str v)
{
    return um_str_eq_ci(v, "1") || um_str_eq_ci(v, "true") || um_str_eq_ci(v, "yes") ||
           um_str_eq_ci(v, "soft");
}

static void set_field(struct purge_req *p, um_str key, char *v, size_t vl)
{
    if (um_str_eq(key, "tags") || um_str_eq(key, "tag"))
        add_tags(p, v, vl);
    else if (um_str_eq(key, "host"))
        p->host = (um_str){v, vl};
    else if (um_str_eq(key, "path"))
        p->path = (um_str){v, vl};
    else if (um_str_eq(key, "soft"))
        p->soft = truthy((um_str){v, vl});
    else
        p->error = "unknown field (expected tags, tag, host, path or soft)";
}

/* ---- application/x-www-form-urlencoded ---- */

/* Decodes s[0..n) in place; returns the new length, or SIZE_MAX when malformed. */
static size_t form_decode(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            s[o++] = ' ';
        } else if (s[i] == '%') {
            int c = um_pct_byte(s + i, n - i);
            if (c <= 0) /* malformed, or a NUL */
                return SIZE_MAX;
            s[o++] = (char)c;
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

static void parse_form(struct purge_req *p, char *s, size_t n)
{
    size_t i = 0;
    while (i < n && p->error == NULL) {
        size_t b = i;
        while (i < n && s[i] != '&')
            i++;
        char *kv = s + b;
        size_t kvl = i - b;
        i++;
        if (kvl == 0)
            continue;
        char *eq = memchr(kv, '=', kvl);
        size_t kl = eq ? (size_t)(eq - kv) : kvl;
        char *v = eq ? eq + 1 : kv + kvl;
        size_t vl = eq ? kvl - kl - 1 : 0;
        kl = form_decode(kv, kl);
        vl = form_decode(v, vl);
        if (kl == SIZE_MAX || vl == SIZE_MAX) {
            p->error = "malformed percent-encoding";
            return;
        }
        set_field(p, (um_str){kv, kl}, v, vl);
    }
}

/* ---- JSON: one object of strings, lists of strings and booleans ---- */

static void parse_json(struct purge_req *p, char *s, size_t n)
{
    struct um_json j;
    um_json_init(&j, s, n);
    size_t i = 0;
    um_json_enter(&j, '{');
    while (p->error == NULL && um_json_more(&j, '}', &i)) {
        um_str key, v;
        bool b;
        if (!um_json_key(&j, &key))
            break;
        char c = um_json_peek(&j);
        if (c == '[' && (um_str_eq(key, "tags") || um_str_eq(key, "tag"))) {
            size_t k = 0;
            um_json_enter(&j, '[');
            while (um_json_more(&j, ']', &k) && um_json_string(&j, &v))
                add_tags(p, (char *)v.base, v.len);
        } else if (c == 't' || c == 'f') {
            if (um_json_bool(&j, &b))
                set_field(p, key, b ? "1" : "0", 1);
        } else if (um_json_string(&j, &v)) {
            set_field(p, key, (char *)v.base, v.len);
        }
    }
    if (p->error == NULL && !um_json_done(&j)) {
        snprintf(p->errbuf, sizeof(p->errbuf), "malformed JSON at byte %zu: expected %s",
                 j.at, j.error);
        p->error = p->errbuf;
    }
}

int um__admin_purge(struct um_server *s, struct um_cache *cache, struct um_cluster *cluster,
                    bool json, const char *body, size_t len, struct um_buf *out)
{
    if (cache == NULL) {
        um_buf_printf(out, "{\"error\":\"no route uses the cache\"}\n");
        return 503;
    }
    char *copy = um_malloc(len + 1);
    memcpy(copy, body, len);
    copy[len] = '\0';
    struct purge_req p;
    memset(&p, 0, sizeof(p));
    if (json)
        parse_json(&p, copy, len);
    else
        parse_form(&p, copy, len);
    if (p.error == NULL && p.ntags == 0 && p.path.len == 0)
        p.error = "nothing to purge: give tags, or a path";
    if (p.error == NULL && p.path.len > 0 && p.path.base[0] != '/')
        p.error = "path must start with /";
    if (p.error == NULL && p.path.len > 0 && p.path.base[p.path.len - 1] != '*' &&
        p.host.len == 0)
        p.error = "a path without * needs its host";
    if (p.error) {
        /* The reader's messages may quote a '"' or a '\\'. */
        um_buf_append_str(out, "{\"error\":\"");
        for (const char *c = p.error; *c; c++) {
            if (*c == '"' || *c == '\\')
                um_buf_append(out, "\\", 1);
            um_buf_append(out, c, 1);
        }
        um_buf_append_str(out, "\"}\n");
        free(copy);
        return 400;
    }
    for (size_t i = 0; i < p.host.len; i++) {
        char *ch = (char *)&p.host.base[i];
        if (*ch >= 'A' && *ch <= 'Z')
            *ch = (char)(*ch + 32);
    }
    /* The admin thread may sleep: a large purge is paced so that the workers keep most of
     * the CPU. Each purge is applied here, then told to the other nodes. */
    size_t n = 0;
    char *k = NULL;
    if (p.ntags > 0) {
        struct um_purge pg = {.kind = UM_PURGE_TAGS, .soft = p.soft, .tags = p.tags,
                              .ntags = p.ntags};
        n += um_cache_purge_apply(cache, &pg, UM_CACHE_PURGE_PACED);
        um__purge_tell(s, cluster, &pg);
    }
    if (p.path.len > 0) {
        struct um_purge pg = {.kind = UM_PURGE_PREFIX, .soft = p.soft, .host = p.host,
                              .prefix = {p.path.base, p.path.len - 1}};
        if (p.path.base[p.path.len - 1] != '*') {
            size_t kl = p.host.len + 1 + p.path.len;
            k = um_malloc(kl);
            memcpy(k, p.host.base, p.host.len);
            k[p.host.len] = ' ';
            memcpy(k + p.host.len + 1, p.path.base, p.path.len);
            pg = (struct um_purge){.kind = UM_PURGE_URL, .soft = p.soft, .key = {k, kl}};
        }
        n += um_cache_purge_apply(cache, &pg, UM_CACHE_PURGE_PACED);
        um__purge_tell(s, cluster, &pg);
        free(k);
    }
    um_buf_printf(out, "{\"purged\":%zu,\"soft\":%s}\n", n, p.soft ? "true" : "false");
    free(copy);
    return 200;
}

/* ---- other nodes ---- */

void um__purge_tell(struct um_server *s, struct um_cluster *cluster, const struct um_purge *p)
{
    if (cluster)
        um_cluster_purge_fanout(cluster, p);
    if (s->l2)
        um_l2_purge_publish(s->l2, p);
}

void um__purge_announce(void *arg, struct um_context *ctx, const struct um_purge *p)
{
    struct um__worker *w = um_container_of(ctx, struct um__worker, ctx);
    um__purge_tell(arg, w->runtime->cluster, p);
}

void um__purge_apply(void *arg, const struct um_purge *p)
{
    struct um_server *s = arg;
    struct um_cache *cache = atomic_load_explicit(&s->cache, memory_order_acquire);
    if (cache != NULL)
        um_cache_purge_apply(cache, p, UM_CACHE_PURGE_PACED);
}

long um__purge_apply_peer(struct um_cache *cache, const char *desc, size_t len)
{
    struct um_purge p;
    um_str tags[UM_PURGE_MAX_TAGS];
    if (cache == NULL || !um_purge_decode(desc, len, &p, tags, UM_NELEMS(tags)))
        return -1;
    /* Noted for the cluster's guard (fills of what it touched skip the owner a moment). */
    um_cluster_note_purge(&p);
    return (long)um_cache_purge_apply(cache, &p, 0);
}
