#!/usr/bin/env python3
"""The backend connections a proxy uses during one h2up round (bench/h2up.sh).

    h2up_conns.py BACKEND_PORT PROXY_PID SECONDS INTERVAL READY

Samples, every INTERVAL seconds for SECONDS (or until SIGTERM), the TCP connections
that the proxy PROXY_PID has established to 127.0.0.1:BACKEND_PORT: the sockets of
/proc/net/tcp (what ss reads too) whose peer is that port and whose inode is one of the
proxy's descriptors (another proxy's connections to the same backend are not its own).
Each is known by its local port. READY (a path) is created
once the first sample is taken: the round's client starts after it. Then prints one line:

    SEEN NEW MAX_OPEN MAX_ONE SPLIT

SEEN: distinct connections seen in the samples; NEW: those not open at the first sample
(opened during the round); MAX_OPEN: the most open at once; MAX_ONE: the most of the
proxy's ends that one of its epoll sets held at once ("-" when none held any); SPLIT: how the sample with the most
of them registered spread them over the epoll sets that held any, largest first, joined
by '+' ("-" when none did). A worker of Umbra, a thread of HAProxy,
each polls its own sockets with an epoll set of its own, and /proc/PID/fdinfo of an
epoll descriptor lists the descriptors registered in it ("tfd:"), which the proxy's
/proc/PID/fd links name by socket inode: so the split by set is the split by worker.
(A descriptor a proxy has taken out of its epoll set while it needs no event is in no
set: the split may count fewer than MAX_OPEN.)

A connection opened and closed between two samples is not seen: SEEN is at least what
the proxy used, not at most. Python's standard library only.
"""

import os
import signal
import sys
import time


def tcp_table():
    """(local port, remote port, inode) of each established IPv4 TCP socket."""
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            p = line.split()
            if p[3] != "01":  # TCP_ESTABLISHED
                continue
            out.append((int(p[1].split(":")[1], 16), int(p[2].split(":")[1], 16), p[9]))
    return out


def descriptors(pid):
    """pid's sockets ({fd: inode}) and its epoll descriptors."""
    by_fd = {}
    fdir = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fdir)
    except OSError:
        return by_fd, []
    epolls = []
    for n in names:
        try:
            target = os.readlink(os.path.join(fdir, n))
        except OSError:
            continue
        if target.startswith("socket:["):
            by_fd[n] = target[8:-1]
        elif target == "anon_inode:[eventpoll]":
            epolls.append(n)
    return by_fd, epolls


def epoll_sets(pid, by_fd, epolls, inodes):
    """For each epoll descriptor of pid, how many of the sockets with these inodes it holds."""
    counts = []
    for e in epolls:
        k = 0
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, e)) as f:
                for line in f:
                    if line.startswith("tfd:"):
                        fd = line.split()[1]
                        if by_fd.get(fd) in inodes:
                            k += 1
        except OSError:
            continue
        if k:
            counts.append(k)
    return counts


def main():
    port, pid, secs, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    ready = sys.argv[5]
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    first, seen, max_open, max_one, per = None, set(), 0, 0, []
    end = time.monotonic() + secs
    while not stop:
        by_fd, epolls = descriptors(pid)
        mine = set(by_fd.values())
        table = tcp_table()
        # The proxy's ends: its sockets whose peer is the backend's port.
        ends = {l: i for (l, r, i) in table if r == port and i in mine}
        peers, inodes = set(ends), set(ends.values())
        if first is None:
            first = set(peers)
            open(ready, "w").close()
        seen |= peers
        max_open = max(max_open, len(peers))
        counts = sorted(epoll_sets(pid, by_fd, epolls, inodes), reverse=True)
        if counts:
            max_one = max(max_one, counts[0])
        if sum(counts) > sum(per) or (sum(counts) == sum(per) and counts > per):
            per = counts
        if time.monotonic() + interval > end:
            break
        time.sleep(interval)
    first = first or set()
    print(len(seen), len(seen - first), max_open, max_one or "-", "+".join(map(str, per)) or "-")


if __name__ == "__main__":
    main()
