/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the limits module share (store.c has the module's design note). */
#ifndef UMBRA_LIMITS_INTERNAL_H
#define UMBRA_LIMITS_INTERNAL_H

#include <stdint.h>

struct um_buf;
struct um_store;

enum { UM__STORE_LIMIT = 1, UM__STORE_SHARED = 2 };

/* A reference on the registry's store of this kind, name and settings, made when none
 * has them (main thread, while a configuration loads); released by the snapshot's
 * dispose with um__limits_store_unref, the last reference freeing the store. header is
 * NULL but for a limit keyed by a field. */
struct um_store *um__limits_store_ref(int kind, const char *name, uint64_t size, double rate,
                                      double burst, int key, const char *header);
void um__limits_store_unref(struct um_store *s);

/* The /metrics lines of every registered store of kind (any thread). */
void um__limits_render(struct um_buf *b, int kind);

#endif
