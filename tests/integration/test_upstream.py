"""The upstream origin: what reaches the backend, what comes back, errors, retries,
balancing, HTTPS backends and a slow reader.

Every test drives the scripted origin (tests/origin/origin.c) through its query string:
`/x?status=404&delay=200&size=1024`, `/echo` for a dump of what it received; `--record`
lists every request it saw, so a test checks both what the client got and what the origin
saw. `umbra-test-origin -h` lists the parameters.
"""

import hashlib
import os
import re
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Client, Origin, ParseError, Umbra, class_context,  # noqa: E402
                           closed_port, connect, echoed, exchange, fetch, make_cert, origin_body,
                           parse_response, parse_responses, release_port, req, scrape, values,
                           vm_rss_kb,
                           wait_until)


def new_lines(u, mark):
    return u.log()[mark:].splitlines()


class UpstreamAssertions:
    def assertOneErrorLine(self, u, mark, upstream, server_url):
        """umbra logged one line naming the upstream and the server since mark."""
        def lines():
            return [line for line in new_lines(u, mark)
                    if server_url in line and re.search(r"\b%s\b" % re.escape(upstream), line)]
        wait_until(lines, timeout=3)
        got = lines()
        self.assertEqual(len(got), 1, "expected one log line naming upstream %r and server %s, "
                         "got:\n%s" % (upstream, server_url, u.log()[mark:]))


# -- what goes to the backend and what comes back ----------------------------------------

