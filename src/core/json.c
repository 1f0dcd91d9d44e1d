/* SPDX-License-Identifier: BSD-2-Clause */
/* The JSON pull reader (umbra/json.h). */
#include "umbra/json.h"

#include <string.h>

void um_json_init(struct um_json *j, char *s, size_t n)
{
    j->p = j->start = s;
    j->end = s + n;
    j->error = NULL;
    j->at = 0;
}

static bool fail(struct um_json *j, const char *expected)
{
    if (j->error == NULL) {
        j->error = expected;
        j->at = (size_t)(j->p - j->start);
    }
    return false;
}

static void ws(struct um_json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

char um_json_peek(struct um_json *j)
{
    if (j->error)
        return 0;
    ws(j);
    return j->p < j->end ? *j->p : 0;
}

static bool expect(struct um_json *j, char c, const char *what)
{
    if (um_json_peek(j) != c)
        return fail(j, what);
    j->p++;
    return true;
}

bool um_json_enter(struct um_json *j, char open)
{
    return expect(j, open, open == '{' ? "'{'" : "'['");
}

bool um_json_more(struct um_json *j, char close, size_t *i)
{
    char c = um_json_peek(j);
    if (j->error)
        return false;
    if (c == close) {
        j->p++;
        return false;
    }
    if (*i > 0 && !expect(j, ',', close == '}' ? "',' or '}'" : "',' or ']'"))
        return false;
    (*i)++;
    return true;
}

bool um_json_key(struct um_json *j, um_str *key)
{
    return um_json_string(j, key) && expect(j, ':', "':'");
}

static int hex4(const char *s)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                     : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                            : -1;
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Reads the four hex digits after "\u" (and a second escape for a surrogate pair) into
 * *cp; j->p is past them. */
static bool unicode(struct um_json *j, unsigned *cp)
{
    int v = j->end - j->p >= 4 ? hex4(j->p) : -1;
    if (v <= 0 || (v >= 0xDC00 && v <= 0xDFFF))
        return fail(j, "a \\u escape of a character (not 0000, nor a lone surrogate)");
    j->p += 4;
    *cp = (unsigned)v;
    if (v >= 0xD800 && v <= 0xDBFF) {
        int lo = j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' ? hex4(j->p + 2) : -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail(j, "the low surrogate of a \\u pair");
        j->p += 6;
        *cp = 0x10000 + (((unsigned)v - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
    }
    return true;
}

static char *put_utf8(char *w, unsigned cp)
{
    if (cp < 0x80) {
        *w++ = (char)cp;
    } else if (cp < 0x800) {
        *w++ = (char)(0xC0 | (cp >> 6));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | (cp >> 12));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (char)(0xF0 | (cp >> 18));
        *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    }
    return w;
}

bool um_json_string(struct um_json *j, um_str *out)
{
    if (!expect(j, '"', "a string"))
        return false;
    /* The decoded text is never longer than the escaped one: it is written over it. */
    char *w = j->p, *b = w;
    while (j->p < j->end) {
        char c = *j->p;
        if (c == '"') {
            j->p++;
            *out = (um_str){b, (size_t)(w - b)};
            return true;
        }
        if ((unsigned char)c < 0x20)
            return fail(j, "no control character inside a string");
        j->p++;
        if (c != '\\') {
            *w++ = c;
            continue;
        }
        char e = j->p < j->end ? *j->p++ : 0;
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        unsigned cp;
        if (k != NULL)
            *w++ = to[k - from];
        else if (e == 'u' && unicode(j, &cp))
            w = put_utf8(w, cp);
        else
            return fail(j, "a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
    return fail(j, "the string's closing '\"'");
}

bool um_json_bool(struct um_json *j, bool *out)
{
    um_json_peek(j);
    if (j->error == NULL && j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
        j->p += 4;
        *out = true;
        return true;
    }
    if (j->error == NULL && j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
        j->p += 5;
        *out = false;
        return true;
    }
    return fail(j, "true or false");
}

bool um_json_skip(struct um_json *j)
{
    char c = um_json_peek(j);
    size_t i = 0;
    um_str s;
    bool b;
    if (c == '"')
        return um_json_string(j, &s);
    if (c == 't' || c == 'f')
        return um_json_bool(j, &b);
    if (c == 'n' && j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
        j->p += 4;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        j->p++;
        while (j->p < j->end && strchr("0123456789.eE+-", *j->p) && *j->p)
            j->p++;
        return true;
    }
    if (c == '[' || c == '{') {
        um_json_enter(j, c);
        char close = c == '[' ? ']' : '}';
        while (um_json_more(j, close, &i))
            if ((close == '}' && !um_json_key(j, &s)) || !um_json_skip(j))
                return false;
        return j->error == NULL;
    }
    return fail(j, "a value");
}

bool um_json_done(struct um_json *j)
{
    if (j->error)
        return false;
    ws(j);
    return j->p == j->end || fail(j, "the end of the document");
}
