/* Loading config.lua into an immutable, reference-counted snapshot.
 *
 * The file runs once in a fresh LuaJIT state (JIT off, so that the instruction-count hook
 * sees every instruction and a runaway loop ends in an error instead of a hang). Then the
 * globals it assigned are read into C structs and validated, inside lua_cpcall so that
 * even an allocation failure in the Lua state comes back as a message, and only raw table
 * accesses are used, so that no metamethod of the script runs during validation.
 *
 * Every message names the file and, whenever one applies, the line:
 * - Lua syntax and runtime errors carry "chunkname:line:" already; the chunk name is
 *   "@FILE", and the (possibly shortened) name LuaJIT prints is swapped for FILE.
 * - A bad value is reported at the line of its dotted path ("routes.2.root") as found by
 *   the line finder (lualines.c), else at the nearest ancestor it found ("routes.2", then
 *   "routes"), else at the line where the global was first assigned, which a __newindex
 *   metamethod on _G records while the chunk runs, else without a line. */
#include "umbra/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "lualines.h"
#include "umbra/hooks.h"
#include "umbra/log.h"
#include "umbra/origin.h"
#include "umbra/tls.h"

/* Lua VM instructions a config may execute. A real config runs a few thousand; an endless
 * loop reaches this in a few tens of milliseconds. */
#define INSTRUCTION_BUDGET 10000000
#define MAX_FILE_BYTES (16u << 20)
#define MAX_WORKERS 256
/* Longer timeouts are certainly mistakes, and would overflow conversions to milliseconds. */
#define MAX_TIMEOUT 31536000.0
#define PATH_LEN 256
/* Upstream names are short identifiers; this also keeps every path below them in PATH_LEN. */
#define MAX_UPSTREAM_NAME 64
#define MAX_RETRIES 10
#define MAX_FAILS 100

static const char *const SETTINGS[] = {"listen",   "workers", "upstreams", "routes",
                                       "limits",   "timeouts", "mime",     "log_level",
                                       "tls",      "cache",   "admin",    "access_log",
                                       NULL};
static const char *const ROUTE_KEYS[] = {"host",  "path",           "root",  "upstream",
                                         "index", "redirect_https", "cache", "name",
                                         "on_request", "on_response", NULL};
/* Request hooks: functions, global or per route. */
static const char *const HOOKS[] = {"on_request", "on_response", NULL};
/* Yunying's settings (https://github.com/chenyuheng/Yunying-HTTP-Server, docs/config.md);
 * upstream_ip is what its examples write for upstream_domain. */
static const char *const YUNYING[] = {"port",          "working_thread_num", "cache_size_bytes",
                                      "cache_default_max_age", "cache_clean_interval",
                                      "origin_type",   "root_dir",           "upstream_host",
                                      "upstream_domain", "upstream_ip",      "upstream_port",
                                      "upstream_protocol", "upstream_set",   NULL};
static const char *const UPSTREAM_KEYS[] = {"servers", "balance",   "connect_timeout",
                                            "timeout", "retries",   "host",
                                            "tls",     "max_fails", "fail_timeout",
                                            "client",  NULL};
static const char *const TLS_KEYS[] = {"verify", "ca", NULL};
/* The server's tls = { ENTRY, ..., protocols = ..., ... }: the named keys, and an entry's. */
static const char *const SERVER_TLS_KEYS[] = {"protocols", "ciphers", "ciphersuites", "default",
                                              NULL};
static const char *const CERT_KEYS[] = {"hosts", "cert", "key", NULL};
/* In the order of the UM_TLS_PROTO_* bits. */
static const char *const TLS_PROTOCOLS[] = {"TLSv1.2", "TLSv1.3", NULL};
/* In the order of enum um_balance. */
static const char *const BALANCE_NAMES[] = {"round_robin", "least_conn", "hash", NULL};
static const char *const LIMIT_KEYS[] = {"max_connections", "max_header_bytes",
                                         "max_body_bytes", "max_request_line", NULL};
static const char *const TIMEOUT_KEYS[] = {"header", "idle", "send", "shutdown", NULL};
static const char *const LOG_LEVELS[] = {"error", "warn", "info", "debug", NULL};
static const char *const CACHE_KEYS[] = {"memory",      "max_object",     "clean_interval",
                                         "default_ttl", "stale_if_error", "purge", NULL};
static const char *const PURGE_KEYS[] = {"allow", NULL};
static const char *const ADMIN_KEYS[] = {"listen", "allow", NULL};
static const char *const ACCESS_LOG_KEYS[] = {"path", "format", NULL};
/* In the order of enum um_access_format. */
static const char *const ACCESS_FORMATS[] = {"combined", "json", NULL};

#define CACHE_MIN_MEMORY (1ull << 20)
#define CACHE_DEFAULT_MEMORY (256ull << 20)
#define CACHE_DEFAULT_MAX_OBJECT (64ull << 20)

/* Registry key of the table global name -> line of its first assignment. */
static const char GLOBAL_LINES_KEY = 'l';

struct load {
    const char *file;
    char *err;
    size_t errlen;
    char short_src[LUA_IDSIZE]; /* how LuaJIT names the file in its messages */
    char *dir;                  /* directory of the file, for relative roots */
    const char *src;
    size_t srclen;
    struct um__lualines lines;
    bool scanned;
    struct um_config *c;
    bool failed;
};

/* The command line's -a: listen addresses that replace the file's. */
static const char *const *listen_override;
static size_t num_listen_override;

void um_config_listen_override(const char *const *addrs, size_t n)
{
    listen_override = addrs;
    num_listen_override = n;
}

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

__attribute__((format(printf, 3, 4))) static bool fail_at(struct load *ld, int line,
                                                          const char *fmt, ...)
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
    lua_pushlightuserdata(L, (void *)&GLOBAL_LINES_KEY);
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
static int line_of(struct load *ld, lua_State *L, const char *path)
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
__attribute__((format(printf, 4, 5))) static bool fail(struct load *ld, lua_State *L,
                                                       const char *path, const char *fmt, ...)
{
    int line = line_of(ld, L, path);
    va_list ap;
    va_start(ap, fmt);
    format_err(ld->err, ld->errlen, ld->file, line, fmt, ap);
    va_end(ap);
    ld->failed = true;
    return false;
}

/* Turns the Lua error value on top of the stack into "FILE:LINE: message". */
static void fail_lua(struct load *ld, lua_State *L)
{
    int t = lua_type(L, -1);
    if (t != LUA_TSTRING && t != LUA_TNUMBER) {
        fail_at(ld, 0, "error (error object is a %s value)", lua_typename(L, t));
        return;
    }
    const char *msg = lua_tostring(L, -1);
    size_t n = strlen(ld->short_src);
    if (n > 0 && strncmp(msg, ld->short_src, n) == 0 && msg[n] == ':') {
        ld->failed = true;
        if (ld->err != NULL && ld->errlen > 0)
            snprintf(ld->err, ld->errlen, "%s%s", ld->file, msg + n);
        return;
    }
    fail_at(ld, 0, "%s", msg);
}

static bool in_list(const char *const *list, const char *s)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

/* Writes list as "a, b, c" into buf. */
static const char *join(const char *const *list, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; list[i] != NULL && off < n; i++) {
        int w = snprintf(buf + off, n - off, "%s%s", i ? ", " : "", list[i]);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    return buf;
}

/* Describes the key at idx for a message (never converts it in place: lua_next-safe). */
static const char *key_text(lua_State *L, int idx, char *buf, size_t n)
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
static const char *subpath(char *buf, size_t n, const char *parent, const char *key)
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

static const char *subpath_i(char *buf, size_t n, const char *parent, size_t i)
{
    char num[32];
    snprintf(num, sizeof num, "%zu", i);
    return subpath(buf, n, parent, num);
}

/* Pushes the global name without running metamethods; returns its type. */
static int get_global(lua_State *L, const char *name)
{
    lua_pushstring(L, name);
    lua_rawget(L, LUA_GLOBALSINDEX);
    return lua_type(L, -1);
}

/* Pushes t[name] of the table at idx, raw; returns its type. */
static int get_field(lua_State *L, int idx, const char *name)
{
    lua_pushstring(L, name);
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
    return lua_type(L, -1);
}

/* Checks that every key of the table at idx is one of the names in allowed. */
static bool check_keys(struct load *ld, lua_State *L, int idx, const char *path,
                       const char *const *allowed)
{
    char key[128], sub[PATH_LEN], names[256];
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING && in_list(allowed, lua_tostring(L, -1)))
            continue;
        key_text(L, -1, key, sizeof key);
        join(allowed, names, sizeof names);
        subpath(sub, sizeof sub, path, key);
        if (lua_type(L, -1) == LUA_TSTRING)
            return fail(ld, L, sub, "%s: unknown key '%s' (expected one of: %s)", path, key,
                        names);
        return fail(ld, L, sub, "%s: unexpected value at key [%s] (expected named keys: %s)",
                    path, key, names);
    }
    return true;
}

/* Checks that the table at idx is a list t[1..n] without holes or other keys. */
static bool check_list(struct load *ld, lua_State *L, int idx, const char *path, size_t *n)
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
        key_text(L, -1, key, sizeof key);
        subpath(sub, sizeof sub, path, key);
        if (lua_type(L, -1) == LUA_TSTRING)
            return fail(ld, L, sub, "%s: unexpected key '%s' (expected a list)", path, key);
        return fail(ld, L, sub, "%s: expected a list without holes (found index %s)", path,
                    key);
    }
    *n = count;
    return true;
}

/* Gets the string at idx; fails unless it is a non-empty string without NUL bytes. */
static bool get_string(struct load *ld, lua_State *L, int idx, const char *path,
                       const char *what, const char **s)
{
    size_t len;
    if (lua_type(L, idx) != LUA_TSTRING)
        return fail(ld, L, path, "%s: expected %s, got %s", path, what,
                    lua_typename(L, lua_type(L, idx)));
    *s = lua_tolstring(L, idx, &len);
    if (len == 0 || strlen(*s) != len)
        return fail(ld, L, path, "%s: expected %s, got %s", path, what,
                    len == 0 ? "an empty string" : "a string with a NUL byte");
    return true;
}

/* An integer in [lo, hi] (a Lua number without fraction). */
static bool get_integer(lua_State *L, int idx, double lo, double hi, long long *out)
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
static bool get_seconds(struct load *ld, lua_State *L, int idx, const char *path, double *out)
{
    double d = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : NAN;
    if (!(d > 0 && d <= MAX_TIMEOUT))
        return fail(ld, L, path,
                    "%s: expected a number of seconds greater than 0 and at most %.0f", path,
                    MAX_TIMEOUT);
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
static bool get_size(struct load *ld, lua_State *L, int idx, const char *path, uint64_t lo,
                     uint64_t hi, uint64_t *out)
{
    uint64_t v;
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER) {
        double d = lua_tonumber(L, idx);
        if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d))
            return fail(ld, L, path, "%s: expected %s, got %g", path, SIZE_HINT, d);
        v = (uint64_t)d;
    } else if (t == LUA_TSTRING) {
        const char *s = lua_tostring(L, idx);
        if (!um_config_parse_size(s, &v))
            return fail(ld, L, path, "%s: bad size \"%s\" (expected %s)", path, s, SIZE_HINT);
    } else {
        return fail(ld, L, path, "%s: expected %s, got %s", path, SIZE_HINT,
                    lua_typename(L, t));
    }
    if (v < lo || v > hi)
        return fail(ld, L, path, "%s: %llu bytes is out of range (%llu to %llu)", path,
                    (unsigned long long)v, (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return true;
}

/* Parses "host:port": host is an IPv4 literal, a bracketed IPv6 literal, "localhost"
 * (127.0.0.1) or "*" (0.0.0.0); port is 0 to 65535. */
static bool parse_listen(struct load *ld, lua_State *L, const char *path, const char *text,
                         struct um_listen *out)
{
    static const char hint[] =
        "expected \"HOST:PORT\" with HOST an IPv4 address, [IPv6 address], localhost or *";
    char host[64];
    const char *colon;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        colon = close + 1;
        if ((size_t)(close - text - 1) >= sizeof host)
            return fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof host)
            return fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        if (strchr(host, ':') != NULL)
            return fail(ld, L, path, "%s: bad address '%s' (IPv6 addresses need brackets: "
                        "\"[::1]:8080\")", path, text);
    }

    const char *p = colon + 1;
    unsigned long port = 0;
    size_t digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
        port = port * 10 + (unsigned long)(*p - '0');
    if (digits == 0 || *p != '\0' || port > 65535)
        return fail(ld, L, path, "%s: bad port in '%s' (expected 0 to 65535)", path, text);

    memset(&out->addr, 0, sizeof out->addr);
    if (text[0] == '[') {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->addr;
        if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
            return fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        out->addrlen = sizeof *sin6;
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->addr;
        if (strcmp(host, "*") == 0)
            sin->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (strcmp(host, "localhost") == 0)
            sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
            return fail(ld, L, path, "%s: bad address '%s' (%s)", path, text, hint);
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        out->addrlen = sizeof *sin;
    }
    out->text = um_strndup(text, strlen(text));
    return true;
}