class ForwardTest(unittest.TestCase, UpstreamAssertions):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        # A 20 MB upload is over the default limits.max_body_bytes (16 MB).
        cls.umbra = class_context(cls, Umbra("""
limits = { max_body_bytes = "64MB" }
upstreams = {
  app = { servers = { "%(url)s" }, timeout = 10 },
  hosted = { servers = { "%(url)s" }, host = "backend.test" },
}
routes = {
  { path = "/hosted/", upstream = "hosted" },
  { path = "/", upstream = "app" },
}
""" % {"url": cls.origin.url}))
        cls.port = cls.umbra.port

    def seen(self, target):
        """The origin's records of requests for exactly this target."""
        return [r for r in self.origin.records() if r[1] == target]

    # -- request line and fields ------------------------------------------------------------

    def test_method_and_target_byte_for_byte(self):
        targets = ("/echo/a/%2F/../b;c?x=1&y=%20",
                   "/echo//double//slash/?",
                   "/echo/a:b@c!$&'()*+,;=/%7e%41?q=/?x&&z=%2B+",
                   "/echo/%E2%82%AC?%00=%ff")
        for method in ("GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PURGEX"):
            for target in targets:
                with self.subTest(method=method, target=target):
                    r = fetch(self.port, req(target, method=method, body=b"" if method in
                                             ("POST", "PUT", "PATCH") else None))
                    self.assertEqual(r.status, 200, r.raw_head)
                    line, _, _ = echoed(r)
                    self.assertEqual(line, "%s %s HTTP/1.1" % (method, target))

    def test_request_fields_in_order(self):
        sent = [("X-A", "1"), ("X-B", "two words"), ("X-A", "3"), ("Cookie", "a=1"),
                ("X-Empty", ""), ("Cookie", "b=2"), ("Accept", "text/html, */*;q=0.1"),
                ("User-Agent", "umbra-test/1.0")]
        r = fetch(self.port, req("/echo/order", headers=sent))
        self.assertEqual(r.status, 200)
        _, fields, _ = echoed(r)
        names = {k.lower() for k, _ in sent}
        got = [(k.lower(), v) for k, v in fields if k.lower() in names]
        self.assertEqual(got, [(k.lower(), v) for k, v in sent])
        self.assertEqual(values(fields, "Host"), ["umbra.test"])

    def test_content_length_body(self):
        body = bytes(range(256)) * 40
        r = fetch(self.port, req("/echo/cl", method="POST", body=body))
        self.assertEqual(r.status, 200)
        _, fields, got = echoed(r)
        self.assertEqual(got, body)
        self.assertEqual(r.header("X-Echo-Body-Length"), str(len(body)))

    def test_chunked_request_body(self):
        parts = [b"hello ", b"chunked " * 1000, b"world"]
        raw = req("/echo/chunked", method="POST", headers=[("Transfer-Encoding", "chunked")])
        raw += b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        r = fetch(self.port, raw)
        self.assertEqual(r.status, 200)
        _, _, got = echoed(r)
        self.assertEqual(got, b"".join(parts))

    def test_20mb_upload_arrives_intact(self):
        body = os.urandom(1 << 20) * 20
        r = fetch(self.port, req("/echo/upload?echo=head", method="POST", body=body),
                  timeout=30)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("X-Echo-Body-Length"), str(len(body)))
        self.assertEqual(r.header("X-Echo-Body-Sha256"), hashlib.sha256(body).hexdigest())
        self.assertEqual(self.seen("/echo/upload?echo=head"),
                         [("POST", "/echo/upload?echo=head", len(body))])

    def test_20mb_chunked_upload_arrives_intact(self):
        body = os.urandom(1 << 20) * 20
        raw = req("/echo/upchunked?echo=head", method="POST",
                  headers=[("Transfer-Encoding", "chunked")])
        step = 100000
        raw += b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + step]), body[i:i + step])
                        for i in range(0, len(body), step)) + b"0\r\n\r\n"
        r = fetch(self.port, raw, timeout=30)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("X-Echo-Body-Length"), str(len(body)))
        self.assertEqual(r.header("X-Echo-Body-Sha256"), hashlib.sha256(body).hexdigest())

    # -- hop-by-hop fields ------------------------------------------------------------------

    def test_hop_by_hop_request_fields_removed(self):
        r = fetch(self.port, req("/echo/hop", close=False, headers=[
            ("Connection", "X-Foo, close"), ("X-Foo", "1"), ("Keep-Alive", "timeout=5"),
            ("TE", "trailers"), ("Trailer", "X-T"), ("Proxy-Connection", "keep-alive"),
            ("X-End-To-End", "kept")]))
        self.assertEqual(r.status, 200)
        _, fields, _ = echoed(r)
        names = [k.lower() for k, _ in fields]
        for name in ("x-foo", "keep-alive", "te", "trailer", "proxy-connection"):
            self.assertNotIn(name, names, fields)
        for v in values(fields, "Connection"):
            self.assertNotIn("x-foo", v.lower(), fields)
        self.assertEqual(values(fields, "X-End-To-End"), ["kept"])

    def test_hop_by_hop_response_fields_removed(self):
        q = "&".join("header=" + h for h in (
            "Connection:X-Bar", "X-Bar:1", "Keep-Alive:timeout%3D5", "Trailer:X-T",
            "Upgrade:h2c", "Proxy-Connection:keep-alive", "X-End:ok"))
        r = fetch(self.port, req("/hop-resp?" + q))
        self.assertEqual(r.status, 200)
        names = [k.lower() for k, _ in r.headers]
        for name in ("x-bar", "keep-alive", "trailer", "upgrade", "proxy-connection"):
            self.assertNotIn(name, names, r.raw_head)
        for v in r.header_all("Connection"):
            self.assertNotIn("x-bar", v.lower(), r.raw_head)
        self.assertEqual(r.header_all("X-End"), ["ok"])

    # -- fields umbra adds ------------------------------------------------------------------

    def test_forwarded_fields_added(self):
        r = fetch(self.port, req("/echo/fwd", host="shop.test:8080"))
        _, fields, _ = echoed(r)
        self.assertEqual(values(fields, "X-Forwarded-For"), ["127.0.0.1"])
        self.assertEqual(values(fields, "X-Forwarded-Proto"), ["http"])
        self.assertEqual(values(fields, "X-Forwarded-Host"), ["shop.test:8080"])
        self.assertEqual(values(fields, "Host"), ["shop.test:8080"])
        vias = values(fields, "Via")
        self.assertEqual(len(vias), 1, fields)
        self.assertIn("umbra", vias[0])

    def test_forwarded_for_appended(self):
        r = fetch(self.port, req("/echo/xff", headers=[("X-Forwarded-For", "1.2.3.4")]))
        _, fields, _ = echoed(r)
        self.assertEqual(values(fields, "X-Forwarded-For"), ["1.2.3.4, 127.0.0.1"])

    def test_via_added_to_response(self):
        r = fetch(self.port, req("/via"))
        self.assertTrue(any("umbra" in v for v in r.header_all("Via")), r.raw_head)

    def test_host_override(self):
        r = fetch(self.port, req("/hosted/x?echo=1", host="client.test"))
        self.assertEqual(r.status, 200)
        line, fields, _ = echoed(r)
        self.assertEqual(line, "GET /hosted/x?echo=1 HTTP/1.1")
        self.assertEqual(values(fields, "Host"), ["backend.test"])
        self.assertEqual(values(fields, "X-Forwarded-Host"), ["client.test"])

    # -- the response -----------------------------------------------------------------------

    def test_status_and_reason_pass_through(self):
        for status, reason in ((299, "Custom Reason"), (404, "Not Found"), (418, "Teapot Here"),
                               (503, "Back Soon"), (201, "Created")):
            with self.subTest(status=status):
                r = fetch(self.port, req("/s?status=%d&reason=%s" % (
                    status, reason.replace(" ", "+"))))
                self.assertEqual((r.status, r.reason), (status, reason))

    def test_response_fields_in_order(self):
        sent = [("X-A", "1"), ("Set-Cookie", "a=1; Path=/"), ("X-B", "2"),
                ("Set-Cookie", "b=2"), ("X-A", "3"), ("Link", "</a>; rel=preload")]
        q = "&".join("header=%s:%s" % (k, v.replace(" ", "+").replace(";", "%3B")
                                       .replace("=", "%3D")) for k, v in sent)
        r = fetch(self.port, req("/fields?" + q))
        self.assertEqual(r.status, 200)
        names = {k.lower() for k, _ in sent}
        got = [(k.lower(), v) for k, v in r.headers if k.lower() in names]
        self.assertEqual(got, [(k.lower(), v) for k, v in sent])

    def test_redirect_passed_through_not_followed(self):
        r = fetch(self.port, req("/redir?status=302&header=Location:/elsewhere-redir"))
        self.assertEqual(r.status, 302)
        self.assertEqual(r.header("Location"), "/elsewhere-redir")
        time.sleep(0.2)
        self.assertEqual(self.seen("/elsewhere-redir"), [])

    def test_head(self):
        with Client(self.port) as c:
            c.send(req("/head?size=1234", method="HEAD", close=False))
            r = c.read_response(head=True)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("Content-Length"), "1234")
            self.assertEqual(r.body, b"")
            # Nothing stray follows the head: the next response on the connection parses.
            c.send(req("/after-head?size=10", close=False))
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, origin_body(10))
        self.assertEqual(self.seen("/head?size=1234"), [("HEAD", "/head?size=1234", 0)])

    def test_chunked_origin_body_complete(self):
        for size in (0, 1, 100000, 3000001):
            with self.subTest(size=size):
                r = fetch(self.port, req("/ch?chunked=1&size=%d" % size))
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, origin_body(size))

    def test_chunked_with_content_length_is_framed_by_chunks(self):
        # Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3): the client gets
        # the whole decoded body, not a Content-Length: 3 that would cut it and leave the
        # rest on the connection as the start of a next response.
        data, closed = exchange(self.port, req("/tecl?size=20&chunked=1&header=Content-Length:3",
                                               close=False) + req("/after?size=5"), timeout=10)
        self.assertTrue(closed)
        first, second = parse_responses(data)
        self.assertEqual((first.status, first.body), (200, origin_body(20)))
        self.assertNotEqual(first.header("Content-Length"), "3")
        self.assertEqual((second.status, second.body), (200, origin_body(5)))

    def test_close_delimited_origin_body_complete(self):
        r = fetch(self.port, req("/nolen?nolength=1&size=200000"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, origin_body(200000))

    def test_large_body_streams(self):
        # 8 pieces with 200 ms pauses: the origin needs 1.4 s to finish the body.
        size = 200000
        start = time.monotonic()
        with connect(self.port, timeout=10) as s:
            s.sendall(req("/stream?size=%d&slow=200&piece=25000" % size))
            buf = b""
            first = None
            while True:
                r, _, _ = select.select([s], [], [], 10)
                self.assertTrue(r, "no data within 10 s")
                data = s.recv(65536)
                if not data:
                    break
                buf += data
                end = buf.find(b"\r\n\r\n")
                if first is None and end >= 0 and len(buf) > end + 4:
                    first = time.monotonic() - start
        total = time.monotonic() - start
        r = parse_response(buf)
        self.assertEqual(r.body, origin_body(size))
        self.assertGreater(total, 1.2, "the origin paused 1.4 s in all")
        self.assertLess(first, 0.7, "first body bytes after %.2f s of %.2f s" % (first, total))

    def test_upgrade_forwarded_non_101_is_ordinary(self):
        # An upgrade request reaches the server with its Upgrade and Connection: upgrade
        # (tunnels: test_ws.py); an answer other than 101 is an ordinary response, and the
        # client connection goes on.
        with Client(self.port) as c:
            c.send(req("/echo/ws-upgrade", close=False, headers=[
                ("Connection", "Upgrade"), ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]))
            r = c.read_response()
            self.assertEqual(r.status, 200)
            _, fields, _ = echoed(r)
            self.assertEqual(values(fields, "upgrade"), ["websocket"])
            self.assertEqual([v.lower() for v in values(fields, "connection")], ["upgrade"])
            self.assertEqual(values(fields, "sec-websocket-key"), ["dGhlIHNhbXBsZSBub25jZQ=="])
            c.send(req("/echo/after", close=False))
            self.assertEqual(c.read_response().status, 200)

    def test_keep_alive_many_requests(self):
        # Responses on one client connection come back in order and whole.
        with Client(self.port) as c:
            for i in range(20):
                c.send(req("/ka%d?size=%d" % (i, 1000 + i), close=False))
                r = c.read_response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, origin_body(1000 + i))


