#!/usr/bin/env python3
"""Latency of an L2 hit beside a memory hit, for bench/l2.sh.

    l2_latency.py WRITER_PORT READER_PORT ROUND N SIZE

Fills N keys through the writer node (each written to Redis), waits until Redis holds
them, then asks the reader node (same Redis, empty memory for those keys) for each key
twice on one keep-alive connection: the first answer is an L2 hit (rebuilt from Redis),
the second a memory hit. Checks that every answer is 200 with SIZE bytes and the
Cache-Status the kind of hit it should be; prints "P50_L2_MS P50_MEM_MS P99_L2_MS
P99_MEM_MS WRONG" (WRONG: answers that were not what they should be)."""

import http.client
import statistics
import sys
import time


def main():
    wport, rport, rnd, n, size = (int(a) for a in sys.argv[1:6])
    paths = ["/l2/r%d/k%d?size=%d&cc=max-age%%3D3600" % (rnd, i, size) for i in range(n)]
    wrong = 0
    w = http.client.HTTPConnection("127.0.0.1", wport, timeout=10)
    for p in paths:
        w.request("GET", p, headers={"Host": "bench.l2"})
        r = w.getresponse()
        if r.status != 200 or len(r.read()) != size:
            wrong += 1
    w.close()
    time.sleep(0.5)  # the writes are fire-and-forget: let them land
    c = http.client.HTTPConnection("127.0.0.1", rport, timeout=10)
    l2, mem = [], []
    for p in paths:
        for kind, out in (("l2", l2), ("mem", mem)):
            t0 = time.perf_counter()
            c.request("GET", p, headers={"Host": "bench.l2"})
            r = c.getresponse()
            body = r.read()
            out.append((time.perf_counter() - t0) * 1000)
            cs = r.getheader("Cache-Status") or ""
            is_l2 = "detail=l2" in cs
            if r.status != 200 or len(body) != size or "hit" not in cs or \
                    is_l2 != (kind == "l2"):
                wrong += 1
    c.close()

    def p99(v):
        return sorted(v)[max(0, int(len(v) * 0.99) - 1)]
    print("%.3f %.3f %.3f %.3f %d" % (statistics.median(l2), statistics.median(mem),
                                      p99(l2), p99(mem), wrong))


if __name__ == "__main__":
    main()
