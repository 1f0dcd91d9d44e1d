/* SPDX-License-Identifier: BSD-2-Clause */
/* The content codings Umbra can apply: compress's (umbra/compress.h negotiates among them
 * and encodes), in a header of their own because the config, a floor below compress,
 * reads their names and levels. Types only. */
#ifndef UMBRA_CODING_H
#define UMBRA_CODING_H

enum um_coding { UM_CODING_IDENTITY = 0, UM_CODING_GZIP = 1, UM_CODING_BR = 2, UM_CODING_ZSTD = 3 };
#define UM_CODING_COUNT 4

#endif