# -- errors ------------------------------------------------------------------------------

class ErrorTest(unittest.TestCase, UpstreamAssertions):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.dead_url = "http://127.0.0.1:%d" % closed_port()
        # max_fails is high so that one test's failures do not take the server out for the
        # next; retries = 0 so that every error is answered, not retried.
        cls.umbra = class_context(cls, Umbra("""
upstreams = {
  app = { servers = { "%s" }, timeout = 1, retries = 0, max_fails = 100 },
  dead = { servers = { "%s" }, connect_timeout = 1, retries = 0, max_fails = 100 },
}
routes = {
  { path = "/dead/", upstream = "dead" },
  { path = "/", upstream = "app" },
}
""" % (cls.origin.url, cls.dead_url)))
        cls.port = cls.umbra.port

    def error(self, target, status, upstream="app", url=None, max_time=3.0):
        mark = len(self.umbra.log())
        start = time.monotonic()
        r = fetch(self.port, req(target), timeout=max_time + 2)
        took = time.monotonic() - start
        self.assertEqual(r.status, status, r.raw_head + r.body[:200])
        self.assertLess(took, max_time)
        self.assertOneErrorLine(self.umbra, mark, upstream, url or self.origin.url)
        return took

    def test_connection_refused_502(self):
        self.error("/dead/x", 502, upstream="dead", url=self.dead_url)

    def test_stall_504(self):
        took = self.error("/x?stall=1", 504, max_time=2.5)
        self.assertGreater(took, 0.8)

    def test_delay_504(self):
        took = self.error("/x?delay=3000", 504, max_time=2.5)
        self.assertGreater(took, 0.8)

    def test_drop_head_502(self):
        self.error("/x?drop=head", 502)

    def test_garbage_502(self):
        self.error("/x?garbage=1", 502)

    def test_big_head_502(self):
        self.error("/x?bighead=100000", 502)

    def test_head_under_limit_passes(self):
        r = fetch(self.port, req("/x?bighead=20000&size=5"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, origin_body(5))

    def test_origin_dies_mid_body(self):
        for q in ("size=1000000&drop=body", "size=1000000&drop=body&chunked=1"):
            with self.subTest(q=q):
                mark = len(self.umbra.log())
                data, closed = exchange(self.port, req("/x?" + q, close=False), timeout=5)
                self.assertTrue(closed, "client connection left open after a cut body")
                r = parse_responses(data, strict=False)[0]
                if r.status == 200:
                    try:
                        parse_responses(data, strict=True)
                        complete = True
                    except (ParseError, ValueError):
                        complete = False
                    self.assertFalse(complete, "a cut body looked complete: %r" % r)
                    if r.header("Content-Length"):
                        self.assertLess(len(r.body), int(r.header("Content-Length")))
                    self.assertLessEqual(len(r.body), 500000)
                else:
                    self.assertEqual(r.status, 502)
                self.assertOneErrorLine(self.umbra, mark, "app", self.origin.url)

    def test_client_leaves_endless_body(self):
        before = self.origin.stats()["aborted"]
        with connect(self.port, timeout=5) as s:
            s.sendall(req("/x?endless=1", close=False))
            got = 0
            while got < (1 << 20):
                data = s.recv(65536)
                self.assertTrue(data, "endless body ended")
                got += len(data)
        # The origin notices umbra's upstream connection closing soon after.
        self.assertTrue(wait_until(lambda: self.origin.stats()["aborted"] > before, timeout=3),
                        "origin still sending 3 s after the client left: %r"
                        % self.origin.stats())
        self.assertTrue(wait_until(lambda: self.origin.stats()["active"] == 0, timeout=3))


# -- concurrency -------------------------------------------------------------------------

class ConcurrencyTest(unittest.TestCase):
    def test_fast_request_while_100_are_pending(self):
        with Origin() as o, Umbra('upstreams = { app = { servers = { "%s" } } }\n'
                                  'routes = { { path = "/", upstream = "app" } }' % o.url,
                                  workers=1) as u:
            socks = []
            try:
                for i in range(100):
                    s = connect(u.port, timeout=10)
                    s.sendall(req("/slow%d?delay=2000" % i))
                    socks.append(s)
                wait_until(lambda: o.stats()["active"] >= 100, timeout=3)
                self.assertGreaterEqual(o.stats()["active"], 100, "slow requests not at the origin")
                # The best of three, so that one scheduling hiccup on a busy machine does not
                # fail the test; a blocked loop would make all three slow.
                took = []
                for j in range(3):
                    start = time.monotonic()
                    r = fetch(u.port, req("/fast%d?size=10" % j))
                    took.append(time.monotonic() - start)
                    self.assertEqual(r.status, 200)
                self.assertLess(min(took), 0.1, "fast requests took %s s" % took)
                for i, s in enumerate(socks):
                    data = b""
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline:
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    r = parse_response(data)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.body, b"/slow%d?delay=2000\n" % i)
            finally:
                for s in socks:
                    s.close()