#define LISTEN_HINT "a \"HOST:PORT\" string or { \"HOST:PORT\", tls = true }"

/* The listen entry at idx, at path: "HOST:PORT" or { "HOST:PORT", tls = true }. */
static bool load_listen_entry(struct load *ld, lua_State *L, int idx, const char *path,
                              struct um_listen *out)
{
    char key[128], sub[PATH_LEN];
    const char *s;
    if (lua_type(L, idx) != LUA_TTABLE)
        return get_string(ld, L, idx, path, LISTEN_HINT, &s) &&
               parse_listen(ld, L, path, s, out);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if ((lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) == 1) ||
            (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "tls") == 0))
            continue;
        key_text(L, -1, key, sizeof key);
        subpath(sub, sizeof sub, path, key);
        return fail(ld, L, sub, "%s: unexpected key '%s' (expected %s)", path, key, LISTEN_HINT);
    }
    subpath(sub, sizeof sub, path, "tls");
    int t = get_field(L, idx, "tls");
    if (t != LUA_TNIL) {
        if (t != LUA_TBOOLEAN)
            return fail(ld, L, sub, "%s: expected true or false, got %s", sub,
                        lua_typename(L, t));
        out->tls = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    lua_rawgeti(L, idx, 1);
    if (lua_isnil(L, -1))
        return fail(ld, L, path, "%s: missing the address (expected %s)", path, LISTEN_HINT);
    if (!get_string(ld, L, -1, path, "a \"HOST:PORT\" string", &s) ||
        !parse_listen(ld, L, path, s, out))
        return false;
    lua_pop(L, 1);
    return true;
}

static bool load_listen(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN];
    const char *s;
    if (num_listen_override > 0) {
        c->listen = um_calloc(num_listen_override, sizeof *c->listen);
        c->num_listen = num_listen_override;
        for (size_t i = 0; i < num_listen_override; i++)
            if (!parse_listen(ld, L, "-a", listen_override[i], &c->listen[i]))
                return false;
        return true;
    }
    int t = get_global(L, "listen");
    if (t == LUA_TNIL || t == LUA_TSTRING) {
        c->listen = um_calloc(1, sizeof *c->listen);
        c->num_listen = 1;
        if (t == LUA_TNIL)
            return parse_listen(ld, L, "listen", "127.0.0.1:8080", &c->listen[0]);
        return get_string(ld, L, -1, "listen", "an address string", &s) &&
               parse_listen(ld, L, "listen", s, &c->listen[0]);
    }
    if (t != LUA_TTABLE)
        return fail(ld, L, "listen", "listen: expected a list of \"HOST:PORT\" strings, got %s",
                    lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n;
    if (get_field(L, idx, "tls") != LUA_TNIL)
        return fail(ld, L, "listen.tls", "listen: tls = true goes inside an entry of the list: "
                    "listen = { { \"127.0.0.1:8443\", tls = true } }");
    lua_pop(L, 1);
    if (!check_list(ld, L, idx, "listen", &n))
        return false;
    if (n == 0)
        return fail(ld, L, "listen", "listen: expected at least one address");
    c->listen = um_calloc(n, sizeof *c->listen);
    c->num_listen = n;
    for (size_t i = 0; i < n; i++) {
        subpath_i(sub, sizeof sub, "listen", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        if (!load_listen_entry(ld, L, lua_gettop(L), sub, &c->listen[i]))
            return false;
        lua_pop(L, 1);
        /* Port 0 asks for any free port: never a duplicate. */
        const struct sockaddr_storage *a = &c->listen[i].addr;
        in_port_t port = a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                                  : ((const struct sockaddr_in *)a)->sin_port;
        for (size_t j = 0; j < i && port != 0; j++)
            if (c->listen[j].addrlen == c->listen[i].addrlen &&
                memcmp(&c->listen[j].addr, &c->listen[i].addr, c->listen[i].addrlen) == 0)
                return fail(ld, L, sub, "%s: '%s' is listed twice", sub, c->listen[i].text);
    }
    return true;
}

static bool any_tls_listener(const struct um_config *c)
{
    for (size_t i = 0; i < c->num_listen; i++)
        if (c->listen[i].tls)
            return true;
    return false;
}

static bool load_workers(struct load *ld, lua_State *L)
{
    long long n;
    int t = get_global(L, "workers");
    if (t == LUA_TNIL) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        ld->c->workers = cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus;
        return true;
    }
    if (!get_integer(L, -1, 1, MAX_WORKERS, &n)) {
        char got[64];
        if (t == LUA_TNUMBER)
            snprintf(got, sizeof got, "%g", lua_tonumber(L, -1));
        else
            snprintf(got, sizeof got, "%s", lua_typename(L, t));
        return fail(ld, L, "workers", "workers: expected an integer from 1 to %d, got %s",
                    MAX_WORKERS, got);
    }
    ld->c->workers = (int)n;
    return true;
}

/* Resolves name (as written at path) against the config's directory into an absolute,
 * existing path: a directory when want_dir, else a regular file. */
static bool resolve_path(struct load *ld, lua_State *L, const char *path, const char *name,
                         bool want_dir, char **out)
{
    const char *kind = want_dir ? "directory" : "file";
    char *joined;
    if (name[0] == '/') {
        joined = um_strndup(name, strlen(name));
    } else {
        size_t dl = strlen(ld->dir), nl = strlen(name);
        joined = um_malloc(dl + 1 + nl + 1);
        memcpy(joined, ld->dir, dl);
        joined[dl] = '/';
        memcpy(joined + dl + 1, name, nl + 1);
    }
    char *real = realpath(joined, NULL);
    int e = errno;
    if (real == NULL) {
        bool ok = e == ENOENT ? fail(ld, L, path, "%s: no such %s '%s' (looked for %s)", path,
                                     kind, name, joined)
                              : fail(ld, L, path, "%s: cannot use %s '%s' (%s): %s", path,
                                     kind, name, joined, strerror(e));
        free(joined);
        return ok;
    }
    free(joined);
    struct stat st;
    if (stat(real, &st) != 0 || (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))) {
        bool ok = fail(ld, L, path, "%s: '%s' is not a %s", path, real,
                       want_dir ? "directory" : "regular file");
        free(real);
        return ok;
    }
    *out = real;
    return true;
}

static void lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s + 32);
}

/* A DNS-style host name: dot-separated labels of 1 to 63 letters, digits, '-' or '_' ('_'
 * for the names container runtimes hand out). */
static bool is_host_name(const char *s, size_t n)
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

#define URL_HINT "expected \"http://HOST[:PORT]\" or \"https://HOST[:PORT]\""

/* Parses an upstream server URL, "http[s]://HOST[:PORT]" with an optional final "/", into
 * out->url = "scheme://host:port": scheme and host lower-cased, IPv6 in its canonical
 * form, the default port (80, 443) written out. */
static bool parse_server(struct load *ld, lua_State *L, const char *path, const char *text,
                         struct um_upstream_server *out)
{
    char host[INET6_ADDRSTRLEN + 256];
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return fail(ld, L, path, "%s: bad URL '%s': contains a space or control character",
                        path, text);
    const char *sep = strstr(text, "://");
    if (sep == NULL)
        return fail(ld, L, path, "%s: bad URL '%s' (" URL_HINT ")", path, text);
    size_t sl = (size_t)(sep - text);
    bool https;
    if (sl == 4 && strncasecmp(text, "http", 4) == 0)
        https = false;
    else if (sl == 5 && strncasecmp(text, "https", 5) == 0)
        https = true;
    else
        return fail(ld, L, path, "%s: bad scheme in '%s' (expected http:// or https://)", path,
                    text);

    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *rest = auth + alen, *end = auth + alen;
    if (rest[0] != '\0' && strcmp(rest, "/") != 0) {
        const char *q = rest[0] == '/' ? rest + 1 : rest;
        const char *what = *q == '?' ? "a query" : *q == '#' ? "a fragment" : "a path";
        return fail(ld, L, path, "%s: bad URL '%s': %s is not allowed (" URL_HINT
                    "; the request's path is passed on as it is)", path, text, what);
    }
    if (memchr(auth, '@', alen) != NULL)
        return fail(ld, L, path,
                    "%s: bad URL '%s': user info (\"user@\") is not allowed (" URL_HINT ")",
                    path, text);

    const char *after; /* end of the host */
    struct in6_addr a6;
    struct in_addr a4;
    int family = 0; /* AF_INET/AF_INET6 when the host is an address */
    if (alen > 0 && auth[0] == '[') {
        const char *close = memchr(auth, ']', alen);
        char v6[INET6_ADDRSTRLEN];
        size_t hl = close != NULL ? (size_t)(close - auth - 1) : 0;
        if (close == NULL || hl == 0 || hl >= sizeof v6)
            return fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        memcpy(v6, auth + 1, hl);
        v6[hl] = '\0';
        if (inet_pton(AF_INET6, v6, &a6) != 1 || inet_ntop(AF_INET6, &a6, v6, sizeof v6) == NULL)
            return fail(ld, L, path, "%s: bad IPv6 address in '%s'", path, text);
        snprintf(host, sizeof host, "[%s]", v6);
        family = AF_INET6;
        after = close + 1;
        if (after != end && *after != ':')
            return fail(ld, L, path, "%s: bad URL '%s' (" URL_HINT ")", path, text);
    } else {
        const char *colon = memchr(auth, ':', alen);
        after = colon != NULL ? colon : end;
        size_t hl = (size_t)(after - auth);
        if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL)
            return fail(ld, L, path, "%s: bad URL '%s' (IPv6 addresses need brackets: "
                        "\"http://[::1]:9000\")", path, text);
        if (hl == 0)
            return fail(ld, L, path, "%s: bad URL '%s': missing host (" URL_HINT ")", path,
                        text);
        if (hl >= sizeof host || !is_host_name(auth, hl))
            return fail(ld, L, path, "%s: bad host in '%s' (expected a host name, an IPv4 "
                        "address or an [IPv6 address])", path, text);
        memcpy(host, auth, hl);
        host[hl] = '\0';
        lower(host);
        /* All digits and dots: it can only mean an IPv4 address, so it must be one. */
        if (strspn(host, "0123456789.") == hl) {
            if (inet_pton(AF_INET, host, &a4) != 1)
                return fail(ld, L, path, "%s: bad IPv4 address in '%s'", path, text);
            family = AF_INET;
        }
    }

    unsigned long port = https ? 443 : 80;
    if (after != end) {
        const char *p = after + 1;
        size_t digits = 0;
        port = 0;
        for (; p < end && *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
            port = port * 10 + (unsigned long)(*p - '0');
        if (digits == 0 || p != end || port < 1 || port > 65535)
            return fail(ld, L, path, "%s: bad port in '%s' (expected 1 to 65535)", path, text);
    }

    size_t n = strlen(host) + 32;
    out->url = um_malloc(n);
    snprintf(out->url, n, "%s://%s:%lu", https ? "https" : "http", host, port);
    out->https = https;
    memset(&out->addr, 0, sizeof out->addr);
    out->addrlen = 0;
    if (family == AF_INET) {
        struct sockaddr_in *sa = (struct sockaddr_in *)&out->addr;
        sa->sin_family = AF_INET;
        sa->sin_addr = a4;
        sa->sin_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    } else if (family == AF_INET6) {
        struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&out->addr;
        sa->sin6_family = AF_INET6;
        sa->sin6_addr = a6;
        sa->sin6_port = htons((uint16_t)port);
        out->addrlen = sizeof *sa;
    }
    return true;
}

