/* SPDX-License-Identifier: BSD-2-Clause */
/* The server (src/server/, the top floor): listening sockets, the listener thread, the
 * worker threads and their connections, reloads, the admin listener. Only main.c calls
 * in, from the main thread. */
#ifndef UMBRA_SERVER_H
#define UMBRA_SERVER_H

#include "umbra/config.h"

struct um_server;

/* Binds every listen address of config and builds what runs it (umbra/runtime.h: the
 * origins of its routes, the workers' request states; main thread, before any other
 * thread starts). Takes over the caller's reference to config.
 * Returns NULL with a message in err (the config is then released). */
struct um_server *um_server_create(struct um_config *config, char *err, size_t errlen);

/* Starts the listener and the workers and handles signals until SIGTERM/SIGINT (graceful:
 * stop accepting, finish requests in flight within timeouts.shutdown) or SIGQUIT
 * (immediate). Returns the process exit status. Call from the main thread. */
int um_server_run(struct um_server *s);

/* Frees a server whose run has returned. */
void um_server_destroy(struct um_server *s);

#endif
