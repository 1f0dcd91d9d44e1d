#!/usr/bin/env python3
"""Clients for bench/cluster.sh (Python standard library only).

  cluster_trace.py trace PREFIX URLS REQUESTS THREADS PORT...
      A Zipf(1.0)-like trace of REQUESTS GETs over URLS objects /PREFIX/I (1 KiB, cacheable
      for an hour), every object at least once, spread round-robin over the PORTs by
      THREADS keep-alive clients. Prints "ok N" when every answer was 200 with the right
      size, else "bad N DETAIL" (and exits 1).
  cluster_trace.py latency PREFIX COUNT OWNER_PORT ASKER_PORT ASKER_ADMIN ORIGIN_PORT PEER...
      COUNT objects /PREFIX/I that PEER number OWNER_PORT's node owns (rendezvous, as
      src/cluster/ring.c computes it; PEERs are the ring's "http://IP:PORT" ids in order)
      are fetched at their owner (stored there), then once at ASKER_PORT's node (a miss
      filled from the owner: "through the owner"), then again there (a local hit). Checks
      that each is what it should be: every answer 200 with the object's size; the first
      GET at the asker not a hit (Cache-Status), filled from the owner (the asker's
      umbra_cluster_peer_fetches_total, from its admin listener ASKER_ADMIN, rises by
      COUNT, and the origin, ORIGIN_PORT's /__count, gets no request); the second a hit.
      Prints "p50_owner_ms p50_local_ms WRONG" (medians over the COUNT objects, one
      keep-alive client; WRONG: what was not as it should be, "none" or a text).
  cluster_trace.py p50 PORT COUNT
      COUNT GETs of /hop over one keep-alive connection (bench/hop.c's server or relay, for
      the floor of the latency figures: the same client, no HTTP work behind it). Prints
      the median in ms.
"""

import random
import socket
import statistics
import sys
import threading
import time

SIZE = 1024
HOST = "bench.cluster"


def target(prefix, i):
    return "/%s/%d?size=%d&cc=max-age%%3D3600" % (prefix, i, SIZE)


class Conn:
    def __init__(self, port):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def get(self, t):
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, HOST)).encode())
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise IOError("closed")
            self.buf += d
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        status = int(head[9:12])
        n = 0
        self.cache_status = ""
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
            elif k.strip().lower() == b"cache-status":
                self.cache_status = v.strip().decode("latin-1")
        while len(rest) < n:
            d = self.sock.recv(65536)
            if not d:
                raise IOError("closed")
            rest += d
        self.buf = rest[n:]
        return status, n


def fnv1a(b, h=0xcbf29ce484222325):
    for c in b:
        h ^= c
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def owner(peers, key):
    hk = fnv1a(key)
    return max(range(len(peers)), key=lambda i: mix(hk ^ mix(fnv1a(peers[i].encode()))))


def trace(prefix, urls, requests, threads, ports):
    rng = random.Random(18)
    stream = rng.choices(range(urls), [1.0 / (i + 1) for i in range(urls)], k=requests)
    stream += list(range(urls))
    rng.shuffle(stream)
    bad = []

    def run(k):
        conns = {}
        try:
            for j, u in enumerate(stream[k::threads]):
                port = ports[(j + k) % len(ports)]
                c = conns.get(port) or conns.setdefault(port, Conn(port))
                st, n = c.get(target(prefix, u))
                if st != 200 or n != SIZE:
                    bad.append((u, port, st, n))
        except Exception as e:
            bad.append(repr(e))

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if bad:
        print("bad %d %r" % (len(bad), bad[:3]))
        sys.exit(1)
    print("ok %d" % len(stream))


def plain_get(port, path):
    """The body of one GET on a connection of its own (the origin's counter, metrics)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=30)
    c.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
               % path).encode())
    data = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        data += d
    c.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise IOError("GET %s on port %d: %r" % (path, port, head[:40]))
    if b"chunked" in head.lower():
        raise IOError("GET %s on port %d: a chunked answer" % (path, port))
    return body.decode()


def peer_fetches(admin_port):
    """The node's umbra_cluster_peer_fetches_total, summed over its peers."""
    name = "umbra_cluster_peer_fetches_total"
    total = 0.0
    for line in plain_get(admin_port, "/metrics").splitlines():
        head, _, value = line.rpartition(" ")
        if head == name or head.startswith(name + "{"):
            total += float(value)
    return total


def origin_count(origin_port):
    return int(plain_get(origin_port, "/__count").strip())


def latency(prefix, count, owner_port, asker_port, asker_admin, origin_port, peers):
    owner_id = "http://127.0.0.1:%d" % owner_port
    want = peers.index(owner_id)
    objs = []
    i = 0
    while len(objs) < count and i < count * len(peers) * 20:
        t = target(prefix, i)
        if owner(peers, ("%s %s" % (HOST, t)).encode()) == want:
            objs.append(t)
        i += 1
    wrong = []
    own, ask = Conn(owner_port), Conn(asker_port)
    for t in objs:
        r = own.get(t)
        if r != (200, SIZE):
            wrong.append("owner %s: %r" % (t, r))
    o0, f0 = origin_count(origin_port), peer_fetches(asker_admin)
    through, local = [], []
    for t in objs:
        t0 = time.perf_counter()
        r = ask.get(t)
        through.append(time.perf_counter() - t0)
        # A miss at the asker (filled, from the owner: counted below), not a hit.
        if r != (200, SIZE) or "; hit" in ask.cache_status or not ask.cache_status:
            wrong.append("through %s: %r, Cache-Status %r" % (t, r, ask.cache_status))
    o1, f1 = origin_count(origin_port), peer_fetches(asker_admin)
    if o1 != o0:
        wrong.append("the origin got %d requests during the fills (expected 0: the owner has them)"
                     % (o1 - o0))
    if f1 - f0 != len(objs):
        wrong.append("the asker fetched %d fills from its peers, expected %d" % (f1 - f0, len(objs)))
    for t in objs:
        t0 = time.perf_counter()
        r = ask.get(t)
        local.append(time.perf_counter() - t0)
        if r != (200, SIZE) or "; hit" not in ask.cache_status:
            wrong.append("local %s: %r, Cache-Status %r" % (t, r, ask.cache_status))
    if len(objs) < count:
        wrong.append("only %d objects owned by that node" % len(objs))
    print("%.4f %.4f %s" % (statistics.median(through) * 1000, statistics.median(local) * 1000,
                            ("%d wrong: %s" % (len(wrong), "; ".join(wrong[:3]))).replace("\n", " ")
                            if wrong else "none"))


def p50(port, count):
    c = Conn(port)
    ts = []
    for _ in range(count):
        t0 = time.perf_counter()
        c.get("/hop")
        ts.append(time.perf_counter() - t0)
    print("%.4f" % (statistics.median(ts) * 1000))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "trace":
        trace(a[1], int(a[2]), int(a[3]), int(a[4]), [int(p) for p in a[5:]])
    elif a[0] == "latency":
        latency(a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6]), a[7:])
    elif a[0] == "p50":
        p50(int(a[1]), int(a[2]))
    else:
        sys.exit(__doc__)