/* servers = "URL" or { "URL", ... } of the upstream table at idx. */
static bool load_servers(struct load *ld, lua_State *L, int idx, const char *upath,
                         struct um_upstream_conf *u)
{
    char sub[PATH_LEN], el[PATH_LEN];
    const char *s;
    size_t n = 1;
    subpath(sub, sizeof sub, upath, "servers");
    int t = get_field(L, idx, "servers");
    if (t == LUA_TNIL)
        return fail(ld, L, sub, "%s: missing (every upstream needs at least one server, e.g. "
                    "servers = { \"http://127.0.0.1:9000\" })", sub);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return fail(ld, L, sub, "%s: expected a URL or a list of URLs, got %s", sub,
                    lua_typename(L, t));
    int sidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!check_list(ld, L, sidx, sub, &n))
            return false;
        if (n == 0)
            return fail(ld, L, sub, "%s: expected at least one server", sub);
    }
    u->servers = um_calloc(n, sizeof *u->servers);
    for (size_t i = 0; i < n; i++) {
        if (t == LUA_TTABLE) {
            subpath_i(el, sizeof el, sub, i + 1);
            lua_rawgeti(L, sidx, (int)i + 1);
        } else {
            snprintf(el, sizeof el, "%s", sub);
            lua_pushvalue(L, sidx);
        }
        if (!get_string(ld, L, -1, el, "a URL such as \"http://127.0.0.1:9000\"", &s) ||
            !parse_server(ld, L, el, s, &u->servers[i]))
            return false;
        u->num_servers++;
        for (size_t j = 0; j < i; j++)
            if (strcmp(u->servers[j].url, u->servers[i].url) == 0)
                return fail(ld, L, el, "%s: '%s' is listed twice (as %s)", el, s,
                            u->servers[i].url);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* tls = { verify = BOOL, ca = "FILE" } of the upstream table at idx. */
static bool load_upstream_tls(struct load *ld, lua_State *L, int idx, const char *upath,
                              struct um_upstream_conf *u)
{
    char tpath[PATH_LEN], sub[PATH_LEN];
    const char *s;
    subpath(tpath, sizeof tpath, upath, "tls");
    int t = get_field(L, idx, "tls");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return fail(ld, L, tpath, "%s: expected a table such as { verify = true, ca = "
                    "\"ca.pem\" }, got %s", tpath, lua_typename(L, t));
    int tidx = lua_gettop(L);
    if (!check_keys(ld, L, tidx, tpath, TLS_KEYS))
        return false;
    subpath(sub, sizeof sub, tpath, "verify");
    if ((t = get_field(L, tidx, "verify")) != LUA_TNIL) {
        if (t != LUA_TBOOLEAN)
            return fail(ld, L, sub, "%s: expected true or false, got %s", sub,
                        lua_typename(L, t));
        u->tls_verify = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    subpath(sub, sizeof sub, tpath, "ca");
    if (get_field(L, tidx, "ca") != LUA_TNIL) {
        if (!get_string(ld, L, -1, sub, "the path of a CA certificate file", &s) ||
            !resolve_path(ld, L, sub, s, false, &u->tls_ca))
            return false;
    }
    lua_pop(L, 2);
    return true;
}

/* The upstream at idx, whose name is already in u->name. */
static bool load_upstream(struct load *ld, lua_State *L, int idx, const char *upath,
                          struct um_upstream_conf *u)
{
    char sub[PATH_LEN], names[128];
    const char *s;
    long long n;
    int t = lua_type(L, idx);
    if (t != LUA_TTABLE)
        return fail(ld, L, upath, "%s: expected a table such as { servers = { "
                    "\"http://127.0.0.1:9000\" } }, got %s", upath, lua_typename(L, t));
    if (!check_keys(ld, L, idx, upath, UPSTREAM_KEYS))
        return false;
    u->line = line_of(ld, L, upath);
    u->balance = UM_BALANCE_ROUND_ROBIN;
    u->connect_timeout = 2;
    u->timeout = 30;
    u->retries = 1;
    u->tls_verify = true;
    u->max_fails = 3;
    u->fail_timeout = 10;

    if (!load_servers(ld, L, idx, upath, u))
        return false;

    subpath(sub, sizeof sub, upath, "balance");
    if ((t = get_field(L, idx, "balance")) != LUA_TNIL) {
        size_t i = 0;
        while (t == LUA_TSTRING && BALANCE_NAMES[i] != NULL &&
               strcmp(lua_tostring(L, -1), BALANCE_NAMES[i]) != 0)
            i++;
        if (t != LUA_TSTRING || BALANCE_NAMES[i] == NULL)
            return fail(ld, L, sub, "%s: expected one of: %s", sub,
                        join(BALANCE_NAMES, names, sizeof names));
        u->balance = (enum um_balance)i;
    }
    lua_pop(L, 1);

    subpath(sub, sizeof sub, upath, "client");
    if ((t = get_field(L, idx, "client")) != LUA_TNIL) {
        const char *v = t == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(v, "auto") == 0)
            u->curl_only = false;
        else if (strcmp(v, "curl") == 0)
            u->curl_only = true;
        else
            return fail(ld, L, sub, "%s: expected \"auto\" or \"curl\"", sub);
    }
    lua_pop(L, 1);

    static const char *const seconds[] = {"connect_timeout", "timeout", "fail_timeout"};
    double *fields[] = {&u->connect_timeout, &u->timeout, &u->fail_timeout};
    for (size_t i = 0; i < UM_NELEMS(fields); i++) {
        subpath(sub, sizeof sub, upath, seconds[i]);
        if (get_field(L, idx, seconds[i]) != LUA_TNIL && !get_seconds(ld, L, -1, sub, fields[i]))
            return false;
        lua_pop(L, 1);
    }

    subpath(sub, sizeof sub, upath, "retries");
    if (get_field(L, idx, "retries") != LUA_TNIL) {
        if (!get_integer(L, -1, 0, MAX_RETRIES, &n))
            return fail(ld, L, sub, "%s: expected an integer from 0 to %d", sub, MAX_RETRIES);
        u->retries = (int)n;
    }
    lua_pop(L, 1);

    subpath(sub, sizeof sub, upath, "max_fails");
    if (get_field(L, idx, "max_fails") != LUA_TNIL) {
        if (!get_integer(L, -1, 1, MAX_FAILS, &n))
            return fail(ld, L, sub, "%s: expected an integer from 1 to %d", sub, MAX_FAILS);
        u->max_fails = (int)n;
    }
    lua_pop(L, 1);

    subpath(sub, sizeof sub, upath, "host");
    if (get_field(L, idx, "host") != LUA_TNIL) {
        if (!get_string(ld, L, -1, sub, "a Host such as \"example.com\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '/')
                return fail(ld, L, sub, "%s: bad Host '%s' (ASCII without spaces, control "
                            "characters or '/')", sub, s);
        u->host = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);

    return load_upstream_tls(ld, L, idx, upath, u);
}

static int cmp_upstream(const void *a, const void *b)
{
    return strcmp(((const struct um_upstream_conf *)a)->name,
                  ((const struct um_upstream_conf *)b)->name);
}

/* upstreams = { NAME = { ... }, ... }, stored sorted by name so that the indexes routes
 * refer to do not depend on the order of a Lua table. */
static bool load_upstreams(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char key[128], sub[PATH_LEN];
    int t = get_global(L, "upstreams");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "upstreams", "upstreams: expected a table of NAME = { servers = "
                    "{ ... } }, got %s", lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    if (n == 0)
        return true;
    c->upstreams = um_calloc(n, sizeof *c->upstreams);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        key_text(L, -1, key, sizeof key);
        subpath(sub, sizeof sub, "upstreams", key);
        if (lua_type(L, -1) != LUA_TSTRING)
            return fail(ld, L, sub, "upstreams: expected upstream names as keys, got [%s] "
                        "(e.g. upstreams = { app = { servers = { ... } } })", key);
        const char *name = lua_tostring(L, -1);
        size_t len = strlen(name);
        bool ok = len > 0 && len <= MAX_UPSTREAM_NAME && !(name[0] >= '0' && name[0] <= '9') &&
                  name[0] != '-';
        for (const char *p = name; *p && ok; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || *p == '_' || *p == '-';
        if (!ok)
            return fail(ld, L, sub, "upstreams: bad upstream name '%s' (expected up to %d "
                        "letters, digits, '_' or '-', starting with a letter or '_')", key,
                        MAX_UPSTREAM_NAME);
        c->upstreams[c->num_upstreams++].name = um_strndup(name, len);
    }
    qsort(c->upstreams, c->num_upstreams, sizeof *c->upstreams, cmp_upstream);
    for (size_t i = 0; i < c->num_upstreams; i++) {
        struct um_upstream_conf *u = &c->upstreams[i];
        subpath(sub, sizeof sub, "upstreams", u->name);
        get_field(L, idx, u->name);
        if (!load_upstream(ld, L, lua_gettop(L), sub, u))
            return false;
        lua_pop(L, 1);
    }
    return true;
}

/* The route's upstream = "NAME" (on top of the stack), at path. */
static bool resolve_upstream(struct load *ld, lua_State *L, const char *path,
                             struct um_route *r)
{
    struct um_config *c = ld->c;
    char names[256];
    const char *s;
    if (!get_string(ld, L, -1, path, "the name of an upstream", &s))
        return false;
    int found = um_config_upstream_index(c, s);
    if (found >= 0) {
        r->upstream = found;
        return true;
    }
    if (c->num_upstreams == 0)
        return fail(ld, L, path, "%s: unknown upstream '%s' (the upstreams setting defines "
                    "none)", path, s);
    size_t off = 0;
    names[0] = '\0';
    for (size_t i = 0; i < c->num_upstreams && off < sizeof names; i++) {
        int w = snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                         c->upstreams[i].name);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    return fail(ld, L, path, "%s: unknown upstream '%s' (upstreams are: %s)", path, s, names);
}

static bool load_route(struct load *ld, lua_State *L, int idx, const char *rpath,
                       struct um_route *r)
{
    char sub[PATH_LEN], names[128];
    const char *s;
    if (!lua_istable(L, idx))
        return fail(ld, L, rpath,
                    "%s: expected a route table such as { path = \"/\", root = \"www\" }, got %s",
                    rpath, lua_typename(L, lua_type(L, idx)));
    r->upstream = -1;
    if (!check_keys(ld, L, idx, rpath, ROUTE_KEYS))
        return false;
    r->line = line_of(ld, L, rpath);

    subpath(sub, sizeof sub, rpath, "host");
    if (get_field(L, idx, "host") != LUA_TNIL) {
        if (!get_string(ld, L, -1, sub, "a host name such as \"example.com\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if (*p <= ' ' || *p == ':' || *p == '/' || *p == 0x7f)
                return fail(ld, L, sub, "%s: bad host name '%s' (no port, path or spaces)",
                            sub, s);
        r->host = um_strndup(s, strlen(s));
        for (char *p = r->host; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
    }
    lua_pop(L, 1);

    subpath(sub, sizeof sub, rpath, "path");
    if (get_field(L, idx, "path") == LUA_TNIL)
        return fail(ld, L, sub, "%s: missing (every route needs a path such as \"/\")", sub);
    if (!get_string(ld, L, -1, sub, "a path starting with \"/\"", &s))
        return false;
    if (s[0] != '/')
        return fail(ld, L, sub, "%s: '%s' does not start with \"/\"", sub, s);
    for (const char *p = s; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return fail(ld, L, sub, "%s: '%s' contains a space or control character", sub, s);
    r->path = um_strndup(s, strlen(s));
    lua_pop(L, 1);

    subpath(sub, sizeof sub, rpath, "redirect_https");
    int rt = get_field(L, idx, "redirect_https");
    if (rt != LUA_TNIL) {
        if (rt != LUA_TBOOLEAN)
            return fail(ld, L, sub, "%s: expected true or false, got %s", sub,
                        lua_typename(L, rt));
        r->redirect_https = lua_toboolean(L, -1);
        if (r->redirect_https && !any_tls_listener(ld->c))
            return fail(ld, L, sub, "%s: no listener has tls = true (there is no https "
                        "address to redirect to)", sub);
    }
    lua_pop(L, 1);

    subpath(sub, sizeof sub, rpath, "name");
    if (get_field(L, idx, "name") != LUA_TNIL) {
        if (!get_string(ld, L, -1, sub, "a route name such as \"api\"", &s))
            return false;
        /* The routes after this one have no name yet. */
        if (um_config_route_index(ld->c, s) >= 0)
            return fail(ld, L, sub, "%s: another route is named '%s' already", sub, s);
        r->name = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);
    for (const char *const *h = HOOKS; *h; h++) {
        subpath(sub, sizeof sub, rpath, *h);
        int ht = get_field(L, idx, *h);
        if (ht != LUA_TNIL && ht != LUA_TFUNCTION)
            return fail(ld, L, sub, "%s: expected a function, got %s", sub,
                        lua_typename(L, ht));
        if (ht == LUA_TFUNCTION)
            *(h == HOOKS ? &r->on_request : &r->on_response) = true;
        lua_pop(L, 1);
    }

    bool has_root = get_field(L, idx, "root") != LUA_TNIL;
    bool has_upstream = get_field(L, idx, "upstream") != LUA_TNIL;
    lua_pop(L, 2);
    if (has_root && has_upstream)
        return fail(ld, L, rpath, "%s: has both root and upstream (a route serves files from "
                    "a root or proxies to an upstream, not both)", rpath);
    if (!has_root && !has_upstream) {
        /* A route that only a hook answers (or sends to an upstream of its choice). */
        if (r->on_request || ld->c->lua.on_request) {
            int ct = get_field(L, idx, "cache"), it = get_field(L, idx, "index");
            lua_pop(L, 2);
            if (ct != LUA_TNIL || it != LUA_TNIL)
                return fail(ld, L, rpath, "%s: cache and index need root or upstream", rpath);
            return true;
        }
        return fail(ld, L, rpath, "%s: route needs root or upstream (root = \"www\" serves "
                    "files, upstream = \"NAME\" proxies to an upstream), or an on_request "
                    "hook that answers", rpath);
    }

    /* cache: on by default for an upstream route; a static route never goes through the
     * cache (cache = false on one is allowed, and changes nothing). */
    subpath(sub, sizeof sub, rpath, "cache");
    r->cache = has_upstream;
    int ct = get_field(L, idx, "cache");
    if (ct != LUA_TNIL) {
        if (ct != LUA_TBOOLEAN)
            return fail(ld, L, sub, "%s: expected true or false, got %s", sub,
                        lua_typename(L, ct));
        if (lua_toboolean(L, -1) && !has_upstream)
            return fail(ld, L, sub, "%s: cache applies to upstream routes (this one serves "
                        "files from a root)", sub);
        r->cache = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);

    if (has_upstream) {
        subpath(sub, sizeof sub, rpath, "upstream");
        get_field(L, idx, "upstream");
        if (!resolve_upstream(ld, L, sub, r))
            return false;
        lua_pop(L, 1);
        subpath(sub, sizeof sub, rpath, "index");
        if (get_field(L, idx, "index") != LUA_TNIL)
            return fail(ld, L, sub, "%s: only routes with a root have an index (this one "
                        "proxies to upstream '%s')", sub, ld->c->upstreams[r->upstream].name);
        lua_pop(L, 1);
        return true;
    }

    subpath(sub, sizeof sub, rpath, "root");
    get_field(L, idx, "root");
    if (!get_string(ld, L, -1, sub, "a directory", &s) ||
        !resolve_path(ld, L, sub, s, true, &r->root))
        return false;
    lua_pop(L, 1);

    subpath(sub, sizeof sub, rpath, "index");
    int t = get_field(L, idx, "index");
    if (t == LUA_TNIL) {
        r->index = um_strndup("index.html", strlen("index.html"));
    } else if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
        r->index = NULL;
    } else {
        snprintf(names, sizeof names, "a file name such as \"index.html\", or false");
        if (!get_string(ld, L, -1, sub, names, &s))
            return false;
        if (strchr(s, '/') != NULL || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
            return fail(ld, L, sub, "%s: expected %s, got '%s'", sub, names, s);
        r->index = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);
    return true;
}

static bool load_routes(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN];
    int t = get_global(L, "routes");
    if (t == LUA_TNIL)
        return fail_at(ld, 0, "routes: missing (at least one route is required, e.g. "
                              "routes = { { path = \"/\", root = \"www\" } })");
    if (t != LUA_TTABLE)
        return fail(ld, L, "routes", "routes: expected a list of route tables, got %s",
                    lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n;
    if (!check_list(ld, L, idx, "routes", &n))
        return false;
    if (n == 0)
        return fail(ld, L, "routes", "routes: expected at least one route");
    c->routes = um_calloc(n, sizeof *c->routes);
    c->num_routes = n;
    for (size_t i = 0; i < n; i++) {
        subpath_i(sub, sizeof sub, "routes", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        if (!load_route(ld, L, lua_gettop(L), sub, &c->routes[i]))
            return false;
        lua_pop(L, 1);
    }
    return true;
}

/* --- the server's tls setting ------------------------------------------------------------ */

/* The file name (as written at path) joined to the config's folder. It must be a regular
 * file, following symlinks, but the path is kept as written: a certificate reload re-reads
 * whatever a re-pointed link (certbot's live/) names by then. */
static bool resolve_tls_file(struct load *ld, lua_State *L, const char *path, const char *name,
                             char **out)
{
    char *joined;
    struct stat st;
    if (name[0] == '/') {
        joined = um_strndup(name, strlen(name));
    } else {
        size_t dl = strlen(ld->dir), nl = strlen(name);
        joined = um_malloc(dl + 1 + nl + 1);
        memcpy(joined, ld->dir, dl);
        joined[dl] = '/';
        memcpy(joined + dl + 1, name, nl + 1);
    }
    bool ok = true;
    if (stat(joined, &st) != 0)
        ok = errno == ENOENT ? fail(ld, L, path, "%s: no such file '%s' (looked for %s)", path,
                                    name, joined)
                             : fail(ld, L, path, "%s: cannot use file '%s' (%s): %s", path,
                                    name, joined, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        ok = fail(ld, L, path, "%s: '%s' is not a regular file", path, joined);
    if (!ok) {
        free(joined);
        return false;
    }
    *out = joined;
    return true;
}

/* The host name s of a certificate entry, at path: a DNS name, or "*." and a DNS name. */
static bool check_tls_host(struct load *ld, lua_State *L, const char *path, const char *s)
{
    const char *base = strncmp(s, "*.", 2) == 0 ? s + 2 : s;
    size_t n = strlen(base);
    if (strchr(base, '*') != NULL)
        return fail(ld, L, path, "%s: bad name '%s' (a wildcard is only allowed as the whole "
                    "left-most label, e.g. \"*.example.com\")", path, s);
    if (!is_host_name(base, n))
        return fail(ld, L, path, "%s: bad host name '%s'", path, s);
    if (base == s && strspn(s, "0123456789.") == n)
        return fail(ld, L, path, "%s: '%s' is an IP address, and clients send no name (SNI) "
                    "for those: tls.default picks the certificate they get", path, s);
    return true;
}

/* The entry that lists host already, or -1. */
static int tls_host_owner(const struct um_tls_conf *tc, size_t upto, const char *host)
{
    for (size_t i = 0; i <= upto && i < tc->num_certs; i++)
        for (size_t j = 0; j < tc->certs[i].num_hosts; j++)
            if (strcmp(tc->certs[i].hosts[j], host) == 0)
                return (int)i;
    return -1;
}

/* hosts = "NAME" or { "NAME", ... } of the entry at idx (entry number i). */
static bool load_tls_hosts(struct load *ld, lua_State *L, int idx, const char *cpath, size_t i,
                           struct um_tls_cert_conf *cc)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char sub[PATH_LEN], el[PATH_LEN], other[PATH_LEN];
    const char *s;
    size_t n = 1;
    subpath(sub, sizeof sub, cpath, "hosts");
    int t = get_field(L, idx, "hosts");
    if (t == LUA_TNIL)
        return fail(ld, L, sub, "%s: missing (the names this certificate serves, e.g. hosts = "
                    "{ \"example.com\", \"*.example.com\" })", sub);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return fail(ld, L, sub, "%s: expected a list of host names, got %s", sub,
                    lua_typename(L, t));
    int hidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!check_list(ld, L, hidx, sub, &n))
            return false;
        if (n == 0)
            return fail(ld, L, sub, "%s: expected at least one host name", sub);
    }
    cc->hosts = um_calloc(n, sizeof *cc->hosts);
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            subpath_i(el, sizeof el, sub, j + 1);
            lua_rawgeti(L, hidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "%s", sub);
            lua_pushvalue(L, hidx);
        }
        if (!get_string(ld, L, -1, el, "a host name such as \"example.com\"", &s) ||
            !check_tls_host(ld, L, el, s))
            return false;
        char *host = um_strndup(s, strlen(s));
        lower(host);
        int owner = tls_host_owner(tc, i, host);
        if (owner >= 0) {
            subpath_i(other, sizeof other, "tls", (size_t)owner + 1);
            bool ok = (size_t)owner == i
                          ? fail(ld, L, el, "%s: '%s' is listed twice", el, s)
                          : fail(ld, L, el, "%s: '%s' is already listed in %s", el, s, other);
            free(host);
            return ok;
        }
        cc->hosts[cc->num_hosts++] = host;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* Entry number i (tls[i + 1]) at idx: { hosts = {...}, cert = "F", key = "F" }. */
static bool load_tls_cert(struct load *ld, lua_State *L, int idx, const char *cpath, size_t i,
                          struct um_tls_cert_conf *cc)
{
    char sub[PATH_LEN], reason[512];
    const char *cert_name, *key_name;
    if (lua_type(L, idx) != LUA_TTABLE)
        return fail(ld, L, cpath, "%s: expected a certificate entry such as { hosts = { "
                    "\"example.com\" }, cert = \"example.crt\", key = \"example.key\" }, got %s",
                    cpath, lua_typename(L, lua_type(L, idx)));
    if (!check_keys(ld, L, idx, cpath, CERT_KEYS))
        return false;
    cc->line = line_of(ld, L, cpath);
    if (!load_tls_hosts(ld, L, idx, cpath, i, cc))
        return false;

    static const char *const files[] = {"cert", "key"};
    static const char *const what[] = {"a PEM certificate chain file", "a PEM key file"};
    char **outs[] = {&cc->cert, &cc->key};
    const char **names[] = {&cert_name, &key_name};
    for (size_t k = 0; k < 2; k++) {
        subpath(sub, sizeof sub, cpath, files[k]);
        if (get_field(L, idx, files[k]) == LUA_TNIL)
            return fail(ld, L, sub, "%s: missing (%s, relative to the config's folder)", sub,
                        what[k]);
        if (!get_string(ld, L, -1, sub, what[k], names[k]) ||
            !resolve_tls_file(ld, L, sub, *names[k], outs[k]))
            return false;
        /* The string stays alive in the table: only the value is popped. */
        lua_pop(L, 1);
    }

    switch (um_tls_check_pair(cc->cert, cc->key, reason, sizeof reason)) {
    case UM_TLS_FAULT_NONE:
        return true;
    case UM_TLS_FAULT_CERT:
        subpath(sub, sizeof sub, cpath, "cert");
        return fail(ld, L, sub, "%s: %s: %s", sub, cert_name, reason);
    case UM_TLS_FAULT_KEY:
        subpath(sub, sizeof sub, cpath, "key");
        return fail(ld, L, sub, "%s: %s: %s", sub, key_name, reason);
    case UM_TLS_FAULT_MISMATCH:
    default:
        subpath(sub, sizeof sub, cpath, "key");
        return fail(ld, L, sub, "%s: %s does not match the certificate %s", sub, key_name,
                    cert_name);
    }
}

/* protocols = "TLSv1.3" or a list of them, of the tls table at idx. */
static bool load_tls_protocols(struct load *ld, lua_State *L, int idx)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char el[PATH_LEN], names[64];
    const char *s;
    size_t n = 1;
    int t = get_field(L, idx, "protocols");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return fail(ld, L, "tls.protocols", "tls.protocols: expected a list such as { "
                    "\"TLSv1.2\", \"TLSv1.3\" }, got %s", lua_typename(L, t));
    int pidx = lua_gettop(L);
    if (t == LUA_TTABLE) {
        if (!check_list(ld, L, pidx, "tls.protocols", &n))
            return false;
        if (n == 0)
            return fail(ld, L, "tls.protocols", "tls.protocols: expected at least one of: %s",
                        join(TLS_PROTOCOLS, names, sizeof names));
    }
    tc->protocols = 0;
    for (size_t j = 0; j < n; j++) {
        if (t == LUA_TTABLE) {
            subpath_i(el, sizeof el, "tls.protocols", j + 1);
            lua_rawgeti(L, pidx, (int)j + 1);
        } else {
            snprintf(el, sizeof el, "tls.protocols");
            lua_pushvalue(L, pidx);
        }
        if (!get_string(ld, L, -1, el, "\"TLSv1.2\" or \"TLSv1.3\"", &s))
            return false;
        size_t k = 0;
        while (TLS_PROTOCOLS[k] != NULL && strcmp(TLS_PROTOCOLS[k], s) != 0)
            k++;
        if (TLS_PROTOCOLS[k] == NULL)
            return fail(ld, L, el, "%s: unknown protocol '%s' (expected one of: %s; older "
                        "versions are not supported)", el, s,
                        join(TLS_PROTOCOLS, names, sizeof names));
        if (tc->protocols & (1u << k))
            return fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        tc->protocols |= 1u << k;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return true;
}

/* ciphers / ciphersuites of the tls table at idx. */
static bool load_tls_ciphers(struct load *ld, lua_State *L, int idx, const char *key, bool tls13,
                             char **out)
{
    char sub[PATH_LEN], reason[512];
    const char *s;
    subpath(sub, sizeof sub, "tls", key);
    if (get_field(L, idx, key) != LUA_TNIL) {
        if (!get_string(ld, L, -1, sub, tls13 ? "a TLS 1.3 ciphersuite list" :
                        "a TLS 1.2 cipher list", &s))
            return false;
        if (!um_tls_check_ciphers(s, tls13, reason, sizeof reason))
            return fail(ld, L, sub, "%s: %s", sub, reason);
        *out = um_strndup(s, strlen(s));
    }
    lua_pop(L, 1);
    return true;
}

/* A listener with tls = true needs certificates. */
static bool check_tls_listeners(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char sub[PATH_LEN], el[PATH_LEN];
    if (c->tls.num_certs > 0)
        return true;
    for (size_t i = 0; i < c->num_listen; i++) {
        if (!c->listen[i].tls)
            continue;
        subpath_i(sub, sizeof sub, "listen", i + 1);
        subpath(el, sizeof el, sub, "tls");
        return fail(ld, L, el, "%s: tls = true needs certificates: add a setting tls = { { "
                    "hosts = { \"example.com\" }, cert = \"example.crt\", key = "
                    "\"example.key\" } }", sub);
    }
    return true;
}

/* tls = { { hosts = {...}, cert = "F", key = "F" }, ..., protocols = {...}, ciphers = "...",
 * ciphersuites = "...", default = "HOST" }. */
static bool load_tls(struct load *ld, lua_State *L)
{
    struct um_tls_conf *tc = &ld->c->tls;
    char key[128], sub[PATH_LEN], names[128];
    const char *s;
    int t = get_global(L, "tls");
    if (t == LUA_TNIL)
        return check_tls_listeners(ld, L);
    if (t != LUA_TTABLE)
        return fail(ld, L, "tls", "tls: expected a list of certificate entries such as { { "
                    "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
                    "} }, got %s", lua_typename(L, t));
    int idx = lua_gettop(L);
    tc->line = line_of(ld, L, "tls");

    /* Entries at 1..n, the options by name. */
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TNUMBER)
            n++;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        int kt = lua_type(L, -1);
        if (kt == LUA_TSTRING && in_list(SERVER_TLS_KEYS, lua_tostring(L, -1)))
            continue;
        if (kt == LUA_TNUMBER) {
            double d = lua_tonumber(L, -1);
            if (d >= 1 && d <= (double)n && d == floor(d))
                continue;
        }
        key_text(L, -1, key, sizeof key);
        subpath(sub, sizeof sub, "tls", key);
        if (kt == LUA_TSTRING)
            return fail(ld, L, sub, "tls: unknown key '%s' (expected certificate entries and: "
                        "%s)", key, join(SERVER_TLS_KEYS, names, sizeof names));
        return fail(ld, L, sub, "tls: expected a list of certificate entries without holes "
                    "(found index %s)", key);
    }
    if (n == 0)
        return fail(ld, L, "tls", "tls: expected at least one certificate entry such as { "
                    "hosts = { \"example.com\" }, cert = \"example.crt\", key = \"example.key\" "
                    "}");
    tc->certs = um_calloc(n, sizeof *tc->certs);
    for (size_t i = 0; i < n; i++) {
        subpath_i(sub, sizeof sub, "tls", i + 1);
        lua_rawgeti(L, idx, (int)i + 1);
        tc->num_certs++; /* so that config_free frees what the entry got so far */
        if (!load_tls_cert(ld, L, lua_gettop(L), sub, i, &tc->certs[i]))
            return false;
        lua_pop(L, 1);
    }

    if (!load_tls_protocols(ld, L, idx) ||
        !load_tls_ciphers(ld, L, idx, "ciphers", false, &tc->ciphers) ||
        !load_tls_ciphers(ld, L, idx, "ciphersuites", true, &tc->ciphersuites))
        return false;

    if (get_field(L, idx, "default") != LUA_TNIL) {
        if (!get_string(ld, L, -1, "tls.default", "one of the hosts of the entries", &s))
            return false;
        char *host = um_strndup(s, strlen(s));
        lower(host);
        int owner = tls_host_owner(tc, tc->num_certs, host);
        free(host);
        if (owner < 0)
            return fail(ld, L, "tls.default", "tls.default: '%s' is not among the hosts of "
                        "the entries", s);
        tc->default_cert = (size_t)owner;
    }
    lua_pop(L, 1);
    return check_tls_listeners(ld, L);
}

static bool load_limits(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    uint64_t v;
    long long n;
    int t = get_global(L, "limits");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "limits", "limits: expected a table, got %s", lua_typename(L, t));
    int idx = lua_gettop(L);
    if (!check_keys(ld, L, idx, "limits", LIMIT_KEYS))
        return false;

    if ((t = get_field(L, idx, "max_connections")) != LUA_TNIL) {
        if (!get_integer(L, -1, 1, INT_MAX, &n))
            return fail(ld, L, "limits.max_connections",
                        "limits.max_connections: expected an integer from 1 to %d", INT_MAX);
        c->limits.max_connections = (size_t)n;
    }
    lua_pop(L, 1);
    if (get_field(L, idx, "max_header_bytes") != LUA_TNIL) {
        if (!get_size(ld, L, -1, "limits.max_header_bytes", 1, SIZE_MAX, &v))
            return false;
        c->limits.max_header_bytes = (size_t)v;
    }
    lua_pop(L, 1);
    if (get_field(L, idx, "max_request_line") != LUA_TNIL) {
        if (!get_size(ld, L, -1, "limits.max_request_line", 1, SIZE_MAX, &v))
            return false;
        c->limits.max_request_line = (size_t)v;
    }
    lua_pop(L, 1);
    if (get_field(L, idx, "max_body_bytes") != LUA_TNIL) {
        if (!get_size(ld, L, -1, "limits.max_body_bytes", 0, UINT64_MAX, &v))
            return false;
        c->limits.max_body_bytes = v;
    }
    lua_pop(L, 1);
    return true;
}

static bool load_timeouts(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    double *fields[] = {&c->timeouts.header, &c->timeouts.idle, &c->timeouts.send,
                        &c->timeouts.shutdown};
    char sub[PATH_LEN];
    int t = get_global(L, "timeouts");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "timeouts", "timeouts: expected a table, got %s",
                    lua_typename(L, t));
    int idx = lua_gettop(L);
    if (!check_keys(ld, L, idx, "timeouts", TIMEOUT_KEYS))
        return false;
    for (size_t i = 0; i < UM_NELEMS(fields); i++) {
        subpath(sub, sizeof sub, "timeouts", TIMEOUT_KEYS[i]);
        if (get_field(L, idx, TIMEOUT_KEYS[i]) != LUA_TNIL &&
            !get_seconds(ld, L, -1, sub, fields[i]))
            return false;
        lua_pop(L, 1);
    }
    return true;
}

static int cmp_mime(const void *a, const void *b)
{
    return strcmp(((const struct um_mime_type *)a)->ext, ((const struct um_mime_type *)b)->ext);
}

static bool load_mime(struct load *ld, lua_State *L)
{
    struct um_config *c = ld->c;
    char key[128], sub[PATH_LEN];
    const char *s;
    int t = get_global(L, "mime");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "mime", "mime: expected a table of extension = \"type\", got %s",
                    lua_typename(L, t));
    int idx = lua_gettop(L);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n++;
    }
    c->mime = um_calloc(n, sizeof *c->mime);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        key_text(L, -2, key, sizeof key);
        subpath(sub, sizeof sub, "mime", key);
        if (lua_type(L, -2) != LUA_TSTRING)
            return fail(ld, L, sub, "mime: expected extensions as keys, got [%s]", key);
        const char *ext = lua_tostring(L, -2);
        bool ok = ext[0] != '\0' && strlen(ext) < sizeof key;
        for (const char *p = ext; *p && ok; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' || *p == '+';
        if (!ok)
            return fail(ld, L, sub, "mime: bad extension '%s' (write it without the dot, "
                        "e.g. md = \"text/markdown\")", key);
        if (!get_string(ld, L, -1, sub, "a media type such as \"text/plain\"", &s))
            return false;
        for (const char *p = s; *p; p++)
            if ((unsigned char)*p < ' ' || *p == 0x7f)
                return fail(ld, L, sub, "%s: the media type contains a control character",
                            sub);
        if (strchr(s, '/') == NULL)
            return fail(ld, L, sub, "%s: bad media type '%s' (expected e.g. \"text/plain\")",
                        sub, s);
        struct um_mime_type *m = &c->mime[c->num_mime];
        m->ext = um_strndup(ext, strlen(ext));
        for (char *p = m->ext; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p + 32);
        m->type = um_strndup(s, strlen(s));
        for (size_t j = 0; j < c->num_mime; j++)
            if (strcmp(c->mime[j].ext, m->ext) == 0) {
                free(m->ext);
                free(m->type);
                return fail(ld, L, sub, "mime: extension '%s' is given twice", key);
            }
        c->num_mime++;
        lua_pop(L, 1);
    }
    qsort(c->mime, c->num_mime, sizeof *c->mime, cmp_mime);
    return true;
}

