/* SPDX-License-Identifier: BSD-2-Clause */
/* The line finder; see lualines.h for what it promises.
 *
 * The lexer follows LuaJIT's (lj_lex.c) closely enough to stay in step with the real token
 * stream: a leading BOM and "#!" line are skipped, "\r\n", "\n\r", "\r" and "\n" each count
 * as one line, long brackets [==[ ]==] close only on the same level, and a backslash in a
 * short string escapes the next byte (including a newline). Every step of the lexer and of
 * the walk consumes at least one byte or one token, which is what guarantees termination. */
#include "lualines.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umbra/common.h"

/* Paths longer than this and tables nested deeper are not recorded (nor needed). */
#define PATH_MAX_LEN 256
#define MAX_TABLE_DEPTH 32
/* Blocks nested deeper than this are tracked by count only; nothing is recorded there. */
#define MAX_BLOCK_DEPTH 256

enum tok_type { T_EOF, T_NAME, T_STRING, T_NUMBER, T_PUNCT };

struct tok {
    enum tok_type type;
    const char *s; /* the token's text; for strings, the contents without delimiters */
    size_t len;
    int line;
};

struct lexer {
    const char *p, *end;
    int line;
};

struct parser {
    struct lexer lx;
    struct tok cur, next;
    unsigned long ntok; /* tokens consumed, to check progress */
    struct um__lualines *ll;
    char path[PATH_MAX_LEN];
};

static bool is_newline(char c)
{
    return c == '\n' || c == '\r';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* LuaJIT takes bytes >= 0x80 as identifier characters. */
static bool is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || is_digit(c) ||
           (unsigned char)c >= 0x80;
}

/* Consumes one line break ("\n", "\r", "\r\n" or "\n\r") at lx->p. */
static void newline(struct lexer *lx)
{
    char c = *lx->p++;
    if (lx->p < lx->end && is_newline(*lx->p) && *lx->p != c)
        lx->p++;
    if (lx->line < 0x7fffffff)
        lx->line++;
}

/* Returns the level of the long bracket opening at p ("[[" is 0, "[==[" is 2), or -1. */
static long long_level(const char *p, const char *end)
{
    if (p >= end || *p != '[')
        return -1;
    const char *q = p + 1;
    while (q < end && *q == '=')
        q++;
    return q < end && *q == '[' ? (long)(q - p - 1) : -1;
}

/* Skips the long bracket of the given level opening at lx->p; *s, *len get its contents.
 * An unclosed bracket runs to the end of the input. */
static void skip_long(struct lexer *lx, long level, const char **s, size_t *len)
{
    lx->p += level + 2;
    const char *start = lx->p;
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == ']') {
            const char *q = lx->p + 1;
            while (q < lx->end && *q == '=')
                q++;
            if (q < lx->end && *q == ']' && q - lx->p - 1 == level) {
                *s = start;
                *len = (size_t)(lx->p - start);
                lx->p = q + 1;
                return;
            }
            lx->p = q; /* q may be another ']', examined next round */
        } else if (is_newline(c)) {
            newline(lx);
        } else {
            lx->p++;
        }
    }
    *s = start;
    *len = (size_t)(lx->end - start);
}

/* Skips a short string opening at lx->p; an unfinished one ends at the line break. */
static void skip_short(struct lexer *lx, const char **s, size_t *len)
{
    char quote = *lx->p++;
    const char *start = lx->p;
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == quote) {
            *s = start;
            *len = (size_t)(lx->p - start);
            lx->p++;
            return;
        }
        if (c == '\\') {
            lx->p++;
            if (lx->p < lx->end) {
                if (is_newline(*lx->p))
                    newline(lx);
                else
                    lx->p++;
            }
            continue;
        }
        if (is_newline(c))
            break;
        lx->p++;
    }
    *s = start;
    *len = (size_t)(lx->p - start);
}

