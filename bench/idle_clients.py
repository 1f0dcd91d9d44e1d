#!/usr/bin/env python3
"""Idle keep-alive connections, and what a server's memory grows by to hold them.

bench/idle.sh runs this once per server and round:

    idle_clients.py --port PORT --pid PID --count N --path /1k.bin --body-bytes 1024 [--tls]

1. Warm-up: opens --window connections at once, one request each, and closes them (the
   server's pools and lazily made state exist before the measurement, as in a server that
   has been serving).
2. Measures the server's RSS: VmRSS of PID and of its children (nginx's workers), summed.
3. Opens --count connections, at most --window of them in progress at a time; on each,
   one GET with keep-alive, whose answer must be 200 with --body-bytes of body; then leaves
   it open, idle.
4. Waits --settle seconds, measures the RSS again, and checks that no connection was
   closed by the server.
5. Sends a second request on every connection (each must be answered right: the server
   kept them), then closes them all.

Prints one line: "conns=N before_kb=B after_kb=A per_conn_bytes=X errors=E" where E (the rest
of the line) is "none" or what went wrong. Exits 1 on an error it cannot go on from (no figure then).
Everything is bounded: each phase has a deadline (--timeout seconds), after which the
connections still in progress count as errors.
"""
import argparse
import os
import resource
import select
import socket
import ssl
import sys
import time


def rss_kb(pid):
    """VmRSS of pid and its descendants, in KiB."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for tid in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, tid)) as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class Conn:
    __slots__ = ("sock", "state", "out", "inb", "need", "fd")

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.state = "connect"
        self.out = b""
        self.inb = bytearray()
        self.need = None


def parse_answer(buf, body_bytes):
    """Returns (done, error) for the bytes of one answer read so far."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return (False, "head too long" if len(buf) > 65536 else None)
    head = bytes(buf[:end]).decode("latin-1")
    lines = head.split("\r\n")
    if not lines[0].startswith("HTTP/1.1 200"):
        return (True, "status line %r" % lines[0][:40])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        if name.strip().lower() == "connection" and value.strip().lower() == "close":
            return (True, "Connection: close")
    if length is None:
        return (True, "no Content-Length")
    if len(buf) < end + 4 + length:
        return (False, None)
    if len(buf) > end + 4 + length:
        return (True, "bytes after the answer")
    if length != body_bytes:
        return (True, "body of %d bytes, not %d" % (length, body_bytes))
    return (True, None)


class Driver:
    def __init__(self, args):
        self.args = args
        self.ep = select.epoll()
        self.ctx = None
        if args.tls:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE
        self.request = ("GET %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: umbra-bench-idle\r\n\r\n"
                        % args.path).encode()
        self.errors = []

    def error(self, what):
        if len(self.errors) < 5:
            self.errors.append(what)
        elif len(self.errors) == 5:
            self.errors.append("...")

    def open(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.args.port))
        except BlockingIOError:
            pass
        c = Conn(s)
        self.ep.register(c.fd, select.EPOLLOUT | select.EPOLLIN)
        return c

    def start_request(self, c):
        c.state = "send"
        c.out = self.request
        c.inb = bytearray()

    def step(self, c):
        """Advances c as far as it goes; returns True when its answer is complete."""
        try:
            if c.state == "connect":
                err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    raise OSError(err, os.strerror(err))
                try:
                    c.sock.getpeername()
                except OSError:
                    return False  # not connected yet
                if self.ctx is not None:
                    self.ep.unregister(c.fd)
                    c.sock = self.ctx.wrap_socket(c.sock, server_hostname="localhost",
                                                  do_handshake_on_connect=False)
                    self.ep.register(c.fd, select.EPOLLOUT | select.EPOLLIN)
                    c.state = "handshake"
                else:
                    self.start_request(c)
            if c.state == "handshake":
                try:
                    c.sock.do_handshake()
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    return False
                self.start_request(c)
            if c.state == "send":
                while c.out:
                    try:
                        n = c.sock.send(c.out)
                    except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                        return False
                    c.out = c.out[n:]
                c.state = "recv"
            if c.state == "recv":
                while True:
                    try:
                        chunk = c.sock.recv(65536)
                    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        return False
                    if not chunk:
                        raise OSError("closed by the server before the answer")
                    c.inb += chunk
                    done, err = parse_answer(c.inb, self.args.body_bytes)
                    if err:
                        raise OSError(err)
                    if done:
                        c.state = "idle"
                        c.inb = bytearray()
                        return True
        except (OSError, ssl.SSLError) as e:
            self.error(str(e))
            c.state = "dead"
            return True
        return False

    def run(self, conns_to_open, existing, deadline):
        """Opens conns_to_open new connections (window at a time) and answers one request
        on each, or one more request on each of existing; returns the connections that
        ended idle (the others are closed and counted as errors)."""
        pending = {}
        idle = []
        todo = list(existing)
        for c in todo:
            self.start_request(c)
        opened = 0
        while True:
            while len(pending) < self.args.window and (opened < conns_to_open or todo):
                if todo:
                    c = todo.pop()
                else:
                    try:
                        c = self.open()
                    except OSError as e:
                        self.error("connect: %s" % e)
                        opened += 1
                        continue
                    opened += 1
                pending[c.fd] = c
                if self.step(c):
                    del pending[c.fd]
                    (idle.append(c) if c.state == "idle" else self.drop(c))
            if not pending:
                return idle
            left = deadline - time.monotonic()
            if left <= 0:
                self.error("%d connections unanswered after %gs" % (len(pending), self.args.timeout))
                for c in pending.values():
                    self.drop(c)
                return idle
            for fd, _ in self.ep.poll(min(left, 1.0)):
                c = pending.get(fd)
                if c is not None and self.step(c):
                    del pending[fd]
                    (idle.append(c) if c.state == "idle" else self.drop(c))

    def drop(self, c):
        try:
            self.ep.unregister(c.fd)
        except (OSError, ValueError):
            pass
        c.sock.close()

    def still_open(self, conns):
        """Connections the server closed (readable: EOF or bytes nobody asked for)."""
        p = select.poll()
        for c in conns:
            p.register(c.fd, select.POLLIN | select.POLLHUP)
        return len(p.poll(0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's PID (children counted too)")
    ap.add_argument("--count", type=int, default=9000)
    ap.add_argument("--window", type=int, default=64, help="connections in progress at a time")
    ap.add_argument("--path", default="/1k.bin")
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds idle before measuring")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per phase at most")
    args = ap.parse_args()

    need = args.count + args.window + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("idle_clients: RLIMIT_NOFILE hard limit %d < %d needed" % (hard, need))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))

    d = Driver(args)
    warm = d.run(args.window, [], time.monotonic() + args.timeout)
    for c in warm:
        d.drop(c)
    time.sleep(args.settle)
    before = rss_kb(args.pid)
    conns = d.run(args.count, [], time.monotonic() + args.timeout)
    time.sleep(args.settle)
    after = rss_kb(args.pid)
    closed = d.still_open(conns)
    if closed:
        d.error("%d idle connections closed by the server" % closed)
    again = d.run(0, conns, time.monotonic() + args.timeout)
    if len(again) != args.count:
        d.error("%d of %d connections answered a second request" % (len(again), args.count))
    for c in again:
        d.drop(c)
    per_conn = (after - before) * 1024.0 / max(len(conns), 1)
    print("conns=%d before_kb=%d after_kb=%d per_conn_bytes=%.0f errors=%s" % (
        len(conns), before, after, per_conn, "; ".join(d.errors) or "none"))


if __name__ == "__main__":
    main()