static bool load_log_level(struct load *ld, lua_State *L)
{
    static const int levels[] = {UM_LOG_ERR, UM_LOG_WARN, UM_LOG_INFO, UM_LOG_DEBUG};
    char names[64];
    int t = get_global(L, "log_level");
    if (t == LUA_TNIL)
        return true;
    if (t == LUA_TSTRING)
        for (size_t i = 0; LOG_LEVELS[i] != NULL; i++)
            if (strcmp(lua_tostring(L, -1), LOG_LEVELS[i]) == 0) {
                ld->c->log_level = levels[i];
                return true;
            }
    return fail(ld, L, "log_level", "log_level: expected one of: %s",
                join(LOG_LEVELS, names, sizeof names));
}

/* --- cache ------------------------------------------------------------------------------ */

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

/* Whether the first prefix bits of a and b (16 or 4 bytes) are equal. */
static bool prefix_equal(const unsigned char *a, const unsigned char *b, int prefix)
{
    size_t full = (size_t)prefix / 8;
    int rest = prefix % 8;
    if (memcmp(a, b, full) != 0)
        return false;
    if (rest == 0)
        return true;
    unsigned mask = (0xffu << (8 - rest)) & 0xffu;
    return (a[full] & mask) == (b[full] & mask);
}

bool um_netmask_match(const struct um_netmask *m, size_t n, const struct sockaddr *sa)
{
    unsigned char v4[4], v6[16];
    bool has_v4 = false;
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, sa, sizeof sin);
        memcpy(v4, &sin.sin_addr, 4);
        has_v4 = true;
        /* ::ffff:a.b.c.d, for the IPv6 entries */
        memset(v6, 0, 10);
        v6[10] = v6[11] = 0xff;
        memcpy(v6 + 12, v4, 4);
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, sa, sizeof sin6);
        memcpy(v6, &sin6.sin6_addr, 16);
        if (IN6_IS_ADDR_V4MAPPED(&sin6.sin6_addr)) {
            memcpy(v4, v6 + 12, 4);
            has_v4 = true;
        }
    } else {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (m[i].family == AF_INET && has_v4 && m[i].prefix >= 0 && m[i].prefix <= 32 &&
            prefix_equal(v4, m[i].addr, m[i].prefix))
            return true;
        if (m[i].family == AF_INET6 && m[i].prefix >= 0 && m[i].prefix <= 128 &&
            prefix_equal(v6, m[i].addr, m[i].prefix))
            return true;
    }
    return false;
}

