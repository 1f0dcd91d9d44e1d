/* SPDX-License-Identifier: BSD-2-Clause */
/* Targeted cache-control fields (RFC 9213): CDN-Cache-Control and the like.
 *
 * A targeted field is a Structured Field Dictionary (RFC 8941 section 3.2) whose members
 * are Cache-Control response directives. A cache that honours a list of such fields uses
 * the first one (in the list's order) that is present, parses and is not empty, and then
 * ignores Cache-Control and Expires for its own decisions (RFC 9213 section 2.2); a field
 * that fails to parse is ignored as a whole, as if it were absent. What the cache sends
 * downstream is not changed: clients still get the origin's Cache-Control.
 *
 * The parser follows RFC 8941 section 4.2 strictly (lower-case keys, integers of at most
 * 15 digits, strings of printable ASCII with only \" and \\ escaped, and so on) and
 * allocates nothing: the field names of a qualified no-cache or private point into the
 * field's own bytes. Several lines of one field are parsed line by line, each as a
 * continuation of the dictionary, which gives what parsing the combined value gives. */
#include "umbra/cachepolicy.h"

#include <string.h>

#include "umbra/httpfield.h"

struct sf {
    const char *p, *end;
};

enum sf_type { SF_NONE, SF_INT, SF_DEC, SF_STR, SF_TOKEN, SF_BYTES, SF_BOOL, SF_LIST };

/* One member's value, as far as the directives need it. */
struct sf_val {
    enum sf_type type;
    int64_t i;      /* SF_INT */
    bool b;         /* SF_BOOL */
    um_str s;       /* SF_STR (raw, between the quotes; escapes left in) */
    bool escaped;   /* the string had a backslash */
    um_str list[UM_CC_MAX_FIELDS]; /* SF_LIST: its strings, when all items are strings */
    size_t nlist;
    bool list_ok; /* every item of the inner list was a plain string and they fit */
};

