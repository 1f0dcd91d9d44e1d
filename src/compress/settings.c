/* SPDX-License-Identifier: BSD-2-Clause */
/* compress = { algorithms = { "zstd", "br", "gzip" }, types = { "text/html", ... },
 * min_size = SIZE, level = { gzip = 6, br = 4, zstd = 3 } }, or true, or false: on-the-fly
 * compression of responses (src/compress/), globally and per route.
 *
 * Off by default, as nginx's gzip and Caddy's encode are: compressing changes the bytes
 * and the validators a client sees, which an operator should ask for. compress = true
 * takes the defaults below. A route's table starts from the global setting (enabled or
 * not) and changes what it names; a route's compress = false turns it off there. */
#include <stdio.h>
#include <string.h>

#include "umbra/compress.h"
#include "umbra/httpfield.h"
#include "umbra/settings.h"

#define PATH_LEN UM_SETTINGS_PATH_LEN

static const char *const compress_keys[] = {"algorithms", "types", "min_size", "level", NULL};
static const char *const level_keys[] = {"gzip", "br", "zstd", NULL};

/* The types worth compressing (text and the text-like formats, SVG, WebAssembly). */
static const char *const default_types[] = {"text/*",
                                            "application/json",
                                            "application/javascript",
                                            "application/xml",
                                            "application/wasm",
                                            "image/svg+xml",
                                            "application/manifest+json",
                                            "application/ld+json",
                                            "application/rss+xml",
                                            "application/atom+xml",
                                            "application/x-javascript",
                                            "application/xhtml+xml",
                                            "application/vnd.api+json",
                                            "font/ttf",
                                            "font/otf",
                                            "application/graphql-response+json",
                                            NULL};

static const char *const coding_names[] = {"identity", "gzip", "br", "zstd"};

static void defaults(void *part)
{
    struct um_compress_conf *cc = part;
    memset(cc, 0, sizeof(*cc));
    cc->order[0] = UM_CODING_ZSTD;
    cc->order[1] = UM_CODING_BR;
    cc->order[2] = UM_CODING_GZIP;
    cc->num_algorithms = 3;
    for (const char *const *t = default_types; *t; t++)
        snprintf(cc->types[cc->num_types++], sizeof(cc->types[0]), "%s", *t);
    cc->min_size = 1024;
    /* gzip 6: zlib's own default and the level nginx is usually set to; br 4 and zstd 3
     * compress about as well as gzip 6 for far less CPU. */
    cc->level[UM_CODING_GZIP] = 6;
    cc->level[UM_CODING_BR] = 4;
    cc->level[UM_CODING_ZSTD] = 3;
}

