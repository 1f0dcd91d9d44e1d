/* SPDX-License-Identifier: BSD-2-Clause */
/* cache = { memory = SIZE, max_object = SIZE, clean_interval = S, default_ttl = S,
 * stale_if_error = S, purge = { allow = {...} }, targeted = { "NAME", ... },
 * expose_tags = BOOL }. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "settings_internal.h"
#include "umbra/log.h"

#define MIN_MEMORY (1ull << 20)
#include "umbra/httpfield.h"

static const char *const cache_keys[] = {
    "memory", "max_object", "clean_interval", "default_ttl", "stale_if_error",
    "purge",  "targeted",   "expose_tags",    "l2",          "disk",
    NULL};
static const char *const purge_keys[] = {"allow", NULL};
static const char *const l2_keys[] = {"redis", "max_object", "timeout", NULL};

/* Writes a size as "64MB", "512KB" or "1000 bytes", whichever is exact. */
static const char *size_text(uint64_t v, char *buf, size_t n)
{
    if (v != 0 && v % (1ull << 30) == 0)
        snprintf(buf, n, "%lluGB", (unsigned long long)(v >> 30));
    else if (v != 0 && v % (1ull << 20) == 0)
        snprintf(buf, n, "%lluMB", (unsigned long long)(v >> 20));
    else if (v != 0 && v % (1ull << 10) == 0)
        snprintf(buf, n, "%lluKB", (unsigned long long)(v >> 10));
    else
        snprintf(buf, n, "%llu bytes", (unsigned long long)v);
    return buf;
}

/* purge = { allow = { "ADDRESS" or "NETWORK", ... } } of the cache table at idx. */
static bool load_cache_purge(struct um_settings_load *ld, lua_State *L, int idx,
                             struct um_cache_conf *cc)
{
    int t = um_settings_get_field(L, idx, "purge");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "cache.purge",
                                "cache.purge: expected a table such as { allow = { "
                                "\"127.0.0.1\", \"::1\" } }, got %s",
                                lua_typename(L, t));
    int pidx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, pidx, "cache.purge", purge_keys)) return false;
    t = um_settings_get_field(L, pidx, "allow");
    if (t == LUA_TNIL) {
        lua_pop(L, 2);
        return true;
    }
    /* The defaults go: an empty list lets nobody purge. */
    if (!um_settings_netmask_list(ld, L, lua_gettop(L), "cache.purge.allow", &cc->purge_allow,
                                  &cc->num_purge_allow))
        return false;
    lua_pop(L, 2);
    return true;
}

/* targeted = { "Umbra-Cache-Control", "CDN-Cache-Control" } of the cache table at idx: the
 * field names, in order of precedence; {} honours none. */