#define NETMASK_HINT                                                                     \
    "expected an IPv4 or IPv6 address, or a network such as \"10.0.0.0/8\" or \"fd00::/8\""

/* Parses "ADDRESS" or "ADDRESS/PREFIX" (IPv4 or IPv6, without brackets), at path. */
static bool parse_netmask(struct load *ld, lua_State *L, const char *path, const char *text,
                          struct um_netmask *out)
{
    char host[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN];
    const char *slash = strchr(text, '/');
    size_t hl = slash != NULL ? (size_t)(slash - text) : strlen(text);
    memset(out, 0, sizeof *out);
    if (hl == 0 || hl >= sizeof host)
        return fail(ld, L, path, "%s: bad address '%s' (" NETMASK_HINT ")", path, text);
    memcpy(host, text, hl);
    host[hl] = '\0';
    bool v6 = strchr(host, ':') != NULL;
    int max = v6 ? 128 : 32;
    out->family = v6 ? AF_INET6 : AF_INET;
    if (inet_pton(out->family, host, out->addr) != 1)
        return fail(ld, L, path, "%s: bad %s address '%s' (" NETMASK_HINT ")", path,
                    v6 ? "IPv6" : "IPv4", text);
    out->prefix = max;
    if (slash != NULL) {
        const char *p = slash + 1;
        int prefix = 0;
        size_t digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
            prefix = prefix * 10 + (*p - '0');
        if (digits == 0 || *p != '\0' || prefix > max)
            return fail(ld, L, path, "%s: bad prefix length in '%s' (expected /0 to /%d)", path,
                        text, max);
        out->prefix = prefix;
    }
    /* "10.0.0.1/8" is almost certainly a typo for one address or for its network. */
    unsigned char masked[16] = {0};
    size_t full = (size_t)out->prefix / 8;
    memcpy(masked, out->addr, full);
    if (out->prefix % 8 != 0)
        masked[full] = (unsigned char)(out->addr[full] & (0xffu << (8 - out->prefix % 8)));
    if (memcmp(masked, out->addr, v6 ? 16 : 4) != 0) {
        if (inet_ntop(out->family, masked, net, sizeof net) == NULL)
            snprintf(net, sizeof net, "?");
        return fail(ld, L, path, "%s: '%s' has address bits set beyond the /%d prefix (the "
                    "network is %s/%d; for the one address, leave out the prefix)", path, text,
                    out->prefix, net, out->prefix);
    }
    return true;
}

