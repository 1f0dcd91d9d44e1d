/* SPDX-License-Identifier: BSD-2-Clause */
/* sd_notify without libsystemd: a datagram to the AF_UNIX socket named by $NOTIFY_SOCKET
 * (a path, or "@name" for the abstract namespace), as systemd's Type=notify expects. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"

void um__notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || (path[0] != '/' && path[0] != '@'))
        return;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    char msg[256];
    int n;
    if (strcmp(state, "RELOADING=1") == 0) {
        /* systemd 253+ wants the time of the reload request with it. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        n = snprintf(msg, sizeof(msg), "%s\nMONOTONIC_USEC=%llu", state,
                     (unsigned long long)ts.tv_sec * 1000000ull +
                         (unsigned long long)ts.tv_nsec / 1000);
    } else if (strcmp(state, "READY=1") == 0) {
        n = snprintf(msg, sizeof(msg), "%s\nMAINPID=%ld", state, (long)getpid());
    } else {
        n = snprintf(msg, sizeof(msg), "%s", state);
    }
    if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0)
        um_log_warn("sd_notify: %s: %m", path);
    close(fd);
}