static struct tok lex(struct lexer *lx)
{
    struct tok t = {T_EOF, NULL, 0, 0};
    for (;;) {
        if (lx->p >= lx->end) {
            t.line = lx->line;
            t.s = lx->end;
            return t;
        }
        char c = *lx->p;
        if (is_newline(c)) {
            newline(lx);
        } else if (c == ' ' || c == '\t' || c == '\v' || c == '\f') {
            lx->p++;
        } else if (c == '-' && lx->p + 1 < lx->end && lx->p[1] == '-') {
            lx->p += 2;
            long level = long_level(lx->p, lx->end);
            if (level >= 0) {
                const char *s;
                size_t len;
                skip_long(lx, level, &s, &len);
            } else {
                while (lx->p < lx->end && !is_newline(*lx->p))
                    lx->p++;
            }
        } else {
            break;
        }
    }

    const char *start = lx->p;
    char c = *start;
    t.line = lx->line;
    t.s = start;
    long level = long_level(lx->p, lx->end);
    if (level >= 0) {
        t.type = T_STRING;
        skip_long(lx, level, &t.s, &t.len);
    } else if (c == '"' || c == '\'') {
        t.type = T_STRING;
        skip_short(lx, &t.s, &t.len);
    } else if (is_digit(c) || (c == '.' && lx->p + 1 < lx->end && is_digit(lx->p[1]))) {
        /* As lj_lex.c: identifier characters and dots, and a sign right after the exponent
         * letter (e for decimal, p for hex). */
        char xp = 'e';
        if (c == '0' && lx->p + 1 < lx->end && (lx->p[1] | 0x20) == 'x')
            xp = 'p';
        t.type = T_NUMBER;
        lx->p++;
        while (lx->p < lx->end) {
            char d = *lx->p;
            if (is_ident(d) || d == '.' || ((d == '+' || d == '-') && (lx->p[-1] | 0x20) == xp))
                lx->p++;
            else
                break;
        }
        t.len = (size_t)(lx->p - start);
    } else if (is_ident(c)) {
        t.type = T_NAME;
        while (lx->p < lx->end && is_ident(*lx->p))
            lx->p++;
        t.len = (size_t)(lx->p - start);
    } else {
        static const char *const ops[] = {"...", "..", "==", "~=", "<=", ">=", "::"};
        t.type = T_PUNCT;
        t.len = 1;
        size_t left = (size_t)(lx->end - lx->p);
        for (size_t i = 0; i < UM_NELEMS(ops); i++) {
            size_t n = strlen(ops[i]);
            if (n <= left && memcmp(lx->p, ops[i], n) == 0) {
                t.len = n;
                break;
            }
        }
        lx->p += t.len;
    }
    return t;
}

static bool tok_is(const struct tok *t, enum tok_type type, const char *text)
{
    size_t n = strlen(text);
    return t->type == type && t->len == n && memcmp(t->s, text, n) == 0;
}

static bool punct(const struct tok *t, const char *text)
{
    return tok_is(t, T_PUNCT, text);
}

static bool keyword(const struct tok *t, const char *text)
{
    return tok_is(t, T_NAME, text);
}

static bool is_keyword(const struct tok *t)
{
    static const char *const kw[] = {"and",   "break",    "do",     "else", "elseif", "end",
                                     "false", "for",      "function", "goto", "if",   "in",
                                     "local", "nil",      "not",    "or",   "repeat", "return",
                                     "then",  "true",     "until",  "while"};
    if (t->type != T_NAME)
        return false;
    for (size_t i = 0; i < UM_NELEMS(kw); i++)
        if (keyword(t, kw[i]))
            return true;
    return false;
}

/* Keywords that open a block closed by `end` (or `until`). `while` and `for` are covered
 * by their `do`. */
static bool opens_block(const struct tok *t)
{
    return keyword(t, "function") || keyword(t, "if") || keyword(t, "do") ||
           keyword(t, "repeat");
}

static bool closes_block(const struct tok *t)
{
    return keyword(t, "end") || keyword(t, "until");
}

