#!/usr/bin/env python3
"""Helpers of bench/acme.sh.

first PORT ROOT T0 TIMEOUT NAME...: polls 127.0.0.1:PORT every 50 ms with a TLS handshake
  for each NAME (SNI NAME, verified against ROOT, pebble's root, and NAME); prints the
  seconds from T0 (epoch seconds, the server's start) until every NAME has had one.
  Exit 1 after TIMEOUT seconds.
busy LOG T0 T1: from Umbra's error log, the ACME orders that ended between T0 and T1
  (epoch seconds) and the % of [T0, T1] during which an order was in progress (from each
  "ordering"/"renewing" line to its "certificate issued"/"order failed" line).
"""

import calendar
import re
import socket
import ssl
import sys
import time


def handshake(port, ctx, name):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            with ctx.wrap_socket(s, server_hostname=name):
                return True
    except (OSError, ssl.SSLError):
        return False


def first(port, root, t0, timeout, names):
    ctx = ssl.create_default_context(cafile=root)
    left = set(names)
    while left:
        if time.time() - t0 > timeout:
            sys.stderr.write("no verified handshake for %s after %s s\n" % (" ".join(sorted(left)), timeout))
            return 1
        for n in sorted(left):
            if handshake(port, ctx, n):
                left.discard(n)
        if left:
            time.sleep(0.05)
    print("%.3f" % (time.time() - t0))
    return 0


LINE = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z .*acme: (\S+): (.*)$")


def busy(path, t0, t1):
    spans, start, ended = [], None, 0
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            y, mo, d, h, mi, s, ms = (int(x) for x in m.groups()[:7])
            t = calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000
            what = m.group(9)
            if what.startswith("ordering a certificate") or what.startswith("renewing the certificate"):
                start = t
            elif what.startswith("certificate issued") or what.startswith("the order failed"):
                if start is not None:
                    spans.append((start, t))
                    if t0 <= t <= t1:
                        ended += 1
                start = None
    if start is not None:
        spans.append((start, t1))
    inside = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans)
    print("%d %.0f" % (ended, 100 * inside / (t1 - t0) if t1 > t0 else 0))
    return 0


def main(argv):
    if len(argv) >= 6 and argv[1] == "first":
        return first(int(argv[2]), argv[3], float(argv[4]), float(argv[5]), argv[6:])
    if len(argv) == 5 and argv[1] == "busy":
        return busy(argv[2], float(argv[3]), float(argv[4]))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
