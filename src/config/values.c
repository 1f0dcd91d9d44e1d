/* SPDX-License-Identifier: BSD-2-Clause */
/* What every step of the loader uses: error messages at the line of a value, and readers
 * that check a value's type and range (see internal.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <lauxlib.h>

#include "internal.h"

/* Longer timeouts are certainly mistakes, and would overflow conversions to milliseconds. */
#define MAX_TIMEOUT 31536000.0

/* Registry key of the table global name -> line of its first assignment. */
const char um__cfg_global_lines_key = 'l';

/* Writes "FILE:LINE: message" (or "FILE: message" when line <= 0) into err, always
 * NUL-terminated and truncated to errlen. */
__attribute__((format(printf, 5, 0))) static void format_err(char *err, size_t errlen,
                                                             const char *file, int line,
                                                             const char *fmt, va_list ap)
{
    if (err == NULL || errlen == 0)
        return;
    int n = line > 0 ? snprintf(err, errlen, "%s:%d: ", file, line)
                     : snprintf(err, errlen, "%s: ", file);
    if (n < 0) {
        err[0] = '\0';
        return;
    }
    if ((size_t)n >= errlen)
        return;
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

__attribute__((format(printf, 3, 4))) bool um_settings_fail_at(struct um_settings_load *ld,
                                                               int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    format_err(ld->err, ld->errlen, ld->file, line, fmt, ap);
    va_end(ap);
    ld->failed = true;
    return false;
}

/* The line of the first assignment of global name, recorded by on_newindex, or 0. */
static int global_line(lua_State *L, const char *name)
{
    int line = 0;
    lua_pushlightuserdata(L, (void *)&um__cfg_global_lines_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_istable(L, -1)) {
        lua_pushstring(L, name);
        lua_rawget(L, -2);
        if (lua_type(L, -1) == LUA_TNUMBER)
            line = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return line;
}

/* The line to report for the value at path: see the comment at the top. */
int um_settings_line_of(struct um_settings_load *ld, lua_State *L, const char *path)
{
    char buf[PATH_LEN];
    if (!ld->scanned) {
        um__lualines_scan(&ld->lines, ld->src, ld->srclen);
        ld->scanned = true;
    }
    snprintf(buf, sizeof buf, "%s", path);
    for (;;) {
        int line = um__lualines_find(&ld->lines, buf);
        if (line > 0)
            return line;
        char *dot = strrchr(buf, '.');
        if (dot == NULL)
            break;
        *dot = '\0';
    }
    return global_line(L, buf);
}

/* Reports a bad value at path; the message itself should start with the path too. */
__attribute__((format(printf, 4, 5))) bool
um_settings_fail(struct um_settings_load *ld, lua_State *L, const char *path, const char *fmt, ...)
{
    int line = um_settings_line_of(ld, L, path);
    va_list ap;
    va_start(ap, fmt);
    format_err(ld->err, ld->errlen, ld->file, line, fmt, ap);
    va_end(ap);
    ld->failed = true;
    return false;
}

bool um_settings_in_list(const char *const *list, const char *s)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

/* Pushes list as "a, b, c" on L's stack and returns it. A Lua buffer rather than a char
 * array: the message names every entry whatever their number, and the string is collected
 * with the state (no leak if a later push raises). */
const char *um_settings_join(lua_State *L, const char *const *list)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; list[i] != NULL; i++) {
        if (i > 0)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, list[i]);
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* Describes the key at idx for a message (never converts it in place: lua_next-safe). */
const char *um_settings_key_text(lua_State *L, int idx, char *buf, size_t n)
{
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        snprintf(buf, n, "%s", lua_tostring(L, idx));
        break;
    case LUA_TNUMBER: {
        double d = lua_tonumber(L, idx);
        if (d >= -1e15 && d <= 1e15 && d == floor(d))
            snprintf(buf, n, "%lld", (long long)d);
        else
            snprintf(buf, n, "%g", d);
        break;
    }
    case LUA_TBOOLEAN:
        snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false");
        break;
    default:
        snprintf(buf, n, "(%s)", lua_typename(L, lua_type(L, idx)));
        break;
    }
    return buf;
}

/* Writes "parent.key" into buf, truncated to n bytes. */
const char *um_settings_subpath(char *buf, size_t n, const char *parent, const char *key)
{
    size_t off = strnlen(parent, n - 1);
    memmove(buf, parent, off);
    if (off < n - 1)
        buf[off++] = '.';
    size_t kl = strnlen(key, n - 1 - off);
    memcpy(buf + off, key, kl);
    buf[off + kl] = '\0';
    return buf;
}