# -- retries and failing servers ---------------------------------------------------------

class Listener:
    """A listener on 127.0.0.1 whose accepted connections go to handle(conn) on its
    thread, counting them; subclasses say what a connection gets."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            r, _, _ = select.select([self.sock], [], [], 0.1)
            if not r:
                continue
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.handle(c)

    def handle(self, conn):
        raise NotImplementedError

    def close(self):
        self._stop = True
        self._thread.join(2)
        self.sock.close()


class ResetServer(Listener):
    """Accepts and resets every connection."""

    def handle(self, conn):
        import struct
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()


class RetryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = class_context(cls, Origin())
        cls.b = class_context(cls, Origin())
        cls.resetter = ResetServer()
        cls.addClassCleanup(cls.resetter.close)
        cls.dead_url = "http://127.0.0.1:%d" % closed_port()
        cls.umbra = class_context(cls, Umbra("""
upstreams = {
  withdead = { servers = { "%(a)s", "%(dead)s" }, retries = 1, max_fails = 3, fail_timeout = 30 },
  withreset = { servers = { "%(a)s", "%(reset)s" }, retries = 1, max_fails = 3, fail_timeout = 30 },
  postdead = { servers = { "%(dead)s", "%(a)s" }, retries = 1, max_fails = 100 },
  twolive = { servers = { "%(a)s", "%(b)s" }, retries = 1, max_fails = 100, timeout = 5 },
}
routes = {
  { path = "/withdead/", upstream = "withdead" },
  { path = "/withreset/", upstream = "withreset" },
  { path = "/postdead/", upstream = "postdead" },
  { path = "/", upstream = "twolive" },
}
""" % {"a": cls.a.url, "b": cls.b.url, "dead": cls.dead_url, "reset": cls.resetter.url},
            # Round-robin and the failure counts are per worker in order, and the counts of
            # resent requests below assume one.
            workers=1))
        cls.port = cls.umbra.port

    def seen(self, target):
        return [r for o in (self.a, self.b) for r in o.records() if r[1] == target]

    def test_get_retried_past_dead_server(self):
        for i in range(12):
            r = fetch(self.port, req("/withdead/g%d" % i))
            self.assertEqual(r.status, 200, "GET %d: %r" % (i, r))
            self.assertEqual(r.header("X-Origin-Port"), str(self.a.port))
        # After max_fails (3) failures the dead server is skipped: it cost at most 3
        # connection errors over the 12 requests (one logged line each, at most, plus the
        # line that takes it out).
        errors = [line for line in self.umbra.log().splitlines()
                  if self.dead_url in line and "in a row" not in line]
        self.assertLessEqual(len(errors), 3, "\n".join(errors))

    def test_reset_server_skipped_after_max_fails(self):
        for i in range(12):
            r = fetch(self.port, req("/withreset/g%d" % i))
            self.assertEqual(r.status, 200, "GET %d: %r" % (i, r))
            self.assertEqual(r.header("X-Origin-Port"), str(self.a.port))
        self.assertGreaterEqual(self.resetter.accepted, 1, "round robin never tried it")
        self.assertLessEqual(self.resetter.accepted, 3,
                             "the resetting server was tried %d times" % self.resetter.accepted)

    def test_post_to_dead_server(self):
        statuses = []
        for i in range(4):
            target = "/postdead/p%d" % i
            r = fetch(self.port, req(target, method="POST", body=b"payload %d" % i))
            statuses.append(r.status)
            self.assertIn(r.status, (200, 502))
            # Never delivered twice, and delivered exactly when it succeeded.
            self.assertEqual(len(self.seen(target)), 1 if r.status == 200 else 0)
        self.assertIn(200, statuses)

    def test_post_not_retried_after_sending(self):
        # Both servers close without answering: a GET may be tried on the other server, a
        # POST that reached a server must not be sent again. Warm requests first leave
        # idle keep-alive connections to both, so the failing requests may go out on reused
        # connections (where an HTTP client library is tempted to resend by itself).
        for i in range(4):
            self.assertEqual(fetch(self.port, req("/warm%d" % i)).status, 200)
        r = fetch(self.port, req("/twolive-post?drop=head", method="POST", body=b"once"))
        self.assertEqual(r.status, 502)
        time.sleep(0.2)
        self.assertEqual(len(self.seen("/twolive-post?drop=head")), 1)
        r = fetch(self.port, req("/twolive-get?drop=head"))
        self.assertEqual(r.status, 502)
        time.sleep(0.2)
        # retries = 1 allows one more server. On top of that, a GET whose reused keep-alive
        # connection closes before any response byte is resent once on a fresh connection
        # to the same server (the keep-alive race; libcurl does it, as browsers do), so a
        # server that answers nothing can see it twice.
        self.assertIn(len(self.seen("/twolive-get?drop=head")), (1, 2, 3))


# -- balancing ---------------------------------------------------------------------------

# -- the two clients ---------------------------------------------------------------------

class OneAnswerServer(Listener):
    """A keep-alive HTTP/1.1 server that answers the first request of each connection and
    closes the connection on the second without answering: what a server does when its
    keep-alive timeout ends just as the proxy reuses the connection."""

    def __init__(self):
        self.answered = 0
        super().__init__()

    def handle(self, conn):
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, c):
        with c:
            c.settimeout(5)
            data = b""
            requests = 0
            while True:
                while b"\r\n\r\n" not in data:
                    try:
                        more = c.recv(65536)
                    except OSError:
                        return
                    if not more:
                        return
                    data += more
                data = data.split(b"\r\n\r\n", 1)[1]
                requests += 1
                if requests > 1:
                    return  # closed without an answer
                self.answered += 1
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")


class ClientTest(unittest.TestCase, UpstreamAssertions):
    """http:// servers at an IP address go through Umbra's own HTTP/1.1 client, others
    (https://, host names, client = "curl") through libcurl. CTest runs this file twice:
    as it is, and with UMBRA_UPSTREAM_CLIENT=curl, which makes every upstream "curl"."""

    def native_expected(self):
        return os.environ.get("UMBRA_UPSTREAM_CLIENT") != "curl"

    def test_log_names_the_client_of_each_server(self):
        with Origin() as o:
            host_url = o.url.replace("127.0.0.1", "localhost")
            with Umbra("""
upstreams = {
  ip = { servers = { "%(ip)s", "%(host)s" } },
  forced = { servers = { "%(ip)s" }, client = "curl" },
}
routes = { { path = "/", upstream = "ip" } }
""" % {"ip": o.url, "host": host_url}) as u:
                n = 1 if self.native_expected() else 0
                self.assertIn("upstream ip: %d server(s) through Umbra's HTTP/1.1 client, %d "
                              "through libcurl" % (n, 2 - n), u.log())
                self.assertIn("upstream forced: 0 server(s) through Umbra's HTTP/1.1 client, "
                              "1 through libcurl", u.log())
                # Both servers of "ip" answer the same (round robin: both get used).
                for i in range(4):
                    r = fetch(u.port, req("/both%d?size=100" % i))
                    self.assertEqual((r.status, r.body), (200, origin_body(100)))
                self.assertEqual(len([r for r in o.records() if r[1].startswith("/both")]), 4)

    def test_bad_client_value_names_file_and_line(self):
        if not self.native_expected():
            self.skipTest("UMBRA_UPSTREAM_CLIENT replaces the value under test")
        with Umbra('upstreams = {\n  app = {\n    servers = { "http://127.0.0.1:1" },\n'
                   '    client = "fast",\n  },\n}\nroutes = { { path = "/", upstream = "app" } }\n',
                   expect_fail=True) as u:
            self.assertRegex(u.log(), r'config\.lua:\d+: .*client.*"auto" or "curl"')

    def test_connections_are_reused(self):
        with Origin() as o, Umbra('upstreams = { app = { servers = { "%s" } } }\n'
                                  'routes = { { path = "/", upstream = "app", cache = false } }'
                                  % o.url, workers=1) as u:
            before = o.stats()["accepted"]
            for i in range(30):
                r = fetch(u.port, req("/reuse%d?size=2000" % i))
                self.assertEqual((r.status, r.body), (200, origin_body(2000)))
            # One connection to the origin for 30 requests from 30 client connections (and
            # one for the second /__stats query).
            self.assertEqual(o.stats()["accepted"] - before, 1 + 1)

    def test_reused_connection_closed_by_server_is_retried_unseen(self):
        s = OneAnswerServer()
        try:
            with Umbra('upstreams = { app = { servers = { "%s" }, retries = 0, max_fails = 1 } }\n'
                       'routes = { { path = "/", upstream = "app", cache = false } }'
                       % s.url, workers=1) as u:
                mark = len(u.log())
                for i in range(5):
                    r = fetch(u.port, req("/again%d" % i))
                    self.assertEqual((r.status, r.body), (200, b"ok\n"))
                # Each request after the first found its kept connection closed, and was
                # sent again on a new one: no error, no server taken out.
                self.assertEqual(s.answered, 5)
                self.assertEqual(s.accepted, 5)
                self.assertNotRegex("\n".join(new_lines(u, mark)), r"\[(error|warn)")
        finally:
            s.close()

    def test_post_on_reused_connection_closed_by_server_is_not_resent(self):
        # RFC 9110 section 9.2.2: the server may have acted on it. (libcurl resends any
        # request in this case, by its own rule: this is Umbra's client only.)
        if not self.native_expected():
            self.skipTest("libcurl resends it")
        s = OneAnswerServer()
        try:
            with Umbra('upstreams = { app = { servers = { "%s" }, retries = 0, max_fails = 5 } }\n'
                       'routes = { { path = "/", upstream = "app", cache = false } }'
                       % s.url, workers=1) as u:
                r = fetch(u.port, req("/first"))
                self.assertEqual((r.status, r.body), (200, b"ok\n"))
                r = fetch(u.port, req("/form", method="POST", body=b"a=1"))
                self.assertEqual(r.status, 502)
                self.assertEqual((s.accepted, s.answered), (1, 1))
                r = fetch(u.port, req("/third"))
                self.assertEqual((r.status, r.body), (200, b"ok\n"))
        finally:
            s.close()

    def test_response_closed_by_server_is_not_reused(self):
        with Origin() as o, Umbra('upstreams = { app = { servers = { "%s" } } }\n'
                                  'routes = { { path = "/", upstream = "app", cache = false } }'
                                  % o.url, workers=1) as u:
            before = o.stats()["accepted"]
            for i in range(3):
                r = fetch(u.port, req("/cl%d?size=10&close=1" % i))
                self.assertEqual((r.status, r.body), (200, origin_body(10)))
            for i in range(3):
                r = fetch(u.port, req("/nl%d?size=10&nolength=1" % i))
                self.assertEqual((r.status, r.body), (200, origin_body(10)))
            # Connection: close and a close-delimited body end their connections (and one
            # more for the second /__stats query).
            self.assertEqual(o.stats()["accepted"] - before, 6 + 1)


class BalanceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = class_context(cls, Origin())
        cls.b = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra("""
upstreams = {
  rr = { servers = { "%(a)s", "%(b)s" }, balance = "round_robin" },
  hashed = { servers = { "%(a)s", "%(b)s" }, balance = "hash" },
  lc = { servers = { "%(a)s", "%(b)s" }, balance = "least_conn" },
}
routes = {
  { path = "/rr/", upstream = "rr" },
  { path = "/hash/", upstream = "hashed" },
  { path = "/lc/", upstream = "lc" },
}
""" % {"a": cls.a.url, "b": cls.b.url}))
        cls.port = cls.umbra.port

    def port_of(self, target, **kw):
        r = fetch(self.port, req(target, **kw))
        self.assertEqual(r.status, 200)
        return int(r.header("X-Origin-Port"))

    def test_round_robin_spreads_evenly(self):
        ports = [self.port_of("/rr/%d" % i) for i in range(20)]
        for o in (self.a, self.b):
            self.assertTrue(8 <= ports.count(o.port) <= 12, ports)

    def test_hash_is_sticky(self):
        for path in ("/hash/one", "/hash/two?x=1", "/hash/three/four"):
            ports = {self.port_of(path) for _ in range(8)}
            self.assertEqual(len(ports), 1, path)
        # ... and different URLs do not all land on one server.
        ports = {self.port_of("/hash/spread%d" % i) for i in range(24)}
        self.assertEqual(ports, {self.a.port, self.b.port})

    def test_least_conn_prefers_idle_server(self):
        slow = []
        try:
            for i in range(2):
                # The first slow request picks a server; wait until it is there.
                s = connect(self.port, timeout=10)
                s.sendall(req("/lc/hold%d?delay=2000" % i))
                slow.append(s)
                target = "/lc/hold%d?delay=2000" % i
                self.assertTrue(wait_until(lambda: any(
                    r[1] == target for o in (self.a, self.b) for r in o.records()), timeout=2))
                if i == 0:
                    busy = self.a if any(r[1] == target for r in self.a.records()) else self.b
                    idle = self.b if busy is self.a else self.a
                    # With one request held on busy, the next ones go to idle.
                    for j in range(6):
                        self.assertEqual(self.port_of("/lc/fast%d" % j), idle.port)
        finally:
            for s in slow:
                s.close()


# -- HTTPS backends ----------------------------------------------------------------------

class TlsTest(unittest.TestCase, UpstreamAssertions):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="umbra-tls-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.cert, cls.key = make_cert(cls.dir)
        cls.origin = class_context(cls, Origin(tls=(cls.cert, cls.key)))
        cls.umbra = class_context(cls, Umbra("""
upstreams = {
  withca = { servers = { "%(url)s" }, tls = { ca = "%(ca)s" } },
  strict = { servers = { "%(url)s" }, tls = { verify = true }, retries = 0 },
  loose = { servers = { "%(url)s" }, tls = { verify = false } },
}
routes = {
  { path = "/withca/", upstream = "withca" },
  { path = "/strict/", upstream = "strict" },
  { path = "/loose/", upstream = "loose" },
}
""" % {"url": cls.origin.url, "ca": cls.cert}))
        cls.port = cls.umbra.port

    def test_ca_verifies(self):
        r = fetch(self.port, req("/withca/x?size=300000"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, origin_body(300000))
        r = fetch(self.port, req("/withca/echo-tls?echo=1", method="POST", body=b"secret"))
        line, fields, body = echoed(r)
        self.assertEqual(line, "POST /withca/echo-tls?echo=1 HTTP/1.1")
        self.assertEqual(body, b"secret")
        self.assertEqual(values(fields, "X-Forwarded-Proto"), ["http"])

    def test_verify_without_ca_502(self):
        mark = len(self.umbra.log())
        r = fetch(self.port, req("/strict/x"))
        self.assertEqual(r.status, 502)
        self.assertOneErrorLine(self.umbra, mark, "strict", self.origin.url)
        self.assertEqual([r for r in self.origin.records() if r[1] == "/strict/x"], [])

    def test_verify_false_200(self):
        r = fetch(self.port, req("/loose/x?size=1000"))
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, origin_body(1000))


# -- a slow reader -----------------------------------------------------------------------

class SlowReaderTest(unittest.TestCase):
    SIZE = 200 << 20

    def test_slow_reader_does_not_buffer_the_body(self):
        pattern = origin_body((1 << 20) + 16)
        with Origin() as o, Umbra('upstreams = { app = { servers = { "%s" } } }\n'
                                  'routes = { { path = "/", upstream = "app" } }' % o.url) as u:
            self.assertEqual(fetch(u.port, req("/warm?size=100000")).status, 200)
            idle = vm_rss_kb(u.proc.pid)
            with connect(u.port, timeout=30) as s:
                s.sendall(req("/big?size=%d" % self.SIZE))
                time.sleep(3)
                grown = vm_rss_kb(u.proc.pid) - idle
                self.assertLess(grown, 64 << 10, "umbra grew by %d kB behind a client that "
                                "read nothing for 3 s" % grown)
                # Now read everything: the body arrives whole.
                buf = bytearray()
                while b"\r\n\r\n" not in buf:
                    chunk = s.recv(65536)
                    self.assertTrue(chunk, "closed before the head")
                    buf += chunk
                end = buf.index(b"\r\n\r\n") + 4
                r = parse_response(bytes(buf[:end]), head=True)
                self.assertEqual(r.status, 200)
                if r.header("Content-Length") is not None:
                    self.assertEqual(int(r.header("Content-Length")), self.SIZE)
                chunked = "chunked" in (r.header("Transfer-Encoding") or "").lower()
                got = self._read_body(s, bytes(buf[end:]), chunked, pattern)
                self.assertEqual(got, self.SIZE)
                self.assertLess(vm_rss_kb(u.proc.pid) - idle, 64 << 10)

    def _read_body(self, s, first, chunked, pattern):
        """Reads the body, checking it against the origin's pattern; returns its length."""
        if chunked:
            data = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            data += first
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            body = parse_response(bytes(data)).body
            self.assertEqual(body, origin_body(len(body)))
            return len(body)
        off = 0
        view = memoryview(bytearray(1 << 20))
        pending = first
        while off < self.SIZE:
            if pending:
                n = len(pending)
                view[:n] = pending
                pending = b""
            else:
                n = s.recv_into(view)
                if not n:
                    break
            start = off % 16
            self.assertEqual(view[:n], pattern[start:start + n], "body differs at %d" % off)
            off += n
        return off


# -- passive health: a server comes back -------------------------------------------------

class HealthRecoveryTest(unittest.TestCase):
    """A server taken out by passive health is left alone for fail_timeout, then tried
    again; once it answers, it gets its share of the traffic again."""

    FAIL_TIMEOUT = 4  # seconds; generous, so that the windows below hold on a loaded machine

    def test_server_back_after_fail_timeout_gets_traffic_again(self):
        b_port = closed_port()
        b_url = "http://127.0.0.1:%d" % b_port
        with Origin() as a, Umbra("""
upstreams = { app = { servers = { "%s", "%s" }, retries = 1, max_fails = 1, fail_timeout = %d } }
routes = { { path = "/", upstream = "app" } }
""" % (a.url, b_url, self.FAIL_TIMEOUT)) as u:
            taken_out = "server %s failed" % b_url
            n = [0]

            def get():
                """One GET; returns (its target, the port of the server that answered,
                when it was sent, when its answer was complete)."""
                n[0] += 1
                target = "/back%d" % n[0]
                sent = time.monotonic()
                r = fetch(u.port, req(target))
                self.assertEqual(r.status, 200, "%s: %r" % (target, r))
                return target, int(r.header("X-Origin-Port")), sent, time.monotonic()

            def outs():
                return len([line for line in u.log().splitlines() if taken_out in line])

            # B refuses connections: one failure takes it out; the retry goes to A.
            t_first = time.monotonic()
            for _ in range(10):
                _, port, _, _ = get()
                self.assertEqual(port, a.port)
                if wait_until(lambda: outs() >= 1, timeout=0.5):
                    break
            self.assertEqual(outs(), 1, "B never taken out:\n" + u.log())

            # Still down after fail_timeout: it is tried again (and taken out again), not
            # before. B's down_until was set after t_first, so the second failure comes no
            # sooner than t_first + FAIL_TIMEOUT.
            deadline = time.monotonic() + self.FAIL_TIMEOUT + 15
            while outs() < 2 and time.monotonic() < deadline:
                _, port, _, _ = get()
                self.assertEqual(port, a.port)
                wait_until(lambda: outs() >= 2, timeout=0.2)
            self.assertEqual(outs(), 2, "B not tried again after fail_timeout:\n" + u.log())
            self.assertGreaterEqual(time.monotonic() - t_first, self.FAIL_TIMEOUT,
                                    "B tried again before fail_timeout")

            # B comes up while it is out. Its second down_until is at least t_first +
            # 2 * FAIL_TIMEOUT: every request answered before that goes to A (B, listening,
            # would record one sent to it); then B gets traffic again.
            release_port(b_port)
            with Origin(args=["-l", "127.0.0.1:%d" % b_port]) as b:
                first_b = None
                deadline = time.monotonic() + 2 * self.FAIL_TIMEOUT + 15
                still_out = []
                while time.monotonic() < deadline:
                    target, port, sent, done = get()
                    if done < t_first + 2 * self.FAIL_TIMEOUT:
                        still_out.append((target, port))
                    if port == b.port:
                        first_b = target
                        break
                    time.sleep(0.1)
                self.assertTrue(still_out, "no request while B was out: the machine is too "
                                "slow for FAIL_TIMEOUT = %d" % self.FAIL_TIMEOUT)
                self.assertEqual([t for t, p in still_out if p != a.port], [],
                                 "B had traffic before fail_timeout ended")
                self.assertIsNotNone(first_b, "B back but never given a request:\n" + u.log())
                # Back in the rotation: round robin gives it every other request.
                ports = [get()[1] for _ in range(6)]
                self.assertEqual(ports.count(b.port), 3, ports)
                self.assertEqual(ports.count(a.port), 3, ports)
                self.assertEqual(len(b.records()), 4, b.records())
                self.assertEqual(outs(), 2, "B taken out again:\n" + u.log())


# -- passive health never leaves a group with nowhere to go ------------------------------

class PanicRoutingTest(unittest.TestCase):
    """Issue #26: an upstream of one server went dark for fail_timeout after three dropped
    connections (every request a 502 untried). The only server of a group is never taken
    out, and when every server of a group is out, a request goes to the one whose time out
    ends first."""

    def test_bug_one_server_group_never_goes_dark(self):
        with Origin() as o, Umbra("""
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s" }, retries = 0, max_fails = 3, fail_timeout = 30 } }
routes = { { path = "/", upstream = "app" } }
""" % o.url, workers=1) as u:
            # The origin closes five connections without answering: each is tried (the
            # origin sees it) and answered 502.
            for i in range(5):
                r = fetch(u.port, req("/drop%d?drop=head" % i))
                self.assertEqual(r.status, 502, "drop %d: %r" % (i, r))
            seen = [rec[1] for rec in o.records() if "drop=head" in rec[1]]
            self.assertEqual(len(seen), 5, "requests answered 502 untried: origin saw %r" % seen)
            # Then it answers again: the next request is served.
            r = fetch(u.port, req("/after"))
            self.assertEqual(r.status, 200, "%r\n%s" % (r, u.log()))
            self.assertNotIn("in a row", u.log(), "the only server was taken out")
            # The failures still count in the metrics.
            metrics = scrape(u)
            errors = [line for line in metrics.splitlines()
                      if line.startswith("umbra_upstream_errors_total{") and o.url in line]
            self.assertEqual(len(errors), 1, metrics)
            self.assertEqual(int(float(errors[0].split()[-1])), 5, errors[0])
            up = [line for line in metrics.splitlines()
                  if line.startswith("umbra_upstream_server_up{") and o.url in line]
            self.assertEqual([line.split()[-1] for line in up], ["1"], up)

    def test_bug_every_server_out_goes_to_the_first_back(self):
        ports = [closed_port(), closed_port()]
        urls = ["http://127.0.0.1:%d" % p for p in ports]
        with Umbra("""
upstreams = { app = { servers = { "%s", "%s" }, retries = 1, max_fails = 1, fail_timeout = 60 } }
routes = { { path = "/", upstream = "app" } }
""" % tuple(urls), workers=1) as u:
            # Both refuse: the request tries one, then the other; each is taken out.
            r = fetch(u.port, req("/both"))
            self.assertEqual(r.status, 502, r)
            outs = u.log_lines("in a row", 2)
            self.assertEqual(len(outs), 2, u.log())
            first = 0 if urls[0] in outs[0] else 1
            self.assertIn(urls[first], outs[0])
            self.assertIn(urls[1 - first], outs[1])
            # Both come back while passive health still has them out for a minute: the next
            # requests go to the one taken out first (its time out ends first), and it is
            # back in the rotation once it answers.
            for p in ports:
                release_port(p)
            with Origin(args=["-l", "127.0.0.1:%d" % ports[0]]) as a, \
                    Origin(args=["-l", "127.0.0.1:%d" % ports[1]]) as b:
                r = fetch(u.port, req("/panic"))
                self.assertEqual(r.status, 200, "%r\n%s" % (r, u.log()))
                self.assertEqual(int(r.header("X-Origin-Port")), ports[first])
                got = [fetch(u.port, req("/next%d" % i)) for i in range(4)]
                self.assertEqual([g.status for g in got], [200] * 4)
                self.assertEqual({int(g.header("X-Origin-Port")) for g in got}, {ports[first]},
                                 "the other server is still out: only the first back is used")
                self.assertEqual(len((a, b)[1 - first].records()), 0)


if __name__ == "__main__":
    unittest.main()
