/* SPDX-License-Identifier: BSD-2-Clause */
/* The pid file (pid = "FILE"), for tools that signal Umbra however it was started
 * (logrotate's USR1 without systemd).
 *
 * Who holds the file is told by a lock, not by the number in it: the running Umbra keeps
 * the file open with an exclusive flock(2) for its whole life. A second Umbra's lock fails
 * at once, and it refuses to start, naming the file and the PID it holds. A file nobody
 * locks is stale (a crash, a kill -9, a PID since reused by another program): it is taken
 * over. A PID check (kill(pid, 0)) could not tell a reused PID from a live Umbra.
 *
 * The file is locked at start, as root when started as root, before any listener is bound
 * (two servers with SO_REUSEPORT would otherwise share the ports); the PID is written once
 * the server is started, so that a signal sent on its strength finds the signal handling
 * in place. The descriptor outlives the switch to the user (privileges.c): the writes go
 * through it. At exit the file is removed before the lock goes; when the user may not
 * remove it (a folder only root writes: the package uses /run/umbra, which systemd gives
 * to the umbra user), it is emptied instead, and the next start takes it over. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "umbra/log.h"

/* The PID in fd's file, or 0 when it holds none. */
static long read_pid(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

/* Opens and locks path once; -1 with err written, or -2 when the locked file is no longer
 * the one at path (its holder removed it between our open and our lock: try again). */
static int lock_once(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "pid: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        long pid = read_pid(fd);
        close(fd);
        if (e != EWOULDBLOCK)
            snprintf(err, errlen, "pid: cannot lock %s: %s", path, strerror(e));
        else if (pid > 0)
            snprintf(err, errlen, "pid: %s is held by a running Umbra, PID %ld: stop it "
                     "first, or give this one another pid file", path, pid);
        else
            snprintf(err, errlen, "pid: %s is held by a running Umbra that is still "
                     "starting: stop it first, or give this one another pid file", path);
        return -1;
    }
    struct stat a, b;
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
        close(fd);
        return -2;
    }
    return fd;
}

int um__pidfile_lock(const char *path, char *err, size_t errlen)
{
    int fd = -2;
    for (int tries = 0; fd == -2 && tries < 5; tries++)
        fd = lock_once(path, err, errlen);
    if (fd == -2)
        snprintf(err, errlen, "pid: %s keeps being replaced while Umbra locks it", path);
    if (fd < 0)
        return -1;
    long stale = read_pid(fd);
    if (stale > 0)
        um_log_info("pid: %s held PID %ld, which no running Umbra holds: taking it over",
                    path, stale);
    /* Empty until the server is started (um__pidfile_write). */
    if (ftruncate(fd, 0) != 0) {
        snprintf(err, errlen, "pid: cannot write %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

bool um__pidfile_write(int fd, const char *path)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
        um_log_err("pid: cannot write %s: %s", path, strerror(errno));
        return false;
    }
    return true;
}

void um__pidfile_release(int fd, const char *path)
{
    if (fd < 0)
        return;
    /* Removed while still locked, so that a server starting now never sees a file we
     * are about to remove. */
    if (unlink(path) != 0) {
        um_log_debug("pid: cannot remove %s (%s): emptied instead", path, strerror(errno));
        if (ftruncate(fd, 0) != 0)
            um_log_warn("pid: cannot empty %s: %s", path, strerror(errno));
    }
    close(fd);
}
