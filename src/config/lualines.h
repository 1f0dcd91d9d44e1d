/* SPDX-License-Identifier: BSD-2-Clause */
/* The line finder: where, in a Lua config file, each table field was written.
 *
 * Lua keeps no source positions for table constructors, so when a setting deep inside
 * `routes = { ... }` is wrong, the VM cannot say which line it came from. This module
 * tokenizes the file (comments, short and long strings, numbers, names, punctuation) and
 * walks the top-level assignments `name = { ... }`, recording for every field of every
 * nested table constructor its dotted path and line:
 *
 *     routes = {                          -- "routes"          line 1
 *       { path = "/", root = "www" },     -- "routes.1"        line 2
 *     }                                   -- "routes.1.path"   line 2 ...
 *
 * Named keys (`key = v`, `["key"] = v`, `[3] = v`) use the key; positional elements count
 * 1, 2, 3 ... as Lua does. Assignments inside function bodies and `local` ones are ignored.
 * It is a heuristic, not a parser: it never fails, never loops and never reads outside the
 * buffer, whatever the input, and a path it could not place is simply not found. */
#ifndef UMBRA_CONFIG_LUALINES_H
#define UMBRA_CONFIG_LUALINES_H

#include <stddef.h>

struct um__lualines_entry {
    char *path; /* owned */
    int line;   /* >= 1 */
};

struct um__lualines {
    struct um__lualines_entry *entries;
    size_t num, cap;
};

/* Scans len bytes of Lua source at src (need not be NUL-terminated) and adds what it finds
 * to ll, which must be zeroed or previously scanned. */
void um__lualines_scan(struct um__lualines *ll, const char *src, size_t len);

/* Returns the line of the field at path (e.g. "routes.2.root"), or 0 when unknown. When a
 * top-level name was assigned several times, the last assignment wins, as it does in Lua. */
int um__lualines_find(const struct um__lualines *ll, const char *path);

/* Lua 5.3's integer shifts of two decimal literals on one line ("1 << 25", as Yunying's
 * sample config writes its cache size), which LuaJIT cannot parse, folded into their value;
 * lines are kept. A shift beside an operator that binds tighter (arithmetic,
 * concatenation, a unary operator: "1 << 2 + 1" is 1 << 3) stays as written, and LuaJIT
 * rejects it. Returns a new buffer (its length in *out_len), or NULL when there is
 * nothing to fold. */
char *um__lua_fold_shifts(const char *src, size_t len, size_t *out_len);

/* Frees what ll holds and zeroes it. */
void um__lualines_dispose(struct um__lualines *ll);

#endif