static void advance(struct parser *ps)
{
    ps->cur = ps->next;
    ps->next = lex(&ps->lx);
    ps->ntok++;
}

static void add_entry(struct um__lualines *ll, const char *path, int line)
{
    if (ll->num == ll->cap) {
        ll->cap = ll->cap ? ll->cap * 2 : 32;
        ll->entries = um_realloc(ll->entries, ll->cap * sizeof *ll->entries);
    }
    ll->entries[ll->num].path = um_strndup(path, strlen(path));
    ll->entries[ll->num].line = line;
    ll->num++;
}

/* Forgets name and everything under it, before a new assignment to name is recorded. */
static void forget(struct um__lualines *ll, const char *name)
{
    size_t n = strlen(name), j = 0;
    for (size_t i = 0; i < ll->num; i++) {
        const char *p = ll->entries[i].path;
        if (strncmp(p, name, n) == 0 && (p[n] == '\0' || p[n] == '.')) {
            free(ll->entries[i].path);
            continue;
        }
        ll->entries[j++] = ll->entries[i];
    }
    ll->num = j;
}

/* Appends ".key" to ps->path; returns the new length, or 0 when it does not fit. */
static size_t push_key(struct parser *ps, size_t plen, const char *key, size_t keylen)
{
    if (plen + 1 + keylen >= sizeof ps->path)
        return 0;
    ps->path[plen] = '.';
    memcpy(ps->path + plen + 1, key, keylen);
    ps->path[plen + 1 + keylen] = '\0';
    return plen + 1 + keylen;
}

/* Skips one expression: stops before a ',' ';' or '}' that is not nested in brackets or
 * in a block (a function body inside a table may hold commas of its own). */
static void skip_expr(struct parser *ps)
{
    unsigned long nest = 0;
    for (;;) {
        const struct tok *t = &ps->cur;
        if (t->type == T_EOF)
            return;
        if (nest == 0 && (punct(t, ",") || punct(t, ";") || punct(t, "}")))
            return;
        if (punct(t, "(") || punct(t, "[") || punct(t, "{") || opens_block(t))
            nest++;
        else if ((punct(t, ")") || punct(t, "]") || punct(t, "}") || closes_block(t)) && nest > 0)
            nest--;
        advance(ps);
    }
}

/* Skips to the ']' closing the index expression of a `[expr] = v` field, and past it. */
static void skip_index(struct parser *ps)
{
    unsigned long nest = 0;
    for (;;) {
        const struct tok *t = &ps->cur;
        if (t->type == T_EOF)
            return;
        if (nest == 0 && (punct(t, "]") || punct(t, "}")))
            break;
        if (punct(t, "(") || punct(t, "[") || punct(t, "{") || opens_block(t))
            nest++;
        else if ((punct(t, ")") || punct(t, "]") || punct(t, "}") || closes_block(t)) && nest > 0)
            nest--;
        advance(ps);
    }
    if (punct(&ps->cur, "]"))
        advance(ps);
}