static bool load_algorithms(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            struct um_compress_conf *cc)
{
    char sub[PATH_LEN], el[PATH_LEN];
    um_settings_subpath(sub, sizeof sub, path, "algorithms");
    if (um_settings_get_field(L, idx, "algorithms") == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    int aidx = lua_gettop(L);
    size_t n;
    if (!lua_istable(L, aidx))
        return um_settings_fail(
            ld, L, sub, "%s: expected a list such as { \"zstd\", \"br\", \"gzip\" }, got %s", sub,
            lua_typename(L, lua_type(L, aidx)));
    if (!um_settings_check_list(ld, L, aidx, sub, &n)) return false;
    if (n == 0 || n > 3)
        return um_settings_fail(ld, L, sub, "%s: expected 1 to 3 of \"zstd\", \"br\", \"gzip\"",
                                sub);
    cc->num_algorithms = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        um_settings_subpath_i(el, sizeof el, sub, i + 1);
        lua_rawgeti(L, aidx, (int)i + 1);
        if (!um_settings_get_string(ld, L, -1, el, "\"zstd\", \"br\" or \"gzip\"", &s))
            return false;
        int c = 0;
        for (int k = 1; k < UM_CODING_COUNT; k++)
            if (strcmp(s, coding_names[k]) == 0) c = k;
        if (c == 0)
            return um_settings_fail(ld, L, el,
                                    "%s: unknown algorithm '%s' (expected \"zstd\", "
                                    "\"br\" or \"gzip\")",
                                    el, s);
        for (size_t j = 0; j < cc->num_algorithms; j++)
            if (cc->order[j] == c)
                return um_settings_fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        cc->order[cc->num_algorithms++] = (unsigned char)c;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* A media type "type/subtype" or "type/" and a star, tokens only. */
static bool good_type(const char *s)
{
    const char *slash = strchr(s, '/');
    if (slash == NULL || slash == s || slash[1] == '\0') return false;
    for (const char *p = s; *p; p++) {
        if (p == slash) continue;
        if (*p == '*' && p == slash + 1 && p[1] == '\0') continue;
        if (!um_http_tchar((unsigned char)*p) || *p == '*') return false;
    }
    return true;
}

static bool load_types(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                       struct um_compress_conf *cc)
{
    char sub[PATH_LEN], el[PATH_LEN];
    um_settings_subpath(sub, sizeof sub, path, "types");
    if (um_settings_get_field(L, idx, "types") == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    int tidx = lua_gettop(L);
    size_t n;
    if (!lua_istable(L, tidx))
        return um_settings_fail(ld, L, sub,
                                "%s: expected a list of media types such as { \"text/*\", "
                                "\"application/json\" }, got %s",
                                sub, lua_typename(L, lua_type(L, tidx)));
    if (!um_settings_check_list(ld, L, tidx, sub, &n)) return false;
    if (n > UM_COMPRESS_MAX_TYPES)
        return um_settings_fail(ld, L, sub, "%s: at most %d types", sub, UM_COMPRESS_MAX_TYPES);
    cc->num_types = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        um_settings_subpath_i(el, sizeof el, sub, i + 1);
        lua_rawgeti(L, tidx, (int)i + 1);
        if (!um_settings_get_string(ld, L, -1, el, "a media type such as \"text/html\"", &s))
            return false;
        if (strlen(s) > UM_COMPRESS_TYPE_MAX || !good_type(s))
            return um_settings_fail(ld, L, el,
                                    "%s: '%s' is not a media type such as \"text/html\" or "
                                    "\"text/*\"",
                                    el, s);
        snprintf(cc->types[cc->num_types], sizeof(cc->types[0]), "%s", s);
        um_settings_lower(cc->types[cc->num_types++]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

static bool load_levels(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                        struct um_compress_conf *cc)
{
    static const int lo[] = {0, 1, 0, 1}, hi[] = {0, 9, 11, 19};
    char sub[PATH_LEN], el[PATH_LEN];
    um_settings_subpath(sub, sizeof sub, path, "level");
    int t = um_settings_get_field(L, idx, "level");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(
            ld, L, sub, "%s: expected a table such as { gzip = 6, br = 4, zstd = 3 }, got %s", sub,
            lua_typename(L, t));
    int lidx = lua_gettop(L);
    if (!um_settings_check_keys(ld, L, lidx, sub, level_keys)) return false;
    for (int c = 1; c < UM_CODING_COUNT; c++) {
        long long v;
        um_settings_subpath(el, sizeof el, sub, coding_names[c]);
        if (um_settings_get_field(L, lidx, coding_names[c]) != LUA_TNIL) {
            if (!um_settings_get_integer(L, -1, lo[c], hi[c], &v))
                return um_settings_fail(ld, L, el, "%s: expected an integer from %d to %d", el,
                                        lo[c], hi[c]);
            cc->level[c] = (int)v;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* The value at idx (true, false or a table) over what out holds: the defaults for the
 * global, a copy of the global settings for a route. */
static bool read(struct um_settings_load *ld, lua_State *L, int idx, const char *path, void *part)
{
    struct um_compress_conf *out = part;
    char sub[PATH_LEN];
    int t = lua_type(L, idx);
    out->line = um_settings_line_of(ld, L, path);
    if (t == LUA_TBOOLEAN) {
        out->enabled = lua_toboolean(L, idx);
        return true;
    }
    if (t != LUA_TTABLE)
        return um_settings_fail(ld, L, path,
                                "%s: expected true, false or a table such as { algorithms = { "
                                "\"zstd\", \"br\", \"gzip\" }, min_size = 1024 }, got %s",
                                path, lua_typename(L, t));
    if (!um_settings_check_keys(ld, L, idx, path, compress_keys)) return false;
    out->enabled = true;
    if (!load_algorithms(ld, L, idx, path, out) || !load_types(ld, L, idx, path, out) ||
        !load_levels(ld, L, idx, path, out))
        return false;
    um_settings_subpath(sub, sizeof sub, path, "min_size");
    if (um_settings_get_field(L, idx, "min_size") != LUA_TNIL &&
        !um_settings_get_size(ld, L, -1, sub, 0, 1ull << 40, &out->min_size))
        return false;
    lua_pop(L, 1);
    return true;
}

static const struct um_settings_table tables[] = {
    {"compress", compress_keys}, {"compress.level", level_keys}, {NULL, NULL}};

static unsigned index_in_list;

const struct um_settings um_compress_settings = {
    .index = &index_in_list,
    .global = "compress",
    .size = sizeof(struct um_compress_conf),
    .defaults = defaults,
    .read = read,
    .route_key = "compress",
    .read_route = read,
    .tables = tables,
};
