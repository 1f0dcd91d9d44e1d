/* SPDX-License-Identifier: BSD-2-Clause */
/* One purge, whichever way it came: a PURGE request (cache/origin.c), POST /purge on the
 * admin listener (server/admin_purge.c), a peer of the ring (cluster/) or the Redis bus
 * (l2/bus.c). Each builds a struct um_purge, applies it to its cache
 * (um_cache_purge_apply, umbra/cache.h) and hands it to the one hook that carries it to
 * the other nodes (um_context.on_purge, umbra/context.h).
 *
 * The wire form, the same for a peer (signed inside its Umbra-Peer field) and the bus
 * (after the publishing node's id and a newline), is one line of text:
 *
 *   soft|hard key KEY               one cache key ("host target", spaces and all)
 *   soft|hard prefix HOST PREFIX    every key of HOST (empty: every host) whose target
 *                                   starts with PREFIX
 *   soft|hard tags T1 T2 ...        every object tagged with any of the tags
 *
 * The last field runs to the end, so a key or a prefix may hold spaces; neither a host
 * nor a tag does (the parsers refuse them), and nothing holds CR or LF. Both ends must be
 * this version: before it the bus sent "NODE\nKIND\nSOFT\nHOST\nVALUE" (refused now,
 * logged nowhere: the older node's purges do not reach this one). */
#ifndef UMBRA_PURGE_H
#define UMBRA_PURGE_H

#include <stdbool.h>
#include <stddef.h>

#include "umbra/buf.h"
#include "umbra/common.h"

#define UM_PURGE_MAX_TAGS 256 /* tags in one purge; more are ignored */

enum um_purge_kind { UM_PURGE_URL, UM_PURGE_PREFIX, UM_PURGE_TAGS };

/* Everything is borrowed: the slices live as long as whoever built the purge says. */
struct um_purge {
    enum um_purge_kind kind;
    bool soft;          /* mark stale instead of dropping */
    um_str key;         /* URL: the cache key */
    um_str host;        /* PREFIX: the host in lower case (empty: every host) */
    um_str prefix;      /* PREFIX: the target prefix, without the '*' */
    const um_str *tags; /* TAGS: tags[0..ntags) */
    size_t ntags;
};

/* Appends p's wire form to out. Returns false (out unchanged) when p cannot be carried:
 * a CR or LF anywhere, a space in the host or a tag, no tags. */
bool um_purge_encode(const struct um_purge *p, struct um_buf *out);

/* Parses the wire form s[0..n) into *p, its slices pointing into s and its tags into
 * tags[0..max) (more are ignored). Returns false when s is not a purge. */
bool um_purge_decode(const char *s, size_t n, struct um_purge *p, um_str *tags, size_t max);

#endif
