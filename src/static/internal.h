/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the static floor share. For src/static/ only. */
#ifndef UMBRA_STATIC_INTERNAL_H
#define UMBRA_STATIC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "umbra/common.h"

struct um_context;

/* Files up to this size are kept in the worker's small-file cache (filecache.c). */
#define UM__STATIC_SMALL_FILE (32u << 10)

/* A small file kept by a worker: its bytes, the fields of its answer, and what its
 * validity is checked against. */
struct um__file {
    struct um__file *h_next, *older, *newer;
    uint64_t hash, gen;
    bool dir; /* asked for as a directory (its index) */
    char *key, *path; /* the path asked for; the one read (the index's, for a directory) */
    size_t key_len, path_len;
    struct stat st; /* of the file read: what each use compares with */
    char *body;
    /* Set by static.c once added. */
    const char *type;
    char etag[48];
    size_t etag_len;
    char last_modified[32];
};

/* The entry for (gen, dir, key) when the file it was read from is still the same, checked
 * with one fstatat from root_fd; else NULL (and a changed entry is dropped). */
const struct um__file *um__static_file_find(struct um_context *ctx, uint64_t gen, int root_fd,
                                           bool dir, const char *key, size_t key_len);

/* Reads the regular file fd (stat st, at path under the root) into a new entry for (gen,
 * dir, key); NULL when it is too big, cannot be read, or changed while read. */
struct um__file *um__static_file_add(struct um_context *ctx, uint64_t gen, bool dir,
                                     const char *key, size_t key_len, const char *path,
                                     size_t path_len, int fd, const struct stat *st);

#endif
