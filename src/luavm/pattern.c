/* SPDX-License-Identifier: BSD-2-Clause */
/* Lua patterns with their work counted against the instruction budget (pattern.h).
 *
 * LuaJIT matches patterns in C, where no count hook fires, by backtracking: a pattern like
 * ".-.-.-x" over a few kilobytes runs for hours, and a hook that did it held its worker for
 * good, budget or not. The request states' string.find, match, gmatch and gsub are these
 * instead: the same language (Lua 5.1's patterns, as the reference manual describes them,
 * with LuaJIT's behaviour at the edges) and the same backtracking, but every step of the
 * matcher is counted and charged to the budget of the call, so that a costly match ends
 * in the budget's error like a loop does. Captures and recursion are bounded as in LuaJIT
 * (32 captures, 200 nested pattern items: "pattern too complex"). */
#include "pattern.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#define MAX_CAPTURES 32
#define MAX_DEPTH 200
#define CHARGE_EVERY 256 /* steps counted locally between two charges */

#define CAP_UNFINISHED (-1)
#define CAP_POSITION (-2)

struct mstate {
    const char *src, *src_end, *pat_end;
    lua_State *L;
    unsigned steps, depth;
    int level;
    struct {
        const char *init;
        ptrdiff_t len;
    } capture[MAX_CAPTURES];
};

static void step(struct mstate *ms)
{
    if (++ms->steps >= CHARGE_EVERY) {
        ms->steps = 0;
        um__lua_sandbox_charge(ms->L, CHARGE_EVERY / UM_LUA_PATTERN_STEPS_PER_INSTRUCTION);
    }
}

/* The end of the single-character class at p. */
static const char *class_end(struct mstate *ms, const char *p)
{
    char c = *p++;
    if (c == '%') {
        if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (ends with '%%')");
        return p + 1;
    }
    if (c == '[') {
        if (p < ms->pat_end && *p == '^') p++;
        do { /* a ']' right after '[' or '[^' is a member */
            if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (missing ']')");
            c = *p++;
            if (c == '%') {
                if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (missing ']')");
                p++;
            }
        } while (p >= ms->pat_end || *p != ']');
        return p + 1;
    }
    return p;
}

static int match_class(int c, int cl)
{
    int r;
    switch (tolower(cl)) {
    case 'a':
        r = isalpha(c);
        break;
    case 'c':
        r = iscntrl(c);
        break;
    case 'd':
        r = isdigit(c);
        break;
    case 'l':
        r = islower(c);
        break;
    case 'p':
        r = ispunct(c);
        break;
    case 's':
        r = isspace(c);
        break;
    case 'u':
        r = isupper(c);
        break;
    case 'w':
        r = isalnum(c);
        break;
    case 'x':
        r = isxdigit(c);
        break;
    case 'z':
        r = (c == 0);
        break;
    default:
        return cl == c;
    }
    if (isupper(cl)) r = !r;
    return r != 0;
}

/* c in the set from p ('[') to ec (its ']'). */
static int match_bracket(int c, const char *p, const char *ec)
{
    int want = 1;
    if (*(p + 1) == '^') {
        want = 0;
        p++;
    }
    while (++p < ec) {
        if (*p == '%') {
            p++;
            if (match_class(c, (unsigned char)*p)) return want;
        } else if (*(p + 1) == '-' && p + 2 < ec) {
            if ((unsigned char)*p <= c && c <= (unsigned char)*(p + 2)) return want;
            p += 2;
        } else if ((unsigned char)*p == c) {
            return want;
        }
    }
    return !want;
}

static int single_match(int c, const char *p, const char *ep)
{
    switch (*p) {
    case '.':
        return 1;
    case '%':
        return match_class(c, (unsigned char)*(p + 1));
    case '[':
        return match_bracket(c, p, ep - 1);
    default:
        return (unsigned char)*p == c;
    }
}

static const char *do_match(struct mstate *ms, const char *s, const char *p);

static const char *match_balance(struct mstate *ms, const char *s, const char *p)
{
    if (p + 1 >= ms->pat_end) luaL_error(ms->L, "unbalanced pattern");
    if (s >= ms->src_end || *s != *p) return NULL;
    int b = *p, e = *(p + 1), cont = 1;
    while (++s < ms->src_end) {
        step(ms);
        if (*s == e) {
            if (--cont == 0) return s + 1;
        } else if (*s == b) {
            cont++;
        }
    }
    return NULL;
}