static bool load_cache_targeted(struct um_settings_load *ld, lua_State *L, int idx,
                                struct um_cache_conf *cc)
{
    char el[PATH_LEN];
    const char *s;
    size_t n = 0;
    int t = um_settings_get_field(L, idx, "targeted");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "cache.targeted",
                                "cache.targeted: expected a list of field names such as "
                                "{ \"CDN-Cache-Control\" }, got %s",
                                lua_typename(L, t));
    int tidx = lua_gettop(L);
    if (!um_settings_check_list(ld, L, tidx, "cache.targeted", &n)) return false;
    if (n > UM_CACHE_TARGETED_MAX)
        return um_settings_fail(ld, L, "cache.targeted",
                                "cache.targeted: at most %d field names, got %zu",
                                UM_CACHE_TARGETED_MAX, n);
    cc->num_targeted = 0;
    for (size_t i = 0; i < n; i++) {
        um_settings_subpath_i(el, sizeof el, "cache.targeted", i + 1);
        lua_rawgeti(L, tidx, (int)i + 1);
        if (!um_settings_get_string(ld, L, -1, el, "a field name such as \"CDN-Cache-Control\"",
                                    &s))
            return false;
        size_t sl = strlen(s);
        if (sl > UM_CACHE_TARGETED_NAME_MAX || !um_http_is_token((um_str){s, sl}))
            return um_settings_fail(ld, L, el,
                                    "%s: '%s' is not a field name (a token of at most %d "
                                    "characters)",
                                    el, s, UM_CACHE_TARGETED_NAME_MAX);
        if (um_str_eq_ci((um_str){s, sl}, "cache-control"))
            return um_settings_fail(ld, L, el,
                                    "%s: Cache-Control is what targeted fields take "
                                    "precedence over; list only targeted fields",
                                    el);
        for (size_t j = 0; j < i; j++)
            if (strcasecmp(cc->targeted[j], s) == 0)
                return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        memcpy(cc->targeted[i], s, sl + 1);
        cc->num_targeted++;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* "redis://ADDRESS[:PORT]" into host and port; false when it is not that. An address,
 * not a name: the workers connect from their loops, where resolving a name would block. */
static bool parse_redis_url(const char *s, char *host, size_t hostsz, int *port)
{
    static const char scheme[] = "redis://";
    if (strncmp(s, scheme, sizeof(scheme) - 1) != 0) return false;
    s += sizeof(scheme) - 1;
    const char *hb = s, *he;
    *port = 6379;
    if (*s == '[') {
        hb = ++s;
        he = strchr(s, ']');
        if (he == NULL) return false;
        s = he + 1;
    } else {
        he = s;
        while (*he && *he != ':' && *he != '/')
            he++;
        s = he;
    }
    size_t hl = (size_t)(he - hb);
    if (hl == 0 || hl >= hostsz) return false;
    memcpy(host, hb, hl);
    host[hl] = '\0';
    if (strcmp(host, "localhost") == 0) snprintf(host, hostsz, "127.0.0.1");
    unsigned char addr[16];
    if (inet_pton(AF_INET, host, addr) != 1 && inet_pton(AF_INET6, host, addr) != 1) return false;
    if (*s == ':') {
        s++;
        long p = 0;
        if (*s < '0' || *s > '9') return false;
        while (*s >= '0' && *s <= '9' && p <= 65535)
            p = p * 10 + (*s++ - '0');
        if (p < 1 || p > 65535) return false;
        *port = (int)p;
    }
    if (*s == '/') s++;
    return *s == '\0';
}

/* l2 = { redis = "redis://ADDRESS:PORT", max_object = SIZE, timeout = S } of the cache
 * table at idx. */
static bool load_cache_l2(struct um_settings_load *ld, lua_State *L, int idx,
                          struct um_cache_conf *cc)
{
    const char *s;
    uint64_t v;
    int t = um_settings_get_field(L, idx, "l2");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "cache.l2",
                                "cache.l2: expected a table such as { redis = "
                                "\"redis://127.0.0.1:6379\" }, got %s",
                                lua_typename(L, t));
    int lidx = lua_gettop(L);
    cc->l2.line = um_settings_line_of(ld, L, "cache.l2");
    if (!um_settings_check_keys(ld, L, lidx, "cache.l2", l2_keys)) return false;
    cc->l2.max_object = 1u << 20;
    cc->l2.timeout = 0.05;
    if (um_settings_get_field(L, lidx, "redis") == LUA_TNIL)
        return um_settings_fail(ld, L, "cache.l2",
                                "cache.l2: redis is required, such as "
                                "redis = \"redis://127.0.0.1:6379\"");
    if (!um_settings_get_string(ld, L, -1, "cache.l2.redis",
                                "a URL such as "
                                "\"redis://127.0.0.1:6379\"",
                                &s))
        return false;
    if (!parse_redis_url(s, cc->l2.host, sizeof cc->l2.host, &cc->l2.port))
        return um_settings_fail(ld, L, "cache.l2.redis",
                                "cache.l2.redis: '%s' is not redis://ADDRESS[:PORT] with an IP "
                                "address (or localhost) and a port from 1 to 65535",
                                s);
    lua_pop(L, 1);
    if (um_settings_get_field(L, lidx, "max_object") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "cache.l2.max_object", 0, UINT64_MAX, &v))
            return false;
        if (v == 0 || v > (512u << 20))
            return um_settings_fail(ld, L, "cache.l2.max_object",
                                    "cache.l2.max_object: expected more than 0 bytes and at most "
                                    "512MB (a Redis string's limit)");
        cc->l2.max_object = v;
    }
    lua_pop(L, 1);
    if (um_settings_get_field(L, lidx, "timeout") != LUA_TNIL &&
        !um_settings_get_seconds(ld, L, -1, "cache.l2.timeout", &cc->l2.timeout))
        return false;
    lua_pop(L, 1);
    if (cc->l2.timeout < 0.001 || cc->l2.timeout > 10)
        return um_settings_fail(ld, L, "cache.l2.timeout",
                                "cache.l2.timeout: expected from 0.001 to 10 seconds, got %g",
                                cc->l2.timeout);
    cc->l2.enabled = true;
    lua_pop(L, 1);
    return true;
}

/* cache = { memory = SIZE, max_object = SIZE, clean_interval = S, default_ttl = S,
 * stale_if_error = S, purge = { allow = {...} } }; defaults for what is missing. */
