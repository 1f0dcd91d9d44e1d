/* SPDX-License-Identifier: BSD-2-Clause */
/* The wire form of a purge (umbra/purge.h). */
#include "umbra/purge.h"

#include <string.h>

static bool has(um_str s, const char *bytes)
{
    for (size_t i = 0; i < s.len; i++)
        if (strchr(bytes, s.base[i]) != NULL && s.base[i] != '\0')
            return true;
    return false;
}

bool um_purge_encode(const struct um_purge *p, struct um_buf *out)
{
    /* A CR or LF would end the peer's field or the bus's line early; a space in a host or
     * a tag would move the fields after it. */
    if (p->kind == UM_PURGE_URL && has(p->key, "\r\n"))
        return false;
    if (p->kind == UM_PURGE_PREFIX && (has(p->host, "\r\n ") || has(p->prefix, "\r\n")))
        return false;
    if (p->kind == UM_PURGE_TAGS) {
        if (p->ntags == 0)
            return false;
        for (size_t i = 0; i < p->ntags; i++)
            if (p->tags[i].len == 0 || has(p->tags[i], "\r\n \t"))
                return false;
    }
    um_buf_append_str(out, p->soft ? "soft " : "hard ");
    switch (p->kind) {
    case UM_PURGE_URL:
        um_buf_append_str(out, "key ");
        um_buf_append(out, p->key.base, p->key.len);
        break;
    case UM_PURGE_PREFIX:
        um_buf_append_str(out, "prefix ");
        um_buf_append(out, p->host.base, p->host.len);
        um_buf_append(out, " ", 1);
        um_buf_append(out, p->prefix.base, p->prefix.len);
        break;
    case UM_PURGE_TAGS:
        um_buf_append_str(out, "tags");
        for (size_t i = 0; i < p->ntags; i++) {
            um_buf_append(out, " ", 1);
            um_buf_append(out, p->tags[i].base, p->tags[i].len);
        }
        break;
    }
    return true;
}

/* Takes the word of s up to the next space (or the end) off s. */
static um_str word(um_str *s)
{
    size_t i = 0;
    while (i < s->len && s->base[i] != ' ')
        i++;
    um_str w = {s->base, i};
    size_t skip = i < s->len ? i + 1 : i;
    s->base += skip;
    s->len -= skip;
    return w;
}

bool um_purge_decode(const char *s, size_t n, struct um_purge *p, um_str *tags, size_t max)
{
    memset(p, 0, sizeof(*p));
    um_str rest = {s, n};
    if (has(rest, "\r\n"))
        return false;
    um_str mode = word(&rest), kind = word(&rest);
    if (um_str_eq(mode, "soft"))
        p->soft = true;
    else if (!um_str_eq(mode, "hard"))
        return false;
    if (um_str_eq(kind, "key")) {
        p->kind = UM_PURGE_URL;
        p->key = rest;
        return rest.len > 0;
    }
    if (um_str_eq(kind, "prefix")) {
        /* "prefix HOST PREFIX": an empty host leaves two spaces. */
        const char *sp = memchr(rest.base, ' ', rest.len);
        if (sp == NULL)
            return false;
        p->kind = UM_PURGE_PREFIX;
        p->host = word(&rest);
        p->prefix = rest;
        return true;
    }
    if (um_str_eq(kind, "tags")) {
        p->kind = UM_PURGE_TAGS;
        p->tags = tags;
        while (rest.len > 0 && p->ntags < max) {
            um_str t = word(&rest);
            if (t.len > 0)
                tags[p->ntags++] = t;
        }
        return p->ntags > 0;
    }
    return false;
}
