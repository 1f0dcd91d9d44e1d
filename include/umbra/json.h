/* SPDX-License-Identifier: BSD-2-Clause */
/* A small pull reader for JSON (RFC 8259) request bodies: the caller walks the document it
 * expects (an object, its keys, their values) and the reader checks each step. Strings are
 * decoded in place (the text must be writable), so every um_str it returns is a slice of
 * the caller's buffer. No allocation; nesting is the caller's, as deep as it walks.
 *
 * The first failure sticks: every later call returns false, and error/at say what was
 * expected and at which byte, for an answer that names the problem. */
#ifndef UMBRA_JSON_H
#define UMBRA_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "umbra/common.h"

struct um_json {
    char *p, *start, *end;
    const char *error; /* NULL, or what was expected ("a string", "':'", ...) */
    size_t at;         /* the byte offset of the failure */
};

/* Reads s[0..n) (borrowed, written to by um_json_string). */
void um_json_init(struct um_json *j, char *s, size_t n);

/* The next value's first byte after white space ('{', '[', '"', 't', 'f', 'n', a digit or
 * '-'), or 0 at the end or after a failure. */
char um_json_peek(struct um_json *j);

/* Consumes open ('{' or '['). */
bool um_json_enter(struct um_json *j, char open);
/* Whether another member (object) or element (array) follows; *i counts them (start it at
 * 0 after um_json_enter). Consumes the ',' before it, or close (then returns false with no
 * error). */
bool um_json_more(struct um_json *j, char close, size_t *i);
/* A member's key and its ':'. */
bool um_json_key(struct um_json *j, um_str *key);
/* A string, decoded in place (\u escapes to UTF-8; \u0000 and lone surrogates refused). */
bool um_json_string(struct um_json *j, um_str *out);
/* true or false. */
bool um_json_bool(struct um_json *j, bool *out);
/* Skips one value of any kind (for members the caller ignores). */
bool um_json_skip(struct um_json *j);
/* Whether only white space is left (an error otherwise). */
bool um_json_done(struct um_json *j);

#endif
