"""Idle keep-alive connections: what the server's memory grows by to hold them, and that a
connection that went idle (and gave its buffers back) serves whatever comes next, plain
and over TLS: a pipelined burst, a head in pieces, a large head, a request body in pieces,
a large response."""

import os
import shutil
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (CertAuthority, Client, Origin, TlsClient, Umbra,  # noqa: E402
                           class_context, connect, echoed, log_lines_with, origin_body,
                           read_response,
                           sanitizer_build, tls_context, vm_rss_kb, wait_until)

IDLE_CONNECTIONS = 400
# Bytes of RSS per idle plain connection at most. An idle connection holds its core (about
# 400 bytes) and nothing else; before the buffers were given back it held 8 KiB.
IDLE_BOUND = 1536
BIG = os.urandom(1 << 20)
MID = os.urandom(10000)  # over TLS, copied into the output buffer with its head
IDLE_PAUSE = 0.2  # long enough for the server to read EAGAIN and give its buffers back

CA = None
CERT = {}


def setUpModule():
    global CA
    CA = CertAuthority(tempfile.mkdtemp(prefix="umbra-idle-pki-"))
    CA.leaf("example", ["example.com"])
    CERT.update(CA.read("example"))


def tearDownModule():
    if CA is not None:
        shutil.rmtree(CA.dir, ignore_errors=True)


def config(origin_url):
    return """
listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }
tls = { { hosts = { "example.com" }, cert = "example.crt", key = "example.key" } }
limits = { max_connections = 2000 }
upstreams = { app = { servers = { "%s" } } }
routes = {
  { path = "/up/", upstream = "app" },
  { path = "/", root = "www" },
}
""" % origin_url


def files():
    f = {"www/a.txt": "aaa\n", "www/big.bin": BIG, "www/mid.bin": MID}
    f.update(CERT)
    return f


def get(path, host="example.com", extra=b""):
    return b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path.encode(), host.encode(), extra)


class IdleMemoryTest(unittest.TestCase):
    def test_idle_connections_hold_little(self):
        if sanitizer_build():
            self.skipTest("RSS means nothing under a sanitizer")
        with Umbra('routes = { { path = "/", root = "www" } }\n'
                   'limits = { max_connections = 2000 }\n',
                   files={"www/a.txt": "aaa\n"}) as u:
            def one(keep):
                s = connect(u.port)
                s.sendall(get("/a.txt"))
                r = read_response(s)
                self.assertEqual((r.status, r.body), (200, b"aaa\n"))
                if keep:
                    return s
                s.close()
            # Warm-up: the worker's pools and the allocator's first pages.
            for _ in range(32):
                one(False)
            time.sleep(IDLE_PAUSE)
            before = vm_rss_kb(u.proc.pid)
            socks = []
            try:
                for _ in range(IDLE_CONNECTIONS):
                    socks.append(one(True))
                time.sleep(IDLE_PAUSE)
                after = vm_rss_kb(u.proc.pid)
                per = (after - before) * 1024.0 / IDLE_CONNECTIONS
                if os.environ.get("UMBRA_TEST_VERBOSE"):
                    print("\nVmRSS %d -> %d kB: %.0f bytes per idle connection"
                          % (before, after, per))
                self.assertLess(per, IDLE_BOUND, "VmRSS %d -> %d kB for %d idle connections"
                                % (before, after, IDLE_CONNECTIONS))
                # They are real keep-alive connections: each answers again.
                for s in socks[::20]:
                    s.sendall(get("/a.txt"))
                    self.assertEqual(read_response(s).body, b"aaa\n")
            finally:
                for s in socks:
                    s.close()