const char *um_settings_subpath_i(char *buf, size_t n, const char *parent, size_t i)
{
    char num[32];
    snprintf(num, sizeof num, "%zu", i);
    return um_settings_subpath(buf, n, parent, num);
}

/* Pushes the global name without running metamethods; returns its type. */
int um_settings_get_global(lua_State *L, const char *name)
{
    lua_pushstring(L, name);
    lua_rawget(L, LUA_GLOBALSINDEX);
    return lua_type(L, -1);
}

/* Pushes t[name] of the table at idx, raw; returns its type. */
int um_settings_get_field(lua_State *L, int idx, const char *name)
{
    lua_pushstring(L, name);
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
    return lua_type(L, -1);
}

/* Checks that every key of the table at idx is one of the names in allowed. */
bool um_settings_check_keys(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            const char *const *allowed)
{
    char key[128], sub[PATH_LEN];
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING && um_settings_in_list(allowed, lua_tostring(L, -1)))
            continue;
        bool named = lua_type(L, -1) == LUA_TSTRING;
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, path, key);
        const char *names = um_settings_join(L, allowed);
        if (named)
            return um_settings_fail(ld, L, sub, "%s: unknown key '%s' (expected one of: %s)", path,
                                    key, names);
        return um_settings_fail(ld, L, sub,
                                "%s: unexpected value at key [%s] (expected named keys: %s)", path,
                                key, names);
    }
    return true;
}

/* Checks that the table at idx is a list t[1..n] without holes or other keys. */
bool um_settings_check_list(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            size_t *n)
{
    char key[128], sub[PATH_LEN];
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        count++;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER) {
            double d = lua_tonumber(L, -1);
            if (d >= 1 && d <= (double)count && d == floor(d))
                continue;
        }
        um_settings_key_text(L, -1, key, sizeof key);
        um_settings_subpath(sub, sizeof sub, path, key);
        if (lua_type(L, -1) == LUA_TSTRING)
            return um_settings_fail(ld, L, sub, "%s: unexpected key '%s' (expected a list)", path,
                                    key);
        return um_settings_fail(ld, L, sub, "%s: expected a list without holes (found index %s)",
                                path, key);
    }
    *n = count;
    return true;
}

/* Gets the string at idx; fails unless it is a non-empty string without NUL bytes. */
bool um_settings_get_string(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                            const char *what, const char **s)
{
    size_t len;
    if (lua_type(L, idx) != LUA_TSTRING)
        return um_settings_fail(ld, L, path, "%s: expected %s, got %s", path, what,
                                lua_typename(L, lua_type(L, idx)));
    *s = lua_tolstring(L, idx, &len);
    if (len == 0 || strlen(*s) != len)
        return um_settings_fail(ld, L, path, "%s: expected %s, got %s", path, what,
                                len == 0 ? "an empty string" : "a string with a NUL byte");
    return true;
}

/* The optional boolean key of the table at idx; path names the key. */
bool um_settings_opt_bool(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                          const char *key, bool *out, bool *given)
{
    int t = um_settings_get_field(L, idx, key);
    if (given)
        *given = t != LUA_TNIL;
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
        return um_settings_fail(ld, L, path, "%s: expected true or false, got %s", path,
                                lua_typename(L, t));
    if (t != LUA_TNIL)
        *out = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return true;
}

/* An integer in [lo, hi] (a Lua number without fraction). */
bool um_settings_get_integer(lua_State *L, int idx, double lo, double hi, long long *out)
{
    if (lua_type(L, idx) != LUA_TNUMBER)
        return false;
    double d = lua_tonumber(L, idx);
    if (!(d >= lo && d <= hi) || d != floor(d))
        return false;
    *out = (long long)d;
    return true;
}

/* Reads a number of seconds greater than 0 and at most MAX_TIMEOUT (fractions allowed). */
bool um_settings_get_seconds(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                             double *out)
{
    double d = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : NAN;
    if (!(d > 0 && d <= MAX_TIMEOUT))
        return um_settings_fail(ld, L, path,
                                "%s: expected a number of seconds greater than 0 and at most %.0f",
                                path, MAX_TIMEOUT);
    *out = d;
    return true;
}