static const char *max_expand(struct mstate *ms, const char *s, const char *p, const char *ep)
{
    ptrdiff_t i = 0;
    while (s + i < ms->src_end && single_match((unsigned char)s[i], p, ep)) {
        step(ms);
        i++;
    }
    for (; i >= 0; i--) {
        const char *r = do_match(ms, s + i, ep + 1);
        if (r) return r;
    }
    return NULL;
}

static const char *min_expand(struct mstate *ms, const char *s, const char *p, const char *ep)
{
    for (;;) {
        const char *r = do_match(ms, s, ep + 1);
        if (r) return r;
        if (s < ms->src_end && single_match((unsigned char)*s, p, ep))
            s++;
        else
            return NULL;
    }
}

static const char *start_capture(struct mstate *ms, const char *s, const char *p, ptrdiff_t what)
{
    if (ms->level >= MAX_CAPTURES) luaL_error(ms->L, "too many captures");
    ms->capture[ms->level].init = s;
    ms->capture[ms->level].len = what;
    ms->level++;
    const char *r = do_match(ms, s, p);
    if (r == NULL) ms->level--;
    return r;
}

static const char *end_capture(struct mstate *ms, const char *s, const char *p)
{
    int l = -1;
    for (int i = ms->level - 1; i >= 0; i--)
        if (ms->capture[i].len == CAP_UNFINISHED) {
            l = i;
            break;
        }
    if (l < 0) luaL_error(ms->L, "invalid pattern capture");
    ms->capture[l].len = s - ms->capture[l].init;
    const char *r = do_match(ms, s, p + 1);
    if (r == NULL) ms->capture[l].len = CAP_UNFINISHED;
    return r;
}

static int check_capture(struct mstate *ms, int c)
{
    c -= '1';
    if (c < 0 || c >= ms->level || ms->capture[c].len == CAP_UNFINISHED)
        luaL_error(ms->L, "invalid capture index");
    return c;
}

static const char *match_capture(struct mstate *ms, const char *s, int c)
{
    int l = check_capture(ms, c);
    size_t len = (size_t)ms->capture[l].len;
    if ((size_t)(ms->src_end - s) >= len && memcmp(ms->capture[l].init, s, len) == 0)
        return s + len;
    return NULL;
}

static const char *do_match(struct mstate *ms, const char *s, const char *p)
{
    if (++ms->depth > MAX_DEPTH) luaL_error(ms->L, "pattern too complex");
    for (;;) {
        step(ms);
        if (p >= ms->pat_end) break;
        switch (*p) {
        case '(':
            s = p + 1 < ms->pat_end && *(p + 1) == ')'
                    ? start_capture(ms, s, p + 2, CAP_POSITION)
                    : start_capture(ms, s, p + 1, CAP_UNFINISHED);
            goto out;
        case ')':
            s = end_capture(ms, s, p);
            goto out;
        case '$':
            if (p + 1 == ms->pat_end) {
                if (s != ms->src_end) s = NULL;
                goto out;
            }
            goto dflt;
        case '%':
            if (p + 1 < ms->pat_end && *(p + 1) == 'b') {
                s = match_balance(ms, s, p + 2);
                if (s == NULL) goto out;
                p += 4;
                continue;
            }
            if (p + 1 < ms->pat_end && *(p + 1) == 'f') {
                p += 2;
                if (p >= ms->pat_end || *p != '[')
                    luaL_error(ms->L, "missing '[' after '%%f' in pattern");
                const char *ep = class_end(ms, p);
                int prev = s == ms->src ? 0 : (unsigned char)*(s - 1);
                int cur = s < ms->src_end ? (unsigned char)*s : 0;
                if (!match_bracket(prev, p, ep - 1) && match_bracket(cur, p, ep - 1)) {
                    p = ep;
                    continue;
                }
                s = NULL;
                goto out;
            }
            if (p + 1 < ms->pat_end && isdigit((unsigned char)*(p + 1))) {
                s = match_capture(ms, s, (unsigned char)*(p + 1));
                if (s == NULL) goto out;
                p += 2;
                continue;
            }
            goto dflt;
        default:
        dflt : {
            const char *ep = class_end(ms, p);
            int m = s < ms->src_end && single_match((unsigned char)*s, p, ep);
            char q = ep < ms->pat_end ? *ep : '\0';
            if (q == '?') {
                const char *r;
                if (m && (r = do_match(ms, s + 1, ep + 1)) != NULL) {
                    s = r;
                    goto out;
                }
                p = ep + 1;
                continue;
            }
            if (q == '*') {
                s = max_expand(ms, s, p, ep);
                goto out;
            }
            if (q == '+') {
                s = m ? max_expand(ms, s + 1, p, ep) : NULL;
                goto out;
            }
            if (q == '-') {
                s = min_expand(ms, s, p, ep);
                goto out;
            }
            if (!m) {
                s = NULL;
                goto out;
            }
            s++;
            p = ep;
            continue;
        }
        }
    }
out:
    ms->depth--;
    return s;
}