/* Walks the table constructor at ps->cur ('{'), whose path is ps->path[0..plen). */
static void walk_table(struct parser *ps, size_t plen, int depth)
{
    unsigned long index = 0;
    advance(ps); /* '{' */
    for (;;) {
        if (ps->cur.type == T_EOF)
            return;
        if (punct(&ps->cur, "}")) {
            advance(ps);
            return;
        }
        unsigned long before = ps->ntok;
        int line = ps->cur.line;
        size_t klen = 0; /* length of the field's path; 0: not recorded */
        if (ps->cur.type == T_NAME && !is_keyword(&ps->cur) && punct(&ps->next, "=")) {
            klen = push_key(ps, plen, ps->cur.s, ps->cur.len);
            advance(ps);
            advance(ps);
        } else if (punct(&ps->cur, "[")) {
            advance(ps);
            const struct tok *k = &ps->cur;
            if ((k->type == T_STRING || k->type == T_NUMBER) && punct(&ps->next, "]")) {
                const char *s = k->s;
                size_t n = k->len;
                if (k->type == T_NUMBER) {
                    /* [01] is [1]; other spellings of numbers are left alone. */
                    bool digits = n > 0;
                    for (size_t i = 0; i < n; i++)
                        digits = digits && is_digit(s[i]);
                    while (digits && n > 1 && s[0] == '0') {
                        s++;
                        n--;
                    }
                }
                if (memchr(s, '\\', n) == NULL && memchr(s, '\0', n) == NULL)
                    klen = push_key(ps, plen, s, n);
                advance(ps);
                advance(ps);
            } else {
                skip_index(ps);
            }
            if (punct(&ps->cur, "="))
                advance(ps);
        } else {
            char num[32];
            index++;
            int n = snprintf(num, sizeof num, "%lu", index);
            klen = push_key(ps, plen, num, (size_t)n);
        }
        if (klen > 0)
            add_entry(ps->ll, ps->path, line);
        if (klen > 0 && depth < MAX_TABLE_DEPTH && punct(&ps->cur, "{"))
            walk_table(ps, klen, depth + 1);
        ps->path[plen] = '\0';
        skip_expr(ps); /* the rest of the value, if it was more than a table */
        if (punct(&ps->cur, ",") || punct(&ps->cur, ";"))
            advance(ps);
        else if (ps->ntok == before && !punct(&ps->cur, "}"))
            advance(ps); /* stray token: never loop on it */
    }
}

void um__lualines_scan(struct um__lualines *ll, const char *src, size_t len)
{
    struct parser ps;
    memset(&ps, 0, sizeof ps);
    ps.ll = ll;
    ps.lx.p = src;
    ps.lx.end = src + len;
    ps.lx.line = 1;

    /* As lj_lex.c: a UTF-8 BOM, then a "#" first line (e.g. "#!/usr/bin/env umbra"). */
    if (len >= 3 && memcmp(src, "\xef\xbb\xbf", 3) == 0)
        ps.lx.p += 3;
    if (ps.lx.p < ps.lx.end && *ps.lx.p == '#')
        while (ps.lx.p < ps.lx.end && !is_newline(*ps.lx.p))
            ps.lx.p++;

    ps.cur = lex(&ps.lx);
    ps.next = lex(&ps.lx);

    /* The statement-level walk: brackets and blocks are tracked so that only assignments
     * outside any function body and outside any expression count. */
    bool is_function[MAX_BLOCK_DEPTH];
    size_t nblocks = 0, functions = 0;
    unsigned long overflow = 0, brackets = 0;
    struct tok prev = {T_EOF, NULL, 0, 0};
    while (ps.cur.type != T_EOF) {
        struct tok *t = &ps.cur;
        if (t->type == T_NAME && !is_keyword(t) && punct(&ps.next, "=") && brackets == 0 &&
            functions == 0 && overflow == 0 && !punct(&prev, ".") && !punct(&prev, ":") &&
            !punct(&prev, ",") && !keyword(&prev, "local") && !keyword(&prev, "for") &&
            t->len < sizeof ps.path) {
            memcpy(ps.path, t->s, t->len);
            ps.path[t->len] = '\0';
            forget(ll, ps.path);
            add_entry(ll, ps.path, t->line);
            size_t plen = t->len;
            advance(&ps);
            prev = ps.cur; /* '=' */
            advance(&ps);
            if (punct(&ps.cur, "{")) {
                walk_table(&ps, plen, 1);
                prev.type = T_PUNCT;
                prev.s = "}";
                prev.len = 1;
            }
            continue;
        }
        if (opens_block(t)) {
            if (nblocks < MAX_BLOCK_DEPTH) {
                is_function[nblocks] = keyword(t, "function");
                functions += is_function[nblocks];
                nblocks++;
            } else {
                overflow++;
            }
        } else if (closes_block(t)) {
            if (overflow > 0)
                overflow--;
            else if (nblocks > 0)
                functions -= is_function[--nblocks];
        } else if (punct(t, "(") || punct(t, "[") || punct(t, "{")) {
            brackets++;
        } else if ((punct(t, ")") || punct(t, "]") || punct(t, "}")) && brackets > 0) {
            brackets--;
        }
        prev = *t;
        advance(&ps);
    }
}