/* purge = { allow = { "ADDRESS" or "NETWORK", ... } } of the cache table at idx. */
static bool load_cache_purge(struct load *ld, lua_State *L, int idx)
{
    struct um_cache_conf *cc = &ld->c->cache;
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = get_field(L, idx, "purge");
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    if (t != LUA_TTABLE)
        return fail(ld, L, "cache.purge", "cache.purge: expected a table such as { allow = { "
                    "\"127.0.0.1\", \"::1\" } }, got %s", lua_typename(L, t));
    int pidx = lua_gettop(L);
    if (!check_keys(ld, L, pidx, "cache.purge", PURGE_KEYS))
        return false;
    t = get_field(L, pidx, "allow");
    if (t == LUA_TNIL) {
        lua_pop(L, 2);
        return true;
    }
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return fail(ld, L, "cache.purge.allow", "cache.purge.allow: expected a list of "
                    "addresses or networks such as { \"127.0.0.1\", \"10.0.0.0/8\" }, got %s",
                    lua_typename(L, t));
    int aidx = lua_gettop(L);
    if (t == LUA_TTABLE && !check_list(ld, L, aidx, "cache.purge.allow", &n))
        return false;
    /* The defaults go: an empty list lets nobody purge. */
    free(cc->purge_allow);
    cc->purge_allow = NULL;
    cc->num_purge_allow = 0;
    if (n > 0)
        cc->purge_allow = um_calloc(n, sizeof *cc->purge_allow);
    for (size_t i = 0; i < n; i++) {
        if (t == LUA_TTABLE) {
            subpath_i(el, sizeof el, "cache.purge.allow", i + 1);
            lua_rawgeti(L, aidx, (int)i + 1);
        } else {
            snprintf(el, sizeof el, "cache.purge.allow");
            lua_pushvalue(L, aidx);
        }
        struct um_netmask *m = &cc->purge_allow[i];
        if (!get_string(ld, L, -1, el, "an address or a network such as \"10.0.0.0/8\"", &s) ||
            !parse_netmask(ld, L, el, s, m))
            return false;
        for (size_t j = 0; j < i; j++)
            if (cc->purge_allow[j].family == m->family &&
                cc->purge_allow[j].prefix == m->prefix &&
                memcmp(cc->purge_allow[j].addr, m->addr, sizeof m->addr) == 0)
                return fail(ld, L, el, "%s: '%s' is listed twice", el, s);
        cc->num_purge_allow++;
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return true;
}

/* A number of seconds from 0 to MAX_TIMEOUT (fractions allowed). */
static bool get_seconds0(struct load *ld, lua_State *L, int idx, const char *path, double *out)
{
    double d = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : NAN;
    if (!(d >= 0 && d <= MAX_TIMEOUT))
        return fail(ld, L, path, "%s: expected a number of seconds from 0 to %.0f", path,
                    MAX_TIMEOUT);
    *out = d;
    return true;
}

/* cache = { memory = SIZE, max_object = SIZE, clean_interval = S, default_ttl = S,
 * stale_if_error = S, purge = { allow = {...} } }; defaults for what is missing. */
static bool load_cache(struct load *ld, lua_State *L)
{
    struct um_cache_conf *cc = &ld->c->cache;
    char a[64], b[64];
    uint64_t v;
    cc->purge_allow = um_calloc(2, sizeof *cc->purge_allow);
    cc->num_purge_allow = 2;
    cc->purge_allow[0] = (struct um_netmask){.family = AF_INET, .addr = {127, 0, 0, 1},
                                             .prefix = 32};
    cc->purge_allow[1] = (struct um_netmask){.family = AF_INET6, .addr = {[15] = 1},
                                             .prefix = 128};
    int t = get_global(L, "cache");
    if (t == LUA_TNIL)
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "cache", "cache: expected a table such as { memory = \"256MB\" }, "
                    "got %s (routes turn caching off with cache = false)", lua_typename(L, t));
    int idx = lua_gettop(L);
    cc->line = line_of(ld, L, "cache");
    if (!check_keys(ld, L, idx, "cache", CACHE_KEYS))
        return false;

    if (get_field(L, idx, "memory") != LUA_TNIL) {
        if (!get_size(ld, L, -1, "cache.memory", 0, UINT64_MAX, &v))
            return false;
        if (v < CACHE_MIN_MEMORY)
            return fail(ld, L, "cache.memory", "cache.memory: %s is too small (at least 1MB)",
                        size_text(v, a, sizeof a));
        cc->memory = v;
    }
    lua_pop(L, 1);

    bool has_max_object = get_field(L, idx, "max_object") != LUA_TNIL;
    if (has_max_object) {
        if (!get_size(ld, L, -1, "cache.max_object", 0, UINT64_MAX, &v))
            return false;
        if (v == 0)
            return fail(ld, L, "cache.max_object", "cache.max_object: expected more than 0 "
                        "bytes");
        if (v > cc->memory)
            return fail(ld, L, "cache.max_object", "cache.max_object: %s is more than "
                        "cache.memory (%s)", size_text(v, a, sizeof a),
                        size_text(cc->memory, b, sizeof b));
        cc->max_object = v;
    } else if (cc->max_object > cc->memory) {
        cc->max_object = cc->memory; /* the default, in a smaller cache */
    }
    lua_pop(L, 1);

    if (get_field(L, idx, "clean_interval") != LUA_TNIL &&
        !get_seconds(ld, L, -1, "cache.clean_interval", &cc->clean_interval))
        return false;
    lua_pop(L, 1);
    if (get_field(L, idx, "default_ttl") != LUA_TNIL &&
        !get_seconds0(ld, L, -1, "cache.default_ttl", &cc->default_ttl))
        return false;
    lua_pop(L, 1);
    if (get_field(L, idx, "stale_if_error") != LUA_TNIL &&
        !get_seconds0(ld, L, -1, "cache.stale_if_error", &cc->stale_if_error))
        return false;
    lua_pop(L, 1);

    return load_cache_purge(ld, L, idx);
}

/* --- admin and access_log ---------------------------------------------------------------- */

/* The list of addresses or networks at idx (a string is a list of one), at path. */
static bool load_netmask_list(struct load *ld, lua_State *L, int idx, const char *path,
                              struct um_netmask **out, size_t *num)
{
    char el[PATH_LEN];
    const char *s;
    size_t n = 1;
    int t = lua_type(L, idx);
    if (t != LUA_TSTRING && t != LUA_TTABLE)
        return fail(ld, L, path, "%s: expected a list of addresses or networks such as "
                    "{ \"127.0.0.1\", \"10.0.0.0/8\" }, got %s", path, lua_typename(L, t));
    if (t == LUA_TTABLE && !check_list(ld, L, idx, path, &n))
        return false;
    free(*out);
    *out = n > 0 ? um_calloc(n, sizeof **out) : NULL;
    *num = 0;
    for (size_t i = 0; i < n; i++) {
        if (t == LUA_TTABLE) {
            subpath_i(el, sizeof el, path, i + 1);
            lua_rawgeti(L, idx, (int)i + 1);
        } else {
            snprintf(el, sizeof el, "%s", path);
            lua_pushvalue(L, idx);
        }
        struct um_netmask *m = &(*out)[i];
        if (!get_string(ld, L, -1, el, "an address or a network such as \"10.0.0.0/8\"", &s) ||
            !parse_netmask(ld, L, el, s, m))
            return false;
        (*num)++;
        lua_pop(L, 1);
    }
    return true;
}

/* admin = { listen = "HOST:PORT", allow = { ... } } */
static bool load_admin(struct load *ld, lua_State *L)
{
    struct um_admin_conf *ac = &ld->c->admin;
    const char *s;
    ac->allow = um_calloc(2, sizeof *ac->allow);
    ac->num_allow = 2;
    ac->allow[0] = (struct um_netmask){.family = AF_INET, .addr = {127, 0, 0, 1}, .prefix = 32};
    ac->allow[1] = (struct um_netmask){.family = AF_INET6, .addr = {[15] = 1}, .prefix = 128};
    int t = get_global(L, "admin");
    if (t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "admin", "admin: expected a table such as { listen = "
                    "\"127.0.0.1:9145\" }, got %s", lua_typename(L, t));
    int idx = lua_gettop(L);
    ac->line = line_of(ld, L, "admin");
    if (!check_keys(ld, L, idx, "admin", ADMIN_KEYS))
        return false;
    if (get_field(L, idx, "listen") == LUA_TNIL)
        return fail(ld, L, "admin", "admin: missing listen (e.g. listen = \"127.0.0.1:9145\")");
    if (!get_string(ld, L, -1, "admin.listen", "a \"HOST:PORT\" string", &s) ||
        !parse_listen(ld, L, "admin.listen", s, &ac->listen))
        return false;
    ac->enabled = true;
    lua_pop(L, 1);
    const struct sockaddr_storage *a = &ac->listen.addr;
    in_port_t port = a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                              : ((const struct sockaddr_in *)a)->sin_port;
    for (size_t i = 0; i < ld->c->num_listen && port != 0; i++)
        if (ld->c->listen[i].addrlen == ac->listen.addrlen &&
            memcmp(&ld->c->listen[i].addr, a, ac->listen.addrlen) == 0)
            return fail(ld, L, "admin.listen", "admin.listen: '%s' is also in listen",
                        ac->listen.text);
    if (get_field(L, idx, "allow") != LUA_TNIL &&
        !load_netmask_list(ld, L, lua_gettop(L), "admin.allow", &ac->allow, &ac->num_allow))
        return false;
    lua_pop(L, 1);
    return true;
}