/* ---------------------------------------------------------------- captures */

static void push_onecapture(struct mstate *ms, int i, const char *s, const char *e)
{
    if (i >= ms->level) {
        if (i != 0) luaL_error(ms->L, "invalid capture index");
        lua_pushlstring(ms->L, s, (size_t)(e - s)); /* the whole match */
        return;
    }
    ptrdiff_t l = ms->capture[i].len;
    if (l == CAP_UNFINISHED) luaL_error(ms->L, "unfinished capture");
    if (l == CAP_POSITION)
        lua_pushinteger(ms->L, ms->capture[i].init - ms->src + 1);
    else
        lua_pushlstring(ms->L, ms->capture[i].init, (size_t)l);
}

static int push_captures(struct mstate *ms, const char *s, const char *e)
{
    int n = (ms->level == 0 && s) ? 1 : ms->level;
    luaL_checkstack(ms->L, n, "too many captures");
    for (int i = 0; i < n; i++)
        push_onecapture(ms, i, s, e);
    return n;
}

static void ms_init(struct mstate *ms, lua_State *L, const char *s, size_t ls, const char *p,
                    size_t lp)
{
    ms->L = L;
    ms->src = s;
    ms->src_end = s + ls;
    ms->pat_end = p + strnlen(p, lp); /* LuaJIT's patterns end at a NUL */
    ms->steps = 0;
    ms->depth = 0;
    ms->level = 0;
}

static void ms_done(struct mstate *ms)
{
    um__lua_sandbox_charge(ms->L, ms->steps / UM_LUA_PATTERN_STEPS_PER_INSTRUCTION);
    ms->steps = 0;
}

/* ---------------------------------------------------------------- the functions */

static ptrdiff_t posrelat(ptrdiff_t pos, size_t len)
{
    return pos >= 0 ? pos : (ptrdiff_t)len + pos + 1;
}

static int no_specials(const char *p, size_t lp)
{
    for (size_t i = 0; i < lp; i++)
        if (strchr("^$*+?.([%-", p[i]) != NULL && p[i] != '\0') return 0;
    return 1;
}

static const char *find_plain(const char *s, size_t ls, const char *p, size_t lp)
{
    if (lp == 0) return s;
    if (lp > ls) return NULL;
    return memmem(s, ls, p, lp);
}

static int find_aux(lua_State *L, int find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls);
    const char *p = luaL_checklstring(L, 2, &lp);
    ptrdiff_t init = posrelat(luaL_optinteger(L, 3, 1), ls) - 1;
    if (init < 0)
        init = 0;
    else if ((size_t)init > ls)
        init = (ptrdiff_t)ls;
    if (find && (lua_toboolean(L, 4) || no_specials(p, lp))) {
        const char *f = find_plain(s + init, ls - (size_t)init, p, lp);
        if (f) {
            lua_pushinteger(L, f - s + 1);
            lua_pushinteger(L, (f - s) + (ptrdiff_t)lp);
            return 2;
        }
        lua_pushnil(L);
        return 1;
    }
    struct mstate ms;
    int anchor = lp > 0 && *p == '^';
    if (anchor) {
        p++;
        lp--;
    }
    ms_init(&ms, L, s, ls, p, lp);
    const char *s1 = s + init;
    do {
        ms.level = 0;
        ms.depth = 0;
        const char *e = do_match(&ms, s1, p);
        if (e != NULL) {
            ms_done(&ms);
            if (find) {
                lua_pushinteger(L, s1 - s + 1);
                lua_pushinteger(L, e - s);
                return push_captures(&ms, NULL, NULL) + 2;
            }
            return push_captures(&ms, s1, e);
        }
    } while (s1++ < ms.src_end && !anchor);
    ms_done(&ms);
    lua_pushnil(L);
    return 1;
}