int um__lualines_find(const struct um__lualines *ll, const char *path)
{
    for (size_t i = ll->num; i-- > 0;)
        if (strcmp(ll->entries[i].path, path) == 0)
            return ll->entries[i].line;
    return 0;
}

void um__lualines_dispose(struct um__lualines *ll)
{
    for (size_t i = 0; i < ll->num; i++)
        free(ll->entries[i].path);
    free(ll->entries);
    memset(ll, 0, sizeof *ll);
}

/* Decimal integer literal -> value; false for anything else (hex, fractions, too big). */
static bool small_int(const struct tok *t, unsigned long long *v)
{
    if (t->type != T_NUMBER || t->len == 0 || t->len > 18)
        return false;
    *v = 0;
    for (size_t i = 0; i < t->len; i++) {
        if (!is_digit(t->s[i]))
            return false;
        *v = *v * 10 + (unsigned long long)(t->s[i] - '0');
    }
    return true;
}

/* True when t is an operator that binds tighter than Lua 5.3's shifts (concatenation,
 * arithmetic, the unary operators), so that "a OP 1 << 2" is not "a OP 4". */
static bool binds_tighter(const struct tok *t)
{
    static const char *const ops[] = {"..", "+", "-", "*", "/", "%", "^", "#", "~"};
    for (size_t i = 0; i < UM_NELEMS(ops); i++)
        if (punct(t, ops[i]))
            return true;
    return keyword(t, "not");
}

char *um__lua_fold_shifts(const char *src, size_t len, size_t *out_len)
{
    struct lexer lx = {src, src + len, 1};
    /* w[0] << w[3], with the tokens on either side: prev, and w[4]. */
    struct tok prev = {T_EOF, src, 0, 1};
    struct tok w[5] = {lex(&lx), lex(&lx), lex(&lx), lex(&lx), lex(&lx)};
    char *out = NULL;
    size_t n = 0, cap = 0, copied = 0; /* src[0..copied) is in out */
    while (w[0].type != T_EOF) {
        unsigned long long a, b;
        bool shl = punct(&w[1], "<") && punct(&w[2], "<");
        bool shr = punct(&w[1], ">") && punct(&w[2], ">");
        if ((shl || shr) && w[2].s == w[1].s + 1 && small_int(&w[0], &a) &&
            small_int(&w[3], &b) && w[0].line == w[3].line && b < 63 &&
            (shr || a <= (~0ull >> 1) >> b) && !binds_tighter(&prev) &&
            !binds_tighter(&w[4])) {
            if (out == NULL) {
                cap = len + 64;
                out = um_malloc(cap);
            }
            size_t head = (size_t)(w[0].s - src) - copied;
            if (n + head + 24 > cap) {
                cap = (n + head + 24) * 2;
                out = um_realloc(out, cap);
            }
            memcpy(out + n, src + copied, head);
            n += head;
            n += (size_t)snprintf(out + n, cap - n, "%llu", shl ? a << b : a >> b);
            copied = (size_t)(w[3].s + w[3].len - src);
            prev = w[3];
            w[0] = w[4];
            for (size_t i = 1; i < UM_NELEMS(w); i++)
                w[i] = lex(&lx);
            continue;
        }
        prev = w[0];
        memmove(w, w + 1, sizeof w - sizeof w[0]);
        w[UM_NELEMS(w) - 1] = lex(&lx);
    }
    if (out == NULL)
        return NULL;
    if (n + (len - copied) > cap)
        out = um_realloc(out, n + (len - copied));
    memcpy(out + n, src + copied, len - copied);
    *out_len = n + (len - copied);
    return out;
}