class AfterIdleTest(unittest.TestCase):
    """Each test runs on a plain and a TLS connection that went idle first."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.u = class_context(cls, Umbra(config(cls.origin.url), files=files()))

    def tearDown(self):
        self.assertTrue(self.u.alive(), "umbra died:\n" + self.u.log())

    def clients(self):
        ctx = tls_context(CA.root)
        return [("plain", lambda: Client(self.u.ports[0])),
                ("tls", lambda: TlsClient(self.u.ports[1], ctx, "example.com"))]

    def idle(self, c):
        """One request, then a pause: the connection waits idle with nothing buffered."""
        c.send(get("/a.txt"))
        r = c.read_response()
        self.assertEqual((r.status, r.body), (200, b"aaa\n"))
        time.sleep(IDLE_PAUSE)

    def test_pipelined_burst_after_idle(self):
        for name, make in self.clients():
            with self.subTest(name), make() as c:
                self.idle(c)
                c.send(get("/a.txt") + get("/up/x?echo=1") + get("/big.bin") + get("/a.txt")
                       + get("/mid.bin") + get("/up/x?size=20000"))
                rs = [c.read_response(timeout=20) for _ in range(6)]
                self.assertEqual([r.status for r in rs], [200] * 6)
                self.assertEqual(rs[0].body, b"aaa\n")
                self.assertEqual(echoed(rs[1])[0], "GET /up/x?echo=1 HTTP/1.1")
                self.assertEqual(rs[2].body, BIG)
                self.assertEqual(rs[3].body, b"aaa\n")
                self.assertEqual(rs[4].body, MID)
                self.assertEqual(rs[5].body, origin_body(20000))
                # ...and idle again after large responses, and again after medium ones
                # (their buffers come back from the pools).
                self.idle(c)
                for _ in range(3):
                    c.send(get("/mid.bin"))
                    self.assertEqual(c.read_response().body, MID)
                    c.send(get("/up/x?size=20000"))
                    self.assertEqual(c.read_response().body, origin_body(20000))
                    time.sleep(IDLE_PAUSE)

    def test_head_in_pieces_after_idle(self):
        for name, make in self.clients():
            with self.subTest(name), make() as c:
                self.idle(c)
                raw = get("/up/x?echo=1", extra=b"X-Pieces: 1\r\n")
                for i in range(0, len(raw), 7):
                    c.send(raw[i:i + 7])
                    time.sleep(0.01)
                r = c.read_response()
                self.assertEqual(r.status, 200)
                self.assertIn(("X-Pieces", "1"), echoed(r)[1])
                self.idle(c)

    def test_large_head_after_idle(self):
        # 14 KiB of fields (90 of them: the parser takes 100), under the default 16 KiB
        # limit: far more than a connection's small core.
        fields = b"".join(b"X-Field-%03d: %s\r\n" % (i, b"v" * 140) for i in range(90))
        for name, make in self.clients():
            with self.subTest(name), make() as c:
                self.idle(c)
                c.send(get("/up/x?echo=1", extra=fields))
                r = c.read_response()
                self.assertEqual(r.status, 200)
                seen = echoed(r)[1]
                self.assertIn(("X-Field-089", "v" * 140), seen)
                self.assertEqual(sum(1 for k, _ in seen if k.startswith("X-Field-")), 90)
                self.idle(c)

    def test_body_in_pieces_after_idle(self):
        body = os.urandom(100 * 1024)
        for name, make in self.clients():
            with self.subTest(name), make() as c:
                self.idle(c)
                c.send(b"POST /up/x?echo=1 HTTP/1.1\r\nHost: example.com\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body[:1000])
                time.sleep(IDLE_PAUSE)  # the body is in progress: nothing may be dropped
                c.send(body[1000:])
                r = c.read_response(timeout=20)
                self.assertEqual(r.status, 200)
                self.assertEqual(echoed(r)[2], body)
                self.idle(c)
                # A chunked body too, its chunks apart.
                c.send(b"POST /up/x?echo=1 HTTP/1.1\r\nHost: example.com\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                time.sleep(IDLE_PAUSE)
                c.send(b"6\r\n world\r\n0\r\n\r\n")
                r = c.read_response()
                self.assertEqual(r.status, 200)
                self.assertEqual(echoed(r)[2], b"hello world")
                self.idle(c)

    def test_many_idle_connections_each_answer(self):
        # Connections idle at once, each then served again, in an order unlike the one
        # they went idle in (the pools hand buffers around).
        conns = []
        try:
            for i in range(60):
                name, make = self.clients()[i % 2]
                c = make()
                conns.append(c)
                self.idle(c) if i == 59 else (c.send(get("/a.txt")), c.read_response())
            for c in reversed(conns):
                c.send(get("/a.txt") + get("/a.txt"))
            for c in conns:
                rs = [c.read_response(), c.read_response()]
                self.assertEqual([r.body for r in rs], [b"aaa\n", b"aaa\n"])
        finally:
            for c in conns:
                c.close()


class ReloadTest(unittest.TestCase):
    def test_reload_with_other_head_limits(self):
        # Read buffers are sized by a snapshot's limits: after a reload that changes them,
        # idle connections of the old snapshot take buffers of their own size (not the
        # pool's), new ones the new size, and both keep their own limits.
        def conf(max_head):
            return ('listen = { "127.0.0.1:%d" }\nworkers = 1\n'
                    'limits = { max_header_bytes = %d }\n'
                    'routes = { { path = "/", root = "www" } }\n' % (u.port, max_head))

        def reload(max_head):
            with open(u.config_path + ".tmp", "w") as f:
                f.write(conf(max_head))
            os.rename(u.config_path + ".tmp", u.config_path)
            n = len(log_lines_with(u, "configuration reloaded"))
            u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(
                lambda: len(log_lines_with(u, "configuration reloaded")) > n, 5), u.log())

        def head(size):
            pad = b"X-Pad: %s\r\n" % (b"p" * (size - 60))
            return b"GET /a.txt HTTP/1.1\r\nHost: example.com\r\n%s\r\n" % pad

        with Umbra('limits = { max_header_bytes = 4096 }\n'
                   'routes = { { path = "/", root = "www" } }\n',
                   files={"www/a.txt": "aaa\n"}) as u:
            old = Client(u.port)
            try:
                for max_head in (32768, 4096, 32768):
                    old.send(get("/a.txt"))
                    self.assertEqual(old.read_response().body, b"aaa\n")
                    time.sleep(IDLE_PAUSE)
                    reload(max_head)
                    with Client(u.port) as new:
                        new.send(head(max_head - 2048))
                        self.assertEqual(new.read_response().status, 200)
                        time.sleep(IDLE_PAUSE)
                        new.send(head(max_head + 100))
                        self.assertEqual(new.read_response().status, 431)
                    old.send(head(3000))
                    self.assertEqual(old.read_response().status, 200)
                old.send(head(6000))  # over the limit of the old connection's snapshot
                self.assertEqual(old.read_response().status, 431)
            finally:
                old.close()
            self.assertTrue(u.alive(), u.log())


if __name__ == "__main__":
    unittest.main()
