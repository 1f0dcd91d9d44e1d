#!/usr/bin/env python3
"""Idle WebSocket tunnels, and what a proxy's memory grows by to hold them.

bench/ws.sh runs this once per proxy and round:

    ws_idle.py --port PORT --pid PID --count N [--window W] [--settle S] [--timeout T]

1. Warm-up: opens --window tunnels, one echoed frame each, and closes them (the proxy's
   pools and lazily made state exist before the measurement).
2. Measures the proxy's RSS: VmRSS of PID and of its children (nginx's workers), summed.
3. Opens --count tunnels (GET /ws with Upgrade: websocket; the answer must be a 101 with
   the right Sec-WebSocket-Accept), at most --window in progress at a time, sends one
   small frame on each and waits for its echo, then leaves it open, idle.
4. Waits --settle seconds, measures the RSS again.
5. Sends a second frame on every tunnel (each must come back: the proxy kept them all),
   then closes them.

Prints "tunnels=N before_kb=B after_kb=A per_tunnel_bytes=X errors=E" (E "none" or what
went wrong). Every phase has a deadline (--timeout seconds).
"""
import argparse
import resource
import selectors
import socket
import sys
import time

from idle_clients import rss_kb  # the same RSS count as the idle scenario

REQ = (b"GET /ws HTTP/1.1\r\nHost: bench\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
ACCEPT = b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
# A masked text frame "ping" (mask 01 02 03 04), echoed back as it is by the backend.
FRAME = bytes([0x81, 0x84, 1, 2, 3, 4]) + bytes(b ^ (1 + i % 4) for i, b in enumerate(b"ping"))


class Tunnel:
    __slots__ = ("sock", "state", "buf")

    def __init__(self, port):
        self.sock = socket.socket()
        self.sock.setblocking(False)
        self.sock.connect_ex(("127.0.0.1", port))
        self.state = "connect"
        self.buf = b""


def open_tunnels(port, count, window, deadline, errors):
    """Opens count tunnels, window at a time; returns those that echoed their frame."""
    sel = selectors.DefaultSelector()
    done, started, live = [], 0, 0
    while (started < count or live) and time.monotonic() < deadline:
        while started < count and live < window:
            t = Tunnel(port)
            sel.register(t.sock, selectors.EVENT_WRITE, t)
            started += 1
            live += 1
        for key, ev in sel.select(0.5):
            t = key.data
            try:
                if t.state == "connect":
                    t.sock.send(REQ)
                    t.state = "head"
                    sel.modify(t.sock, selectors.EVENT_READ, t)
                    continue
                d = t.sock.recv(4096)
                if not d:
                    raise OSError("closed")
                t.buf += d
                if t.state == "head" and b"\r\n\r\n" in t.buf:
                    head, t.buf = t.buf.split(b"\r\n\r\n", 1)
                    if not head.startswith(b"HTTP/1.1 101") or ACCEPT not in head:
                        raise OSError("not a 101: %r" % head[:40])
                    t.sock.send(FRAME)
                    t.state = "echo"
                if t.state == "echo" and len(t.buf) >= 6:
                    if t.buf[:2] != b"\x81\x84" or len(t.buf) > 10:
                        raise OSError("wrong echo")
                    if len(t.buf) == 10:
                        t.buf = b""
                        t.state = "idle"
                        sel.unregister(t.sock)
                        live -= 1
                        done.append(t)
            except OSError as e:
                errors.append(str(e))
                sel.unregister(t.sock)
                t.sock.close()
                live -= 1
    if live:
        errors.append("%d tunnels not open in time" % live)
        for key in list(sel.get_map().values()):
            key.fileobj.close()
    sel.close()
    return done


def check_alive(tunnels, deadline, errors):
    """Sends a frame on every tunnel; each must come back."""
    sel = selectors.DefaultSelector()
    for t in tunnels:
        t.sock.send(FRAME)
        t.buf = b""
        sel.register(t.sock, selectors.EVENT_READ, t)
    left = len(tunnels)
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            t = key.data
            try:
                d = t.sock.recv(64)
            except OSError:
                d = b""
            if not d:
                errors.append("a tunnel was closed while idle")
                sel.unregister(t.sock)
                left -= 1
                continue
            t.buf += d
            if len(t.buf) >= 10:
                sel.unregister(t.sock)
                left -= 1
    if left:
        errors.append("%d tunnels did not echo in time" % left)
    sel.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    errors = []
    for t in open_tunnels(a.port, a.window, a.window, time.monotonic() + a.timeout, errors):
        t.sock.close()
    time.sleep(0.5)
    before = rss_kb(a.pid)
    tunnels = open_tunnels(a.port, a.count, a.window, time.monotonic() + a.timeout, errors)
    time.sleep(a.settle)
    after = rss_kb(a.pid)
    if len(tunnels) != a.count:
        errors.append("%d of %d tunnels opened" % (len(tunnels), a.count))
    check_alive(tunnels, time.monotonic() + a.timeout, errors)
    for t in tunnels:
        t.sock.close()
    per = (after - before) * 1024 / max(len(tunnels), 1)
    print("tunnels=%d before_kb=%d after_kb=%d per_tunnel_bytes=%.0f errors=%s" % (
        len(tunnels), before, after, per, "; ".join(sorted(set(errors))[:3]) or "none"))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