/* access_log = { path = "FILE" or "stderr", format = "combined" or "json" }, or false. The
 * file's folder must exist; the file is opened (created) by the server. */
static bool load_access_log(struct load *ld, lua_State *L)
{
    struct um_access_log_conf *al = &ld->c->access_log;
    char names[64];
    const char *s;
    int t = get_global(L, "access_log");
    if (t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
        return true;
    if (t != LUA_TTABLE)
        return fail(ld, L, "access_log", "access_log: expected a table such as { path = "
                    "\"logs/access.log\", format = \"combined\" } or false, got %s",
                    lua_typename(L, t));
    int idx = lua_gettop(L);
    al->line = line_of(ld, L, "access_log");
    if (!check_keys(ld, L, idx, "access_log", ACCESS_LOG_KEYS))
        return false;
    if (get_field(L, idx, "path") == LUA_TNIL)
        return fail(ld, L, "access_log", "access_log: missing path (a file, or \"stderr\")");
    if (!get_string(ld, L, -1, "access_log.path", "a file name or \"stderr\"", &s))
        return false;
    if (strcmp(s, "stderr") != 0) {
        /* The folder must exist (the file need not): resolve it, keep the name. */
        const char *slash = strrchr(s, '/');
        const char *base = slash ? slash + 1 : s;
        if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
            return fail(ld, L, "access_log.path", "access_log.path: '%s' names a folder, "
                        "not a file", s);
        char *dir = NULL;
        char *folder = slash == NULL ? um_strndup(".", 1)
                       : slash == s  ? um_strndup("/", 1)
                                     : um_strndup(s, (size_t)(slash - s));
        bool ok = resolve_path(ld, L, "access_log.path", folder, true, &dir);
        free(folder);
        if (!ok)
            return false;
        size_t dl = strlen(dir), bl = strlen(base);
        al->path = um_malloc(dl + 1 + bl + 1);
        memcpy(al->path, dir, dl);
        al->path[dl] = '/';
        memcpy(al->path + dl + 1, base, bl + 1);
        free(dir);
    }
    lua_pop(L, 1);
    t = get_field(L, idx, "format");
    if (t != LUA_TNIL) {
        bool found = false;
        if (t == LUA_TSTRING)
            for (size_t i = 0; ACCESS_FORMATS[i] != NULL && !found; i++)
                if (strcmp(lua_tostring(L, -1), ACCESS_FORMATS[i]) == 0) {
                    al->format = (enum um_access_format)i;
                    found = true;
                }
        if (!found)
            return fail(ld, L, "access_log.format", "access_log.format: expected one of: %s",
                        join(ACCESS_FORMATS, names, sizeof names));
    }
    lua_pop(L, 1);
    al->enabled = true;
    return true;
}

/* Fails on the first (lowest line) global the file assigned that is neither a setting
 * nor a function (request hooks such as on_request are functions). */
static bool check_globals(struct load *ld, lua_State *L)
{
    char names[128];
    char *bad = NULL;
    int bad_line = INT_MAX;
    lua_pushlightuserdata(L, (void *)&GLOBAL_LINES_KEY);
    lua_rawget(L, LUA_REGISTRYINDEX);
    int idx = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int line = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING || in_list(SETTINGS, lua_tostring(L, -1)) ||
            in_list(HOOKS, lua_tostring(L, -1)) || in_list(YUNYING, lua_tostring(L, -1)))
            continue;
        lua_pushvalue(L, -1);
        lua_rawget(L, LUA_GLOBALSINDEX);
        int t = lua_type(L, -1);
        lua_pop(L, 1);
        if (t == LUA_TNIL || t == LUA_TFUNCTION)
            continue;
        const char *name = lua_tostring(L, -1);
        if (bad == NULL || line < bad_line || (line == bad_line && strcmp(name, bad) < 0)) {
            free(bad);
            bad = um_strndup(name, strlen(name));
            bad_line = line;
        }
    }
    lua_pop(L, 1);
    if (bad == NULL)
        return true;
    int line = line_of(ld, L, bad);
    char msg[512];
    snprintf(msg, sizeof msg, "unknown setting '%s' (settings are: %s; use local for helper "
             "variables)", bad, join(SETTINGS, names, sizeof names));
    free(bad);
    return fail_at(ld, line, "%s", msg);
}

/* on_request = function(req) ... end, on_response = function(req, res) ... end */
static bool load_hooks(struct load *ld, lua_State *L)
{
    for (const char *const *h = HOOKS; *h; h++) {
        int t = get_global(L, *h);
        if (t != LUA_TNIL && t != LUA_TFUNCTION)
            return fail(ld, L, *h, "%s: expected a function, got %s", *h, lua_typename(L, t));
        if (t == LUA_TFUNCTION)
            *(h == HOOKS ? &ld->c->lua.on_request : &ld->c->lua.on_response) = true;
        lua_pop(L, 1);
    }
    return true;
}

/* The first (lowest line) of the globals in names that the file set, or NULL. */
static const char *first_set(struct load *ld, lua_State *L, const char *const *names, int *line)
{
    const char *first = NULL;
    *line = INT_MAX;
    for (const char *const *n = names; *n; n++) {
        int t = get_global(L, *n);
        lua_pop(L, 1);
        if (t == LUA_TNIL)
            continue;
        int l = line_of(ld, L, *n);
        if (first == NULL || (l > 0 && l < *line)) {
            first = *n;
            *line = l > 0 ? l : INT_MAX;
        }
    }
    return first;
}

/* Sets global name to the value on top of the stack (raw: no line is recorded). */
static void set_global(lua_State *L, const char *name)
{
    lua_pushstring(L, name);
    lua_insert(L, -2);
    lua_rawset(L, LUA_GLOBALSINDEX);
}

/* A Yunying-style file: checks its settings and writes the Umbra settings that mean the
 * same (listen, workers, cache, upstreams, routes), which the other steps then read. */
static bool load_yunying(struct load *ld, lua_State *L)
{
    int yl, ul, hl;
    const char *yy = first_set(ld, L, YUNYING, &yl);
    if (yy == NULL)
        return true;
    const char *um = first_set(ld, L, SETTINGS, &ul);
    const char *hook = first_set(ld, L, HOOKS, &hl);
    if (um == NULL || (hook && hl < ul)) {
        um = hook;
        ul = hl;
    }
    if (um != NULL) {
        bool um_later = ul != INT_MAX && (yl == INT_MAX || ul > yl);
        int line = um_later ? ul : yl;
        return fail_at(ld, line == INT_MAX ? 0 : line, "'%s' is an Umbra setting and '%s' a Yunying one: "
                       "a config file uses one style or the other, not both",
                       um, yy);
    }
    struct um_config *c = ld->c;
    c->lua.yunying = true;
    long long n;
    char buf[PATH_LEN];

    int t = get_global(L, "port");
    n = 8080;
    if (t != LUA_TNIL && !get_integer(L, -1, 0, 65535, &n))
        return fail(ld, L, "port", "port: expected a port number from 0 to 65535");
    lua_pop(L, 1);
    snprintf(buf, sizeof buf, "*:%lld", n);
    lua_pushstring(L, buf);
    set_global(L, "listen");

    t = get_global(L, "working_thread_num");
    n = 4;
    if (t != LUA_TNIL && !get_integer(L, -1, 1, MAX_WORKERS, &n))
        return fail(ld, L, "working_thread_num", "working_thread_num: expected an integer from "
                    "1 to %d", MAX_WORKERS);
    lua_pop(L, 1);
    lua_pushinteger(L, (lua_Integer)n);
    set_global(L, "workers");

    lua_newtable(L);
    int cache = lua_gettop(L);
    t = get_global(L, "cache_size_bytes");
    n = 1 << 25;
    if (t != LUA_TNIL && !get_integer(L, -1, (double)CACHE_MIN_MEMORY, 9007199254740992.0, &n))
        return fail(ld, L, "cache_size_bytes", "cache_size_bytes: expected a number of bytes, "
                    "at least %llu", (unsigned long long)CACHE_MIN_MEMORY);
    lua_pop(L, 1);
    lua_pushnumber(L, (lua_Number)n);
    lua_setfield(L, cache, "memory");
    static const struct { const char *yy, *um; double def; } secs[] = {
        {"cache_default_max_age", "default_ttl", 300},
        {"cache_clean_interval", "clean_interval", 10},
    };
    for (size_t i = 0; i < UM_NELEMS(secs); i++) {
        double d = secs[i].def;
        if (get_global(L, secs[i].yy) != LUA_TNIL &&
            !(i == 0 ? get_seconds0 : get_seconds)(ld, L, -1, secs[i].yy, &d))
            return false;
        lua_pop(L, 1);
        lua_pushnumber(L, d);
        lua_setfield(L, cache, secs[i].um);
    }
    set_global(L, "cache");

    const char *origin = "static_file";
    if (get_global(L, "origin_type") != LUA_TNIL &&
        !get_string(ld, L, -1, "origin_type", "\"static_file\" or \"upstream\"", &origin))
        return false;
    bool upstream = strcmp(origin, "upstream") == 0;
    if (!upstream && strcmp(origin, "static_file") != 0)
        return fail(ld, L, "origin_type", "origin_type: expected \"static_file\" or "
                    "\"upstream\", got '%s'", origin);
    lua_pop(L, 1);
    lua_newtable(L); /* routes */
    lua_newtable(L); /* routes[1] */
    lua_pushliteral(L, "/");
    lua_setfield(L, -2, "path");
    if (!upstream) {
        const char *root = ".";
        if (get_global(L, "root_dir") != LUA_TNIL &&
            !get_string(ld, L, -1, "root_dir", "a directory", &root))
            return false;
        char *abs;
        if (!resolve_path(ld, L, "root_dir", root, true, &abs))
            return false;
        lua_pop(L, 1);
        lua_pushstring(L, abs);
        free(abs);
        lua_setfield(L, -2, "root");
        lua_rawseti(L, -2, 1);
        set_global(L, "routes");
        return true;
    }

    const char *proto = "http", *domain = NULL, *host = NULL;
    if (get_global(L, "upstream_protocol") != LUA_TNIL &&
        !get_string(ld, L, -1, "upstream_protocol", "\"http\" or \"https\"", &proto))
        return false;
    if (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0)
        return fail(ld, L, "upstream_protocol", "upstream_protocol: expected \"http\" or "
                    "\"https\", got '%s'", proto);
    const char *dname = get_global(L, "upstream_domain") != LUA_TNIL ? "upstream_domain"
                        : (lua_pop(L, 1), get_global(L, "upstream_ip")) != LUA_TNIL
                            ? "upstream_ip"
                            : NULL;
    if (dname == NULL)
        return fail_at(ld, line_of(ld, L, "origin_type"), "origin_type = \"upstream\" needs "
                       "upstream_domain, the name or address of the upstream server");
    if (!get_string(ld, L, -1, dname, "a host name or address", &domain))
        return false;
    if (!is_host_name(domain, strlen(domain)) && inet_pton(AF_INET, domain, buf) != 1)
        return fail(ld, L, dname, "%s: bad host name '%s'", dname, domain);
    n = strcmp(proto, "https") == 0 ? 443 : 80;
    if (get_global(L, "upstream_port") != LUA_TNIL && !get_integer(L, -1, 1, 65535, &n))
        return fail(ld, L, "upstream_port", "upstream_port: expected a port number from 1 to "
                    "65535");
    if (get_global(L, "upstream_host") != LUA_TNIL &&
        !get_string(ld, L, -1, "upstream_host", "a host name", &host))
        return false;
    int ft = get_global(L, "upstream_set");
    if (ft != LUA_TNIL && ft != LUA_TFUNCTION)
        return fail(ld, L, "upstream_set", "upstream_set: expected a function, got %s",
                    lua_typename(L, ft));
    c->lua.upstream_set = ft == LUA_TFUNCTION;
    c->lua.yy_protocol = um_strndup(proto, strlen(proto));
    c->lua.yy_domain = um_strndup(domain, strlen(domain));
    c->lua.yy_port = (int)n;

    lua_newtable(L); /* upstreams */
    lua_newtable(L); /* upstreams.yunying */
    lua_newtable(L);
    snprintf(buf, sizeof buf, "%s://%s:%lld", proto, domain, n);
    lua_pushstring(L, buf);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "servers");
    /* The Host sent: upstream_host, else the server's name (upstream_set may change it). */
    c->lua.yy_host = um_strndup(host ? host : domain, strlen(host ? host : domain));
    if (!c->lua.upstream_set) {
        lua_pushstring(L, c->lua.yy_host);
        lua_setfield(L, -2, "host");
    }
    lua_setfield(L, -2, "yunying");
    set_global(L, "upstreams");
    /* The stack: routes, routes[1], then the values read above. */
    lua_pushvalue(L, 2);
    lua_pushliteral(L, "yunying");
    lua_setfield(L, -2, "upstream");
    lua_rawseti(L, 1, 1);
    lua_settop(L, 1);
    set_global(L, "routes");
    return true;
}