bool um_config_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},   {"k", 10}, {"kb", 10}, {"m", 20},
                 {"mb", 20}, {"g", 30}, {"gb", 30}};
    if (s == NULL || !(*s >= '0' && *s <= '9'))
        return false;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    for (size_t i = 0; i < UM_NELEMS(units); i++) {
        if (strcasecmp(s, units[i].suffix) != 0)
            continue;
        if (v > (UINT64_MAX >> units[i].shift))
            return false;
        *out = v << units[i].shift;
        return true;
    }
    return false;
}

#define SIZE_HINT "a size: a number of bytes, or a string such as \"512KB\", \"16MB\" or \"1GB\""

/* Reads a size (number of bytes, or a string for um_config_parse_size) in [lo, hi]. */
bool um_settings_get_size(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                          uint64_t lo, uint64_t hi, uint64_t *out)
{
    uint64_t v;
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER) {
        double d = lua_tonumber(L, idx);
        if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d))
            return um_settings_fail(ld, L, path, "%s: expected %s, got %g", path, SIZE_HINT, d);
        v = (uint64_t)d;
    } else if (t == LUA_TSTRING) {
        const char *s = lua_tostring(L, idx);
        if (!um_config_parse_size(s, &v))
            return um_settings_fail(ld, L, path, "%s: bad size \"%s\" (expected %s)", path, s,
                                    SIZE_HINT);
    } else {
        return um_settings_fail(ld, L, path, "%s: expected %s, got %s", path, SIZE_HINT,
                                lua_typename(L, t));
    }
    if (v < lo || v > hi)
        return um_settings_fail(ld, L, path, "%s: %llu bytes is out of range (%llu to %llu)", path,
                                (unsigned long long)v, (unsigned long long)lo,
                                (unsigned long long)hi);
    *out = v;
    return true;
}

/* name joined to the config file's folder (name itself when absolute), malloc'ed. */
char *um_settings_dir_join(const struct um_settings_load *ld, const char *name)
{
    if (name[0] == '/')
        return um_strndup(name, strlen(name));
    size_t dl = strlen(ld->dir), nl = strlen(name);
    char *joined = um_malloc(dl + 1 + nl + 1);
    memcpy(joined, ld->dir, dl);
    joined[dl] = '/';
    memcpy(joined + dl + 1, name, nl + 1);
    return joined;
}

/* Resolves name (as written at path) against the config's directory into an absolute,
 * existing path: a directory when want_dir, else a regular file. */
bool um_settings_resolve_path(struct um_settings_load *ld, lua_State *L, const char *path,
                              const char *name, bool want_dir, char **out)
{
    const char *kind = want_dir ? "directory" : "file";
    char *joined = um_settings_dir_join(ld, name);
    char *real = realpath(joined, NULL);
    int e = errno;
    if (real == NULL) {
        bool ok = e == ENOENT ? um_settings_fail(ld, L, path, "%s: no such %s '%s' (looked for %s)",
                                                 path, kind, name, joined)
                              : um_settings_fail(ld, L, path, "%s: cannot use %s '%s' (%s): %s",
                                                 path, kind, name, joined, strerror(e));
        free(joined);
        return ok;
    }
    free(joined);
    struct stat st;
    if (stat(real, &st) != 0 || (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
        bool ok = um_settings_fail(ld, L, path, "%s: '%s' is not a %s", path, real,
                                   want_dir ? "directory" : "regular file");
        free(real);
        return ok;
    }
    *out = real;
    return true;
}

void um_settings_lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s + 32);
}

/* A DNS-style host name: dot-separated labels of 1 to 63 letters, digits, '-' or '_' ('_'
 * for the names container runtimes hand out). */
bool um_settings_is_host_name(const char *s, size_t n)
{
    size_t label = 0;
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '.') {
            if (label == 0)
                return false;
            label = 0;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '-' || ch == '_') {
            if (++label > 63)
                return false;
        } else {
            return false;
        }
    }
    return label > 0;
}

/* A number of seconds from 0 to MAX_TIMEOUT (fractions allowed). */
bool um_settings_get_seconds0(struct um_settings_load *ld, lua_State *L, int idx, const char *path,
                              double *out)
{
    double d = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : NAN;
    if (!(d >= 0 && d <= MAX_TIMEOUT))
        return um_settings_fail(ld, L, path, "%s: expected a number of seconds from 0 to %.0f",
                                path, MAX_TIMEOUT);
    *out = d;
    return true;
}