static int str_find(lua_State *L)
{
    return find_aux(L, 1);
}

static int str_match(lua_State *L)
{
    return find_aux(L, 0);
}

/* gmatch's iterator: upvalues subject, pattern, next position. */
static int gmatch_next(lua_State *L)
{
    size_t ls, lp;
    const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
    const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
    struct mstate ms;
    ms_init(&ms, L, s, ls, p, lp);
    for (const char *src = s + lua_tointeger(L, lua_upvalueindex(3)); src <= ms.src_end; src++) {
        ms.level = 0;
        ms.depth = 0;
        const char *e = do_match(&ms, src, p);
        if (e != NULL) {
            ptrdiff_t next = e - s;
            if (e == src) next++; /* an empty match: go on one further */
            lua_pushinteger(L, next);
            lua_replace(L, lua_upvalueindex(3));
            ms_done(&ms);
            return push_captures(&ms, src, e);
        }
    }
    ms_done(&ms);
    return 0;
}

static int str_gmatch(lua_State *L)
{
    luaL_checkstring(L, 1);
    luaL_checkstring(L, 2);
    lua_settop(L, 2);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, gmatch_next, 3);
    return 1;
}

static void add_s(struct mstate *ms, luaL_Buffer *b, const char *s, const char *e)
{
    size_t l;
    const char *news = lua_tolstring(ms->L, 3, &l);
    for (size_t i = 0; i < l; i++) {
        if (news[i] != '%') {
            luaL_addchar(b, news[i]);
            continue;
        }
        i++;
        if (i >= l || !isdigit((unsigned char)news[i])) {
            if (i < l) luaL_addchar(b, news[i]);
            continue;
        }
        if (news[i] == '0') {
            luaL_addlstring(b, s, (size_t)(e - s));
        } else {
            push_onecapture(ms, news[i] - '1', s, e);
            luaL_addvalue(b);
        }
    }
}

static void add_value(struct mstate *ms, luaL_Buffer *b, const char *s, const char *e)
{
    lua_State *L = ms->L;
    switch (lua_type(L, 3)) {
    case LUA_TNUMBER:
    case LUA_TSTRING:
        add_s(ms, b, s, e);
        return;
    case LUA_TFUNCTION: {
        lua_pushvalue(L, 3);
        int n = push_captures(ms, s, e);
        lua_call(L, n, 1);
        break;
    }
    case LUA_TTABLE:
        push_onecapture(ms, 0, s, e);
        lua_gettable(L, 3);
        break;
    default:
        break;
    }
    if (!lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        lua_pushlstring(L, s, (size_t)(e - s)); /* keep the original text */
    } else if (!lua_isstring(L, -1)) {
        luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    }
    luaL_addvalue(b);
}

static int str_gsub(lua_State *L)
{
    size_t srcl, lp;
    const char *src = luaL_checklstring(L, 1, &srcl);
    const char *p = luaL_checklstring(L, 2, &lp);
    int tr = lua_type(L, 3);
    lua_Integer max_s = luaL_optinteger(L, 4, (lua_Integer)srcl + 1);
    luaL_argcheck(L,
                  tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE,
                  3, "string/function/table expected");
    int anchor = lp > 0 && *p == '^';
    if (anchor) {
        p++;
        lp--;
    }
    struct mstate ms;
    ms_init(&ms, L, src, srcl, p, lp);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_Integer n = 0;
    while (n < max_s) {
        ms.level = 0;
        ms.depth = 0;
        const char *e = do_match(&ms, src, p);
        if (e != NULL) {
            n++;
            add_value(&ms, &b, src, e);
        }
        if (e != NULL && e > src) {
            src = e;
        } else if (src < ms.src_end) {
            step(&ms);
            luaL_addchar(&b, *src++);
        } else {
            break;
        }
        if (anchor) break;
    }
    luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
    ms_done(&ms);
    luaL_pushresult(&b);
    lua_pushinteger(L, n);
    return 2;
}

void um__luapattern_open(lua_State *L)
{
    static const luaL_Reg fns[] = {{"find", str_find},
                                   {"match", str_match},
                                   {"gmatch", str_gmatch},
                                   {"gsub", str_gsub},
                                   {NULL, NULL}};
    lua_getfield(L, LUA_GLOBALSINDEX, LUA_STRLIBNAME);
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushcfunction(L, f->func);
        lua_setfield(L, -2, f->name);
    }
    lua_pop(L, 1);
}