static bool is_lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool is_alpha(char c)
{
    return is_lcalpha(c) || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_tchar(char c)
{
    return is_alpha(c) || is_digit(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void skip_sp(struct sf *s)
{
    while (s->p < s->end && *s->p == ' ')
        s->p++;
}

static void skip_ows(struct sf *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t'))
        s->p++;
}

/* key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ) */
static bool parse_key(struct sf *s, um_str *key)
{
    const char *b = s->p;
    if (s->p >= s->end || !(is_lcalpha(*s->p) || *s->p == '*'))
        return false;
    s->p++;
    while (s->p < s->end && (is_lcalpha(*s->p) || is_digit(*s->p) || *s->p == '_' ||
                             *s->p == '-' || *s->p == '.' || *s->p == '*'))
        s->p++;
    *key = (um_str){b, (size_t)(s->p - b)};
    return true;
}

static bool parse_number(struct sf *s, struct sf_val *v)
{
    bool neg = false;
    if (*s->p == '-') {
        neg = true;
        s->p++;
    }
    if (s->p >= s->end || !is_digit(*s->p))
        return false;
    int64_t r = 0;
    size_t digits = 0, frac = 0;
    bool dec = false;
    while (s->p < s->end) {
        char c = *s->p;
        if (is_digit(c)) {
            if (dec)
                frac++;
            else
                r = r * 10 + (c - '0');
            digits++;
        } else if (c == '.' && !dec) {
            if (digits > 12)
                return false;
            dec = true;
        } else {
            break;
        }
        if ((!dec && digits > 15) || (dec && digits > 15))
            return false;
        s->p++;
    }
    if (dec) {
        if (frac == 0 || frac > 3)
            return false;
        v->type = SF_DEC;
        return true;
    }
    v->type = SF_INT;
    v->i = neg ? -r : r;
    return true;
}

static bool parse_string(struct sf *s, struct sf_val *v)
{
    s->p++; /* the opening quote */
    const char *b = s->p;
    v->escaped = false;
    while (s->p < s->end) {
        char c = *s->p++;
        if (c == '\\') {
            if (s->p >= s->end || (*s->p != '"' && *s->p != '\\'))
                return false;
            v->escaped = true;
            s->p++;
        } else if (c == '"') {
            v->type = SF_STR;
            v->s = (um_str){b, (size_t)(s->p - 1 - b)};
            return true;
        } else if ((unsigned char)c < 0x20 || (unsigned char)c > 0x7e) {
            return false;
        }
    }
    return false; /* no closing quote */
}

static bool parse_bare_item(struct sf *s, struct sf_val *v)
{
    if (s->p >= s->end)
        return false;
    char c = *s->p;
    if (c == '-' || is_digit(c))
        return parse_number(s, v);
    if (c == '"')
        return parse_string(s, v);
    if (c == '*' || is_alpha(c)) {
        s->p++;
        while (s->p < s->end && (is_tchar(*s->p) || *s->p == ':' || *s->p == '/'))
            s->p++;
        v->type = SF_TOKEN;
        return true;
    }
    if (c == ':') {
        s->p++;
        while (s->p < s->end && *s->p != ':') {
            char d = *s->p++;
            if (!(is_alpha(d) || is_digit(d) || d == '+' || d == '/' || d == '='))
                return false;
        }
        if (s->p >= s->end)
            return false;
        s->p++;
        v->type = SF_BYTES;
        return true;
    }
    if (c == '?') {
        s->p++;
        if (s->p >= s->end || (*s->p != '0' && *s->p != '1'))
            return false;
        v->type = SF_BOOL;
        v->b = *s->p++ == '1';
        return true;
    }
    return false;
}

/* *( ";" *SP key [ "=" bare-item ] ): parsed for syntax, ignored (RFC 9213 2.1). */
static bool parse_params(struct sf *s)
{
    while (s->p < s->end && *s->p == ';') {
        s->p++;
        skip_sp(s);
        um_str k;
        if (!parse_key(s, &k))
            return false;
        if (s->p < s->end && *s->p == '=') {
            s->p++;
            struct sf_val pv;
            if (!parse_bare_item(s, &pv))
                return false;
        }
    }
    return true;
}

static bool parse_inner_list(struct sf *s, struct sf_val *v)
{
    s->p++; /* "(" */
    v->type = SF_LIST;
    v->nlist = 0;
    v->list_ok = true;
    for (;;) {
        skip_sp(s);
        if (s->p >= s->end)
            return false;
        if (*s->p == ')') {
            s->p++;
            return parse_params(s);
        }
        struct sf_val item;
        if (!parse_bare_item(s, &item) || !parse_params(s))
            return false;
        if (item.type == SF_STR && !item.escaped && v->nlist < UM_CC_MAX_FIELDS)
            v->list[v->nlist++] = item.s;
        else
            v->list_ok = false;
        if (s->p < s->end && *s->p != ' ' && *s->p != ')')
            return false;
    }
}

/* A qualified no-cache / private: the field names of a string ("a, b") or of an inner list
 * of strings. False when they are not clean field names (the caller then applies the
 * unqualified directive, the more restrictive reading). */
static bool field_names(const struct sf_val *v, um_str *names, size_t *n)
{
    size_t k = 0;
    if (v->type == SF_LIST) {
        if (!v->list_ok || v->nlist == 0)
            return false;
        for (size_t i = 0; i < v->nlist; i++) {
            if (!um_http_is_token(v->list[i]))
                return false;
            names[k++] = v->list[i];
        }
        *n = k;
        return true;
    }
    if (v->type != SF_STR || v->escaped)
        return false;
    const char *p = v->s.base, *end = v->s.base + v->s.len;
    while (p < end) {
        const char *b = p;
        while (p < end && *p != ',')
            p++;
        um_str f = um_str_trim((um_str){b, (size_t)(p - b)});
        if (p < end)
            p++;
        if (f.len == 0)
            continue;
        if (!um_http_is_token(f) || k == UM_CC_MAX_FIELDS)
            return false;
        names[k++] = f;
    }
    if (k == 0)
        return false;
    *n = k;
    return true;
}

/* Sets one directive in cc; a later member of the same name replaces an earlier one
 * (RFC 8941 3.2). A value of the wrong type makes the directive count as absent. */
static void apply(struct um_cc *cc, um_str key, const struct sf_val *v)
{
    bool yes = v->type == SF_BOOL && v->b;
    bool nonneg_int = v->type == SF_INT && v->i >= 0;
    int64_t n = nonneg_int ? (v->i > UM_DELTA_MAX ? UM_DELTA_MAX : v->i) : -1;
#define FLAG(lit, field)                                                                           \
    if (um_str_eq(key, lit)) {                                                                     \
        cc->field = yes;                                                                           \
        return;                                                                                    \
    }
#define DELTA(lit, field)                                                                          \
    if (um_str_eq(key, lit)) {                                                                     \
        cc->field = n;                                                                             \
        return;                                                                                    \
    }
    FLAG("no-store", no_store)
    FLAG("public", public_)
    FLAG("must-revalidate", must_revalidate)
    FLAG("proxy-revalidate", proxy_revalidate)
    FLAG("must-understand", must_understand)
    FLAG("no-transform", no_transform)
    FLAG("immutable", immutable)
    DELTA("max-age", max_age)
    DELTA("s-maxage", s_maxage)
    DELTA("stale-while-revalidate", stale_while_revalidate)
    DELTA("stale-if-error", stale_if_error)
#undef FLAG
#undef DELTA
    if (um_str_eq(key, "no-cache")) {
        cc->no_cache = yes;
        cc->no_cache_nfields = 0;
        if (!yes && v->type != SF_BOOL &&
            !field_names(v, cc->no_cache_fields, &cc->no_cache_nfields))
            cc->no_cache = true;
    } else if (um_str_eq(key, "private")) {
        cc->private_ = yes;
        cc->private_nfields = 0;
        if (!yes && v->type != SF_BOOL &&
            !field_names(v, cc->private_fields, &cc->private_nfields))
            cc->private_ = true;
    }
    /* Other members are extensions Umbra does not implement: ignored. */
}

/* Parses one field line into cc. False on any syntax error. *members counts the members. */
static bool parse_line(struct um_cc *cc, um_str value, size_t *members)
{
    struct sf s = {value.base, value.base + value.len};
    skip_sp(&s);
    while (s.p < s.end) {
        um_str key;
        struct sf_val v;
        memset(&v, 0, sizeof(v));
        if (!parse_key(&s, &key))
            return false;
        if (s.p < s.end && *s.p == '=') {
            s.p++;
            if (s.p < s.end && *s.p == '(') {
                if (!parse_inner_list(&s, &v))
                    return false;
            } else if (!parse_bare_item(&s, &v) || !parse_params(&s)) {
                return false;
            }
        } else {
            v.type = SF_BOOL;
            v.b = true;
            if (!parse_params(&s))
                return false;
        }
        apply(cc, key, &v);
        (*members)++;
        skip_ows(&s);
        if (s.p >= s.end)
            return true;
        if (*s.p != ',')
            return false;
        s.p++;
        skip_ows(&s);
        if (s.p >= s.end)
            return false; /* a trailing comma */
    }
    return true;
}

bool um_cc_parse_targeted(struct um_cc *cc, const struct um_header *h, size_t n, um_str name)
{
    um_cc_init(cc);
    size_t members = 0;
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        if (!um_str_ieq(h[i].name, name))
            continue;
        seen = true;
        if (!parse_line(cc, um_str_trim(h[i].value), &members)) {
            um_cc_init(cc);
            return false;
        }
    }
    if (!seen || members == 0) {
        um_cc_init(cc);
        return false;
    }
    cc->present = true;
    return true;
}

bool um_resp_meta_target(struct um_resp_meta *m, const struct um_cache_policy *pol)
{
    for (size_t i = 0; i < pol->num_targeted; i++) {
        struct um_cc cc;
        if (um_cc_parse_targeted(&cc, m->headers, m->num_headers, pol->targeted[i])) {
            m->cc = cc;
            m->has_expires = false;
            m->expires_valid = false;
            m->expires = 0;
            m->targeted = pol->targeted[i];
            return true;
        }
    }
    return false;
}