static void defaults(void *part)
{
    struct um_cache_conf *cc = part;
    cc->memory = 256ull << 20;
    cc->max_object = 64ull << 20;
    cc->clean_interval = 10;
    memcpy(cc->targeted[0], "Umbra-Cache-Control", sizeof("Umbra-Cache-Control"));
    memcpy(cc->targeted[1], "CDN-Cache-Control", sizeof("CDN-Cache-Control"));
    cc->num_targeted = 2;
    cc->disk_sync = 1;
    cc->disk_slice = UM_CACHE_DISK_SLICE_DEFAULT;
    cc->purge_allow = um_calloc(2, sizeof *cc->purge_allow);
    cc->num_purge_allow = 2;
    cc->purge_allow[0] =
        (struct um_netmask){.family = AF_INET, .addr = {127, 0, 0, 1}, .prefix = 32};
    cc->purge_allow[1] = (struct um_netmask){.family = AF_INET6, .addr = {[15] = 1}, .prefix = 128};
}

static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part)
{
    struct um_cache_conf *cc = part;
    char a[64], b[64];
    uint64_t v;
    (void)path;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, "cache",
                                "cache: expected a table such as { memory = \"256MB\" }, "
                                "got %s (routes turn caching off with cache = false)",
                                lua_typename(L, t));
    cc->line = um_settings_line_of(ld, L, "cache");
    if (!um_settings_check_keys(ld, L, idx, "cache", cache_keys)) return false;

    if (um_settings_get_field(L, idx, "memory") != LUA_TNIL) {
        if (!um_settings_get_size(ld, L, -1, "cache.memory", 0, UINT64_MAX, &v)) return false;
        if (v < MIN_MEMORY)
            return um_settings_fail(ld, L, "cache.memory",
                                    "cache.memory: %s is too small (at least 1MB)",
                                    size_text(v, a, sizeof a));
        cc->memory = v;
    }
    lua_pop(L, 1);

    bool has_max_object = um_settings_get_field(L, idx, "max_object") != LUA_TNIL;
    if (has_max_object) {
        if (!um_settings_get_size(ld, L, -1, "cache.max_object", 0, UINT64_MAX, &v)) return false;
        if (v == 0)
            return um_settings_fail(ld, L, "cache.max_object",
                                    "cache.max_object: expected more than 0 "
                                    "bytes");
        if (v > cc->memory)
            return um_settings_fail(ld, L, "cache.max_object",
                                    "cache.max_object: %s is more than "
                                    "cache.memory (%s)",
                                    size_text(v, a, sizeof a), size_text(cc->memory, b, sizeof b));
        cc->max_object = v;
    } else if (cc->max_object > cc->memory) {
        cc->max_object = cc->memory; /* the default, in a smaller cache */
    }
    lua_pop(L, 1);

    if (um_settings_get_field(L, idx, "clean_interval") != LUA_TNIL &&
        !um_settings_get_seconds(ld, L, -1, "cache.clean_interval", &cc->clean_interval))
        return false;
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "default_ttl") != LUA_TNIL &&
        !um_settings_get_seconds0(ld, L, -1, "cache.default_ttl", &cc->default_ttl))
        return false;
    lua_pop(L, 1);
    if (um_settings_get_field(L, idx, "stale_if_error") != LUA_TNIL &&
        !um_settings_get_seconds0(ld, L, -1, "cache.stale_if_error", &cc->stale_if_error))
        return false;
    lua_pop(L, 1);

    if (!um_settings_opt_bool(ld, L, idx, "cache.expose_tags", "expose_tags", &cc->expose_tags,
                              NULL))
        return false;

    return load_cache_targeted(ld, L, idx, cc) && load_cache_purge(ld, L, idx, cc) &&
           load_cache_l2(ld, L, idx, cc) && um__cache_load_disk(ld, L, idx, cc);
}

static void dispose(void *part)
{
    struct um_cache_conf *cc = part;
    free(cc->purge_allow);
    for (size_t i = 0; i < cc->num_disks; i++)
        free(cc->disks[i].path);
    free(cc->disks);
}

/* The memory cache is made once, at the first caching route (running: the cache), with
 * its size: a reload keeps it. */
void um__cache_check_reload(const struct um_config *was, const struct um_config *now, void *running)
{
    const struct um_cache_conf *w = um_cache_conf(was), *n = um_cache_conf(now);
    if (running && (n->memory != w->memory || n->max_object != w->max_object))
        um_log_warn("SIGHUP: cache.memory and cache.max_object take a restart; keeping the "
                    "running cache");
}

static const struct um_settings_table tables[] = {{"cache", cache_keys},
                                                  {"cache.purge", purge_keys},
                                                  {"cache.l2", l2_keys},
                                                  {"cache.disk", um__cache_disk_keys},
                                                  {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_cache_settings = {
    .index = &index_in_list,
    .global = "cache",
    .size = sizeof(struct um_cache_conf),
    .defaults = defaults,
    .read = read,
    .dispose = dispose,
    .tables = tables,
};