/* Reads and validates the globals, under lua_cpcall. */
static int extract(lua_State *L)
{
    struct load *ld = lua_touserdata(L, 1);
    lua_settop(L, 0);
    static bool (*const steps[])(struct load *, lua_State *) = {
        check_globals,  load_yunying, load_hooks,    load_listen, load_tls,
        load_workers,   load_upstreams, load_routes, load_limits, load_timeouts,
        load_mime,      load_log_level, load_cache,  load_admin,  load_access_log,
    };
    for (size_t i = 0; i < UM_NELEMS(steps); i++) {
        if (!steps[i](ld, L))
            break;
        lua_settop(L, 0);
    }
    return 0;
}

/* __newindex of _G while the chunk runs: records where each global is first assigned. */
static int on_newindex(lua_State *L)
{
    lua_Debug ar;
    if (lua_type(L, 2) == LUA_TSTRING && lua_getstack(L, 1, &ar) &&
        lua_getinfo(L, "l", &ar) && ar.currentline > 0) {
        lua_pushvalue(L, 2);
        lua_pushinteger(L, ar.currentline);
        lua_rawset(L, lua_upvalueindex(1));
    }
    lua_settop(L, 3);
    lua_rawset(L, 1);
    return 0;
}

static void on_count(lua_State *L, lua_Debug *ar)
{
    /* From now on fire at every instruction, so that a script catching this error with
     * pcall cannot carry on. */
    lua_sethook(L, on_count, LUA_MASKCOUNT, 1);
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
        lua_pushfstring(L, "%s:%d: ", ar->short_src, ar->currentline);
    else
        lua_pushliteral(L, "");
    lua_pushfstring(L, "instruction budget of %d exceeded (endless loop?)", INSTRUCTION_BUDGET);
    lua_concat(L, 2);
    lua_error(L);
}

static char *read_file(const char *file, size_t *len, int *err)
{
    FILE *f = fopen(file, "rb");
    if (f == NULL) {
        *err = errno;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = um_malloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(buf);
                fclose(f);
                *err = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = um_realloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                *err = errno ? errno : EIO;
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* The directory of file, absolute when it can be resolved, so that messages about relative
 * roots show where they were looked for. */
static char *dir_of(const char *file)
{
    const char *slash = strrchr(file, '/');
    char *dir;
    if (slash == NULL)
        dir = um_strndup(".", 1);
    else if (slash == file)
        dir = um_strndup("/", 1);
    else
        dir = um_strndup(file, (size_t)(slash - file));
    char *real = realpath(dir, NULL);
    if (real == NULL)
        return dir;
    free(dir);
    return real;
}

static void config_free(struct um_config *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->num_listen; i++)
        free(c->listen[i].text);
    free(c->listen);
    for (size_t i = 0; i < c->num_routes; i++) {
        struct um_route *r = &c->routes[i];
        if (r->origin != NULL)
            r->origin->ops->destroy(r->origin);
        free(r->host);
        free(r->path);
        free(r->root);
        free(r->index);
        free(r->name);
    }
    free(c->routes);
    um_hooks_destroy_states(c);
    free(c->lua.source);
    free(c->lua.chunkname);
    free(c->lua.yy_protocol);
    free(c->lua.yy_domain);
    free(c->lua.yy_host);
    if (c->upstream_origins) {
        for (size_t i = 0; i < c->num_upstreams; i++)
            if (c->upstream_origins[i])
                c->upstream_origins[i]->ops->destroy(c->upstream_origins[i]);
        free(c->upstream_origins);
    }
    for (size_t i = 0; i < c->num_upstreams; i++) {
        struct um_upstream_conf *u = &c->upstreams[i];
        for (size_t j = 0; j < u->num_servers; j++)
            free(u->servers[j].url);
        free(u->servers);
        free(u->name);
        free(u->host);
        free(u->tls_ca);
    }
    free(c->upstreams);
    for (size_t i = 0; i < c->num_mime; i++) {
        free(c->mime[i].ext);
        free(c->mime[i].type);
    }
    free(c->mime);
    for (size_t i = 0; i < c->tls.num_certs; i++) {
        struct um_tls_cert_conf *cc = &c->tls.certs[i];
        for (size_t j = 0; j < cc->num_hosts; j++)
            free(cc->hosts[j]);
        free(cc->hosts);
        free(cc->cert);
        free(cc->key);
    }
    free(c->tls.certs);
    free(c->tls.ciphers);
    free(c->tls.ciphersuites);
    free(c->cache.purge_allow);
    free(c->admin.listen.text);
    free(c->admin.allow);
    free(c->access_log.path);
    free(c->file);
    free(c);
}

struct um_config *um_config_load(const char *file, char *err, size_t errlen)
{
    struct load ld;
    memset(&ld, 0, sizeof ld);
    ld.file = file;
    ld.err = err;
    ld.errlen = errlen;
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    lua_State *L = NULL;
    struct um_config *c = NULL;
    char *chunkname = NULL;
    lua_Debug ar;
    size_t fl = strlen(file);
    int e = 0;
    char *src = read_file(file, &ld.srclen, &e);
    if (src == NULL) {
        fail_at(&ld, 0, "cannot read the file: %s", strerror(e));
        goto out;
    }
    size_t folded_len;
    char *folded = um__lua_fold_shifts(src, ld.srclen, &folded_len);
    if (folded) {
        free(src);
        src = folded;
        ld.srclen = folded_len;
    }
    ld.src = src;
    ld.dir = dir_of(file);

    c = um_calloc(1, sizeof *c);
    ld.c = c;
    c->_refcnt = 1;
    c->file = um_strndup(file, strlen(file));
    c->limits.max_connections = 10000;
    c->limits.max_header_bytes = 16384;
    c->limits.max_body_bytes = 16u << 20;
    c->limits.max_request_line = 8192;
    c->timeouts.header = 10;
    c->timeouts.idle = 60;
    c->timeouts.send = 30;
    c->timeouts.shutdown = 10;
    c->log_level = UM_LOG_INFO;
    c->tls.protocols = UM_TLS_PROTO_TLS12 | UM_TLS_PROTO_TLS13;
    c->cache.memory = CACHE_DEFAULT_MEMORY;
    c->cache.max_object = CACHE_DEFAULT_MAX_OBJECT;
    c->cache.clean_interval = 10;

    L = luaL_newstate();
    if (L == NULL) {
        fail_at(&ld, 0, "cannot create a Lua state (out of memory)");
        goto out;
    }
    luaL_openlibs(L);
    /* Compiled traces do not run count hooks: keep everything in the interpreter. (After
     * luaL_openlibs, whose "jit" library turns the compiler on.) */
    luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);

    chunkname = um_malloc(fl + 2);
    chunkname[0] = '@';
    memcpy(chunkname + 1, file, fl + 1);

    /* Learn how LuaJIT abbreviates the chunk name in messages (long paths become
     * "...tail"), to put the full file name back in their place. */
    if (luaL_loadbuffer(L, "", 0, chunkname) == 0 && lua_getinfo(L, ">S", &ar))
        snprintf(ld.short_src, sizeof ld.short_src, "%s", ar.short_src);
    lua_settop(L, 0);

    /* _G's metatable records the line where each global is first assigned. */
    lua_newtable(L);
    lua_pushlightuserdata(L, (void *)&GLOBAL_LINES_KEY);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, on_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, LUA_GLOBALSINDEX);
    lua_settop(L, 0);

    if (luaL_loadbufferx(L, src, ld.srclen, chunkname, "t") != 0) {
        fail_lua(&ld, L);
        goto out;
    }
    lua_sethook(L, on_count, LUA_MASKCOUNT, INSTRUCTION_BUDGET);
    if (lua_pcall(L, 0, 0, 0) != 0) {
        fail_lua(&ld, L);
        goto out;
    }
    /* No finalizer of the script runs while the values are read. */
    lua_gc(L, LUA_GCSTOP, 0);
    if (lua_cpcall(L, extract, &ld) != 0 && !ld.failed)
        fail_lua(&ld, L);

out:
    if (L != NULL)
        lua_close(L);
    if (!ld.failed) {
        /* Each worker's request state runs the same text again. They are made by the
         * server (um_hooks_create_states), which knows how many workers run: a reload
         * keeps the running number, whatever the file says. */
        c->lua.source = src;
        c->lua.source_len = ld.srclen;
        c->lua.chunkname = chunkname;
        src = chunkname = NULL;
    }
    free(chunkname);
    free(src);
    free(ld.dir);
    um__lualines_dispose(&ld.lines);
    if (ld.failed) {
        config_free(ld.c);
        return NULL;
    }
    return ld.c;
}

void um_config_ref(struct um_config *c)
{
    int n = __atomic_add_fetch(&c->_refcnt, 1, __ATOMIC_RELAXED);
    UM_ASSERT(n > 1);
}

void um_config_unref(struct um_config *c)
{
    if (c == NULL)
        return;
    int n = __atomic_sub_fetch(&c->_refcnt, 1, __ATOMIC_ACQ_REL);
    UM_ASSERT(n >= 0);
    if (n == 0)
        config_free(c);
}

int um_config_upstream_index(const struct um_config *c, const char *name)
{
    for (size_t i = 0; i < c->num_upstreams; i++)
        if (strcmp(c->upstreams[i].name, name) == 0)
            return (int)i;
    return -1;
}

int um_config_route_index(const struct um_config *c, const char *name)
{
    for (size_t i = 0; i < c->num_routes; i++)
        if (c->routes[i].name && strcmp(c->routes[i].name, name) == 0)
            return (int)i;
    return -1;
}

void um_config_set_upstream_origin(struct um_config *c, size_t i, struct um_origin *origin)
{
    UM_ASSERT(i < c->num_upstreams);
    if (c->upstream_origins == NULL)
        c->upstream_origins = um_calloc(c->num_upstreams, sizeof(*c->upstream_origins));
    if (c->upstream_origins[i] != NULL && c->upstream_origins[i] != origin)
        c->upstream_origins[i]->ops->destroy(c->upstream_origins[i]);
    c->upstream_origins[i] = origin;
}

void um_config_set_origin(struct um_config *c, size_t i, struct um_origin *origin)
{
    UM_ASSERT(i < c->num_routes);
    struct um_route *r = &c->routes[i];
    if (r->origin != NULL && r->origin != origin)
        r->origin->ops->destroy(r->origin);
    r->origin = origin;
}
