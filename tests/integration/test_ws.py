"""Upgrade and WebSocket tunnels: a request with Connection: upgrade and Upgrade on an
upstream route is forwarded, and the backend's 101 turns both connections into one
two-way byte tunnel. A WebSocket echo backend written here (raw RFC 6455 frames) and a few
other behaviours of a backend (another protocol token, a refusal, a flood, a half-close
echo, a death) are asked through a real umbra by real clients, plain and over TLS.
Checked: what the client gets, what the backend saw, backpressure (a client that does not
read stops the backend's bytes at a bound), half-closes passed on, the silence timeout,
the metrics and the access log line."""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Umbra, class_context, closed_port, connect,  # noqa: E402
                           fetch_req, make_cert, metric, parse_metrics, recv_all,
                           sanitizer_build, scrape, tls_connect, tls_context, vm_rss_kb,
                           wait_until)

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
# ThreadSanitizer's shadow memory multiplies what an allocation costs in RSS, and
# AddressSanitizer's redzones and quarantine (freed blocks are not reused at once) add to
# it; still far below the 128 KiB per tunnel of buffers that were never given back.
RSS_FACTOR = {"tsan": 8, "asan": 6}.get(sanitizer_build(), 1)
ACCEPT = base64.b64encode(hashlib.sha1(KEY + GUID).digest())
assert ACCEPT == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 section 1.3's example


# -- RFC 6455 frames ----------------------------------------------------------------------

def frame(payload, opcode=2, mask=True):
    """One final frame; clients mask (RFC 6455 5.3)."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class FrameReader:
    """Reads frames from a socket-like object with recv."""

    def __init__(self, sock, buf=b""):
        self.sock = sock
        self.buf = buf

    def _need(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(1 << 16)
            if not d:
                raise EOFError("closed after %d of %d bytes" % (len(self.buf), n))
            self.buf += d

    def read(self):
        """(opcode, payload) of the next frame."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n, pos = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, pos = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, pos = struct.unpack("!Q", self.buf[2:10])[0], 10
        key = None
        if b1 & 0x80:
            self._need(pos + 4)
            key, pos = self.buf[pos:pos + 4], pos + 4
        self._need(pos + n)
        payload, self.buf = self.buf[pos:pos + n], self.buf[pos + n:]
        if key:
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        return b0 & 0x0F, payload


# -- the backend ----------------------------------------------------------------------------

class Backend:
    """A threaded HTTP/1.1 server on 127.0.0.1 whose answer depends on the path:

    /ws        101 websocket, then echoes each frame (a close frame closes)
    /raw       101 with the client's token, then echoes bytes
    /refuse    403 with a body (no switch)
    /flood     101, then sends 64 KiB blocks as fast as the socket takes them (.flooded)
    /halfclose 101, reads to the client's end, answers "got N" and closes
    /stall     101, then reads nothing until .unstall is set (10 s at most)
    /die       101, echoes one frame, then closes its socket
    Every request head is kept in .heads (lower-cased field names)."""

    def __init__(self, tls_cert=None, bind="127.0.0.1"):
        self.tls = None
        if tls_cert:
            import ssl
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*tls_cert)
        self.heads = []
        self.flooded = 0
        self.unstall = threading.Event()
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((bind, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.url = "%s://127.0.0.1:%d" % ("https" if tls_cert else "http", self.port)
        self.stopping = False
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping = True
        self.unstall.set()
        self.sock.close()
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass
        return False

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            c.settimeout(30)
            if self.tls:
                c = self.tls.wrap_socket(c, server_side=True)
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(4096)
                if not d:
                    return
                buf += d
            head, rest = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            fields = {}
            for line in lines[1:]:
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.strip()
            with self.lock:
                self.heads.append((method, target, fields))
            getattr(self, "_" + target.strip("/").split("?")[0], self._refuse)(c, fields, rest)
        except (OSError, EOFError):
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _switch(self, c, fields, extra=b""):
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: " +
                  fields.get("upgrade", "").encode() + b"\r\nConnection: Upgrade\r\n" + extra +
                  b"\r\n")

    def _ws(self, c, fields, rest):
        key = fields.get("sec-websocket-key", "").encode()
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self._switch(c, fields, b"Sec-WebSocket-Accept: " + acc + b"\r\n")
        r = FrameReader(c, rest)
        while True:
            op, payload = r.read()
            c.sendall(frame(payload, op, mask=False))
            if op == 8:
                return

    def _raw(self, c, fields, rest):
        self._switch(c, fields)
        if rest:
            c.sendall(rest)
        while True:
            d = c.recv(1 << 16)
            if not d:
                return
            c.sendall(d)

    def _refuse(self, c, fields, rest):
        body = b"no switching here\n"
        c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d"
                  b"\r\n\r\n%s" % (len(body), body))
        time.sleep(0.5)  # keep-alive: the connection stays until the proxy is done with it

    def _flood(self, c, fields, rest):
        self._switch(c, fields)
        block = b"f" * 65536
        c.settimeout(60)
        while not self.stopping and self.flooded < (512 << 20):
            c.sendall(block)
            with self.lock:
                self.flooded += len(block)

    def _stall(self, c, fields, rest):
        # Switches, then reads nothing until told (at most 10 s), and closes.
        self._switch(c, fields)
        self.unstall.wait(10)

    def _halfclose(self, c, fields, rest):
        self._switch(c, fields)
        n = len(rest)
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            n += len(d)
        c.sendall(b"got %d" % n)

    def _die(self, c, fields, rest):
        self._ws_once(c, fields, rest)

    def _ws_once(self, c, fields, rest):
        key = fields.get("sec-websocket-key", "").encode()
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self._switch(c, fields, b"Sec-WebSocket-Accept: " + acc + b"\r\n")
        op, payload = FrameReader(c, rest).read()
        c.sendall(frame(payload, op, mask=False))
        c.close()  # gone, as a backend that crashes


def upgrade_head(path, token="websocket", host="umbra.test", extra=""):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
            % (path, host, token, KEY.decode(), extra)).encode()


def read_head(sock, timeout=5):
    """(status line, {field: value}, bytes after the head)."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(4096)
        if not d:
            raise EOFError("closed before the head: %r" % buf)
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        fields[k.strip().lower()] = v.strip()
    return lines[0], fields, rest


def read_exactly(sock, n, timeout=10):
    sock.settimeout(timeout)
    out = b""
    while len(out) < n:
        d = sock.recv(min(1 << 16, n - len(out)))
        if not d:
            break
        out += d
    return out


def wait_eof(sock, timeout=5):
    """True when the peer's end of stream arrives within timeout (bytes before it are
    dropped)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(1 << 16):
                return True
    except (socket.timeout, ConnectionResetError):
        return False
    return False


CONFIG = """
upstreams = { app = { servers = { "%(url)s" } }, other = { servers = { "%(other)s" } } }
routes = {
  { path = "/hooked/", upstream = "app", on_request = function(req)
      if req.headers["upgrade"] then return umbra.respond(403, "no tunnels here\\n") end
    end },
  { path = "/routed/", upstream = "app", on_request = function(req)
      if req.headers["upgrade"] == "websocket" then
        req.upstream = "other"
        req.path = "/ws"
      end
    end },
  { path = "/static/", root = "www" },
  { path = "/", upstream = "app" },
}
access_log = { path = "access.log", format = "json" }
admin = { listen = "127.0.0.1:0" }
%(extra)s
"""


class TunnelTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.backend = class_context(cls, Backend())
        cls.other = class_context(cls, Backend())
        cls.umbra = class_context(cls, Umbra(
            'listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }\n' +
            'tls = { { hosts = { "localhost" }, cert = "cert.pem", key = "key.pem" } }\n' +
            CONFIG % {"url": cls.backend.url, "other": cls.other.url, "extra": ""},
            files={"www/a.txt": "a\n"},
            setup=lambda d: make_cert(d, cn="localhost", san="DNS:localhost"), raw=False))
        cls.tls_port = cls.umbra.ports[1]

    def metrics(self):
        return parse_metrics(scrape(self.umbra))

    def open_ws(self, sock, path="/ws"):
        sock.sendall(upgrade_head(path))
        status, fields, rest = read_head(sock)
        self.assertEqual(status, "HTTP/1.1 101 Switching Protocols")
        self.assertEqual(fields["upgrade"], "websocket")
        self.assertEqual(fields["connection"].lower(), "upgrade")
        self.assertEqual(fields["sec-websocket-accept"].encode(), ACCEPT)
        return FrameReader(sock, rest)

    def echo_checks(self, sock):
        r = self.open_ws(sock)
        for payload, op in ((b"hello", 1), (os.urandom(65536), 2), (b"x" * 200000, 2)):
            sock.sendall(frame(payload, op))
            self.assertEqual(r.read(), (op, payload))
        sock.sendall(frame(b"\x03\xe8bye", 8))
        self.assertEqual(r.read(), (8, b"\x03\xe8bye"))
        self.assertTrue(wait_eof(sock))

    def test_websocket_echo(self):
        with connect(self.umbra.port) as s:
            self.echo_checks(s)
        _, target, fields = self.backend.heads[-1]
        self.assertEqual(target, "/ws")
        self.assertEqual(fields["upgrade"], "websocket")
        self.assertEqual(fields["connection"].lower(), "upgrade")
        self.assertEqual(fields["sec-websocket-key"], KEY.decode())
        self.assertEqual(fields["sec-websocket-version"], "13")

    def test_websocket_echo_over_tls(self):
        with tls_connect(self.tls_port, tls_context(), "localhost") as s:
            self.echo_checks(s)
        self.assertEqual(self.backend.heads[-1][2]["x-forwarded-proto"], "https")

    def test_client_bytes_after_the_head_go_through(self):
        # A first frame sent with the request, before the 101 came back.
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/ws") + frame(b"early"))
            status, fields, rest = read_head(s)
            self.assertIn("101", status)
            self.assertEqual(FrameReader(s, rest).read(), (2, b"early"))

    def test_other_protocol_token(self):
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/raw", token="echo-proto/1"))
            status, fields, rest = read_head(s)
            self.assertIn(" 101 ", status + " ")
            self.assertEqual(fields["upgrade"], "echo-proto/1")
            s.sendall(b"ping" * 1000)
            got = rest + read_exactly(s, 4000 - len(rest))
            self.assertEqual(got, b"ping" * 1000)
        self.assertEqual(self.backend.heads[-1][2]["upgrade"], "echo-proto/1")

    def test_non_101_answer_is_an_ordinary_response(self):
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/refuse"))
            status, fields, rest = read_head(s)
            self.assertEqual(status, "HTTP/1.1 403 Forbidden")
            self.assertNotIn("upgrade", fields)
            body = rest + read_exactly(s, int(fields["content-length"]) - len(rest))
            self.assertEqual(body, b"no switching here\n")
            # The connection is still HTTP/1.1: a next request on it is answered.
            s.sendall(b"GET /static/a.txt HTTP/1.1\r\nHost: umbra.test\r\n\r\n")
            status, fields, rest = read_head(s)
            self.assertEqual(status, "HTTP/1.1 200 OK")

    def test_hook_refuses_upgrade(self):
        n = len(self.backend.heads)
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/hooked/ws"))
            status, fields, rest = read_head(s)
            self.assertEqual(status, "HTTP/1.1 403 Forbidden")
            body = rest + read_exactly(s, int(fields["content-length"]) - len(rest))
            self.assertEqual(body, b"no tunnels here\n")
        self.assertEqual(len(self.backend.heads), n)  # never reached the backend

    def test_hook_routes_upgrade_to_another_upstream(self):
        n = len(self.backend.heads)
        with connect(self.umbra.port) as s:
            r = self.open_ws(s, "/routed/chat")
            s.sendall(frame(b"routed"))
            self.assertEqual(r.read(), (2, b"routed"))
        self.assertEqual(self.other.heads[-1][1], "/ws")
        self.assertEqual(self.other.heads[-1][2]["upgrade"], "websocket")
        self.assertEqual(len(self.backend.heads), n)

    def test_upgrade_on_a_static_route_is_501(self):
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/static/a.txt"))
            status, _, _ = read_head(s)
            self.assertEqual(status, "HTTP/1.1 501 Not Implemented")

    def test_half_close_passed_on(self):
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/halfclose", token="raw"))
            status, _, rest = read_head(s)
            self.assertIn("101", status)
            s.sendall(b"z" * 300000)
            s.shutdown(socket.SHUT_WR)  # the backend only answers after our end
            self.assertEqual(rest + recv_all(s, timeout=5), b"got 300000")

    def test_backend_dying_closes_client_side(self):
        with connect(self.umbra.port) as s:
            r = self.open_ws(s, "/die")
            s.sendall(frame(b"last words"))
            self.assertEqual(r.read(), (2, b"last words"))
            self.assertTrue(wait_eof(s, 5))
        self.assertTrue(wait_until(
            lambda: metric(self.metrics(), "umbra_tunnels_active") == 0, 5))

    def test_both_sides_ending_at_once(self):
        # Regression: a tunnel whose client and backend ended in the same batch of epoll
        # events was freed while the backend's event was still to be handled (a use after
        # free that ASan caught about one run in five). Many tunnels whose backend answers
        # and closes just as the client sends and closes; then Umbra still serves.
        for _ in range(3):
            socks = []
            for _ in range(40):
                s = connect(self.umbra.port)
                self.open_ws(s, "/die")
                socks.append(s)
            for s in socks:
                s.sendall(frame(b"bye"))
            for s in socks:
                s.close()
        # The same with a backend that never stops sending (always readable) and clients
        # that reset their connection: the write to the client fails while the backend's
        # next event waits in the same batch.
        for _ in range(2):
            socks = []
            for _ in range(15):
                s = connect(self.umbra.port)
                s.sendall(upgrade_head("/flood", token="raw"))
                status, _, rest = read_head(s)
                self.assertEqual(status, "HTTP/1.1 101 Switching Protocols")
                if not rest:
                    s.recv(65536)
                socks.append(s)
            for s in socks:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
        self.assertTrue(wait_until(self._flood_settled, 10))
        with self.backend.lock:
            self.backend.flooded = 0  # the other flood tests count from here
        with connect(self.umbra.port) as s:
            self.echo_checks(s)
        self.assertTrue(wait_until(
            lambda: metric(self.metrics(), "umbra_tunnels_active") == 0, 5))

    def test_client_not_reading_is_bounded(self):
        rss0 = vm_rss_kb(self.umbra.proc.pid)
        with connect(self.umbra.port) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(upgrade_head("/flood", token="raw"))
            read_head(s)
            # The backend sends until the sockets and Umbra's buffer are full, then stops.
            time.sleep(1.0)
            settled = wait_until(lambda: self._flood_settled(), 10)
            self.assertTrue(settled, "the backend never stopped: %d bytes" % self.backend.flooded)
            stuck = self.backend.flooded
            self.assertLess(stuck, 32 << 20)
            self.assertLess(vm_rss_kb(self.umbra.proc.pid) - rss0, 8 * 1024 * RSS_FACTOR)
            # Reading again lets the backend go on.
            read_exactly(s, stuck, timeout=20)
            self.assertTrue(wait_until(lambda: self.backend.flooded > stuck + (1 << 20), 10))

    def test_backend_not_reading_is_bounded(self):
        # The other direction: a backend that does not read stops the client's bytes.
        rss0 = vm_rss_kb(self.umbra.proc.pid)
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/stall", token="raw"))
            read_head(s)
            s.setblocking(False)
            sent, block, blocked_since = 0, b"u" * 65536, None
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                try:
                    sent += s.send(block)
                    blocked_since = None
                except BlockingIOError:
                    if blocked_since is None:
                        blocked_since = time.monotonic()
                    elif time.monotonic() - blocked_since > 1.0:
                        break
                    time.sleep(0.05)
            self.assertIsNotNone(blocked_since, "the client could send forever: %d" % sent)
            self.assertLess(sent, 32 << 20)
            self.assertLess(vm_rss_kb(self.umbra.proc.pid) - rss0, 8 * 1024 * RSS_FACTOR)
        # The backend goes away without reading: the tunnel (its client gone too) ends.
        self.backend.unstall.set()
        self.assertTrue(wait_until(
            lambda: metric(self.metrics(), "umbra_tunnels_active") == 0, 5))

    def test_idle_tunnels_hold_no_buffers(self):
        # Each tunnel moves bytes both ways once, then waits: its 64 KiB buffers must have
        # gone back (RSS grows by far less than one buffer per tunnel).
        def open_some(n):
            socks = []
            for i in range(n):
                s = connect(self.umbra.port)
                s.sendall(upgrade_head("/raw", token="idle"))
                _, _, rest = read_head(s)
                s.sendall(b"x" * 1000)
                self.assertEqual(len(rest + read_exactly(s, 1000 - len(rest))), 1000)
                socks.append(s)
            return socks
        for s in open_some(20):  # the worker's pools exist before the measurement
            s.close()
        time.sleep(0.3)
        rss0 = vm_rss_kb(self.umbra.proc.pid)
        socks = open_some(300)
        try:
            time.sleep(0.3)
            grown = (vm_rss_kb(self.umbra.proc.pid) - rss0) * 1024 / len(socks)
            self.assertLess(grown, 8192 * RSS_FACTOR, "%.0f bytes per idle tunnel" % grown)
            # They are all still tunnels.
            for s in socks[::50]:
                s.sendall(b"still")
                self.assertEqual(read_exactly(s, 5), b"still")
        finally:
            for s in socks:
                s.close()

    def _flood_settled(self):
        a = self.backend.flooded
        time.sleep(0.5)
        return a > 0 and self.backend.flooded == a

    def test_metrics_and_access_log(self):
        # The tunnels of other tests are gone first.
        self.assertTrue(wait_until(
            lambda: metric(self.metrics(), "umbra_tunnels_active") == 0, 5))
        before = self.metrics()
        total0 = metric(before, "umbra_tunnels_total")
        up0 = metric(before, "umbra_tunnel_sent_bytes_total")
        with connect(self.umbra.port) as s:
            s.sendall(upgrade_head("/raw?log=1", token="logged"))
            status, _, rest = read_head(s)
            self.assertIn("101", status)
            self.assertEqual(metric(self.metrics(), "umbra_tunnels_active"), 1)
            s.sendall(b"q" * 12345)
            self.assertEqual(len(rest + read_exactly(s, 12345 - len(rest))), 12345)
            s.shutdown(socket.SHUT_WR)
            self.assertTrue(wait_eof(s))
        after = self.metrics()
        self.assertEqual(metric(after, "umbra_tunnels_total"), total0 + 1)
        self.assertGreaterEqual(metric(after, "umbra_tunnel_sent_bytes_total") - up0, 12345)
        self.assertTrue(wait_until(
            lambda: metric(self.metrics(), "umbra_tunnels_active") == 0, 5))

        def line():
            with open(self.umbra.path("access.log")) as f:
                for ln in f:
                    rec = json.loads(ln)
                    if rec["target"] == "/raw?log=1":
                        return rec
            return None
        rec = wait_until(line, 5)
        self.assertIsNotNone(rec, "no access log line for the tunnel")
        self.assertEqual(rec["status"], 101)
        self.assertEqual(rec["tunnel_up"], 12345)
        self.assertEqual(rec["tunnel_down"], 12345)
        self.assertGreater(rec["duration"], 0)


class TunnelTimeoutTests(unittest.TestCase):
    def test_silent_tunnel_is_closed(self):
        with Backend() as b, Umbra(CONFIG % {"url": b.url, "other": b.url,
                                            "extra": "timeouts = { tunnel = 1 }"},
                                   files={"www/a.txt": "a\n"}) as u:
            with connect(u.port) as s:
                s.sendall(upgrade_head("/raw", token="quiet"))
                read_head(s)
                # Traffic keeps it open past the timeout...
                for _ in range(3):
                    time.sleep(0.5)
                    s.sendall(b"tick")
                    self.assertEqual(read_exactly(s, 4), b"tick")
                # ...silence ends it.
                t0 = time.monotonic()
                self.assertTrue(wait_eof(s, 5))
                self.assertLess(time.monotonic() - t0, 4)

    def test_stop_does_not_wait_for_tunnels(self):
        # A tunnel may last for hours: SIGTERM closes it instead of waiting for it.
        with Backend() as b, Umbra(CONFIG % {"url": b.url, "other": b.url,
                                            "extra": "timeouts = { shutdown = 30 }"},
                                   files={"www/a.txt": "a\n"}) as u:
            with connect(u.port) as s:
                s.sendall(upgrade_head("/raw", token="long"))
                self.assertIn("101", read_head(s)[0])
                t0 = time.monotonic()
                self.assertEqual(u.stop(timeout=10), 0)
                self.assertLess(time.monotonic() - t0, 5)
                self.assertTrue(wait_eof(s, 2))

    def test_backend_named_by_host(self):
        # A server named by host name (whose requests libcurl carries): its upgrades go
        # through Umbra's own client to the address the name had when the upstream was
        # built. The backend listens where the system resolves "localhost" first.
        first = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)[0][4][0]
        with Backend(bind=first) as b:
            cfg = ('upstreams = { app = { servers = { "http://localhost:%d" } } }\n'
                   'routes = { { path = "/", upstream = "app" } }\n' % b.port)
            with Umbra(cfg) as u:
                self.assertIn("0 server(s) through Umbra's HTTP/1.1 client", u.log())
                with connect(u.port) as s:
                    s.sendall(upgrade_head("/ws"))
                    status, _, rest = read_head(s)
                    self.assertEqual(status, "HTTP/1.1 101 Switching Protocols")
                    s.sendall(frame(b"named", 1))
                    self.assertEqual(FrameReader(s, rest).read(), (1, b"named"))
                # Ordinary requests still go through libcurl.
                r = fetch_req(u.port, "/refuse")
                self.assertEqual(r.status, 403)
            self.assertEqual([t for _, t, _ in b.heads], ["/ws", "/refuse"])

    def test_backend_name_that_does_not_resolve_is_refused_clearly(self):
        cfg = ('upstreams = { app = { servers = { "http://no-such-host.invalid:%d" } } }\n'
               'routes = { { path = "/", upstream = "app" } }\n' % closed_port())
        with Umbra(cfg) as u:
            self.assertTrue(wait_until(lambda: "does not resolve" in u.log(), 3), u.log())
            with connect(u.port) as s:
                s.sendall(upgrade_head("/ws"))
                status, _, _ = read_head(s)
                self.assertEqual(status, "HTTP/1.1 501 Not Implemented")
            self.assertTrue(wait_until(lambda: "protocol upgrades through" in u.log(), 3))


class HttpsBackendTests(unittest.TestCase):
    """Tunnels to an https:// server at an address: Umbra's client speaks TLS to it and
    hands the TLS session over to the tunnel."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.dir = tempfile.mkdtemp(prefix="umbra-ws-")
        cls.cert = make_cert(cls.dir)  # CN and SAN 127.0.0.1
        cls.backend = class_context(cls, Backend(tls_cert=cls.cert))

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.dir, ignore_errors=True)

    def config(self, verify=True):
        return ('upstreams = { app = { servers = { "%s" }, tls = { ca = "%s", verify = %s } } }\n'
                'routes = { { path = "/", upstream = "app" } }\n'
                'admin = { listen = "127.0.0.1:0" }\n'
                % (self.backend.url, self.cert[0], "true" if verify else "false"))

    def test_websocket_echo_to_https_backend(self):
        with Umbra(self.config()) as u:
            for tls_client in (False, True):
                with connect(u.port) as s:
                    s.sendall(upgrade_head("/ws"))
                    status, fields, rest = read_head(s)
                    self.assertEqual(status, "HTTP/1.1 101 Switching Protocols")
                    self.assertEqual(fields["sec-websocket-accept"].encode(), ACCEPT)
                    r = FrameReader(s, rest)
                    for payload in (b"over tls", os.urandom(100000)):
                        s.sendall(frame(payload))
                        self.assertEqual(r.read(), (2, payload))
                    s.sendall(frame(b"", 8))
                    self.assertEqual(r.read(), (8, b""))
                    self.assertTrue(wait_eof(s))
            samples = parse_metrics(scrape(u))
            self.assertEqual(metric(samples, "umbra_tunnels_total"), 2)

    def test_https_backend_named_by_host(self):
        # Named by host name: the certificate must name that host (SNI and the name
        # checked), and one that names only the address is refused.
        import tempfile
        first = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)[0][4][0]
        d = tempfile.mkdtemp(prefix="umbra-ws-", dir=self.dir)
        for cn, san, want in (("localhost", "DNS:localhost", "HTTP/1.1 101 Switching Protocols"),
                              ("127.0.0.1", "IP:127.0.0.1,IP:::1", "HTTP/1.1 502 Bad Gateway")):
            cert = make_cert(tempfile.mkdtemp(dir=d), cn=cn, san=san)
            with Backend(tls_cert=cert, bind=first) as b:
                cfg = ('upstreams = { app = { servers = { "https://localhost:%d" }, '
                       'tls = { ca = "%s" } } }\n'
                       'routes = { { path = "/", upstream = "app" } }\n' % (b.port, cert[0]))
                with Umbra(cfg) as u, connect(u.port) as s:
                    s.sendall(upgrade_head("/ws"))
                    status, _, rest = read_head(s)
                    self.assertEqual(status, want, san)
                    if want.endswith("101 Switching Protocols"):
                        s.sendall(frame(b"by name"))
                        self.assertEqual(FrameReader(s, rest).read(), (2, b"by name"))

    def test_half_close_to_https_backend(self):
        with Umbra(self.config()) as u, connect(u.port) as s:
            s.sendall(upgrade_head("/halfclose", token="raw"))
            status, _, rest = read_head(s)
            self.assertIn("101", status)
            s.sendall(b"t" * 70000)
            s.shutdown(socket.SHUT_WR)
            self.assertEqual(rest + recv_all(s, timeout=5), b"got 70000")

    def test_non_101_from_https_backend(self):
        with Umbra(self.config()) as u, connect(u.port) as s:
            s.sendall(upgrade_head("/refuse"))
            status, fields, rest = read_head(s)
            self.assertEqual(status, "HTTP/1.1 403 Forbidden")
            body = rest + read_exactly(s, int(fields["content-length"]) - len(rest))
            self.assertEqual(body, b"no switching here\n")

    def test_unverified_certificate_is_502(self):
        # Without the CA, the backend's self-signed certificate does not verify.
        cfg = self.config().replace('ca = "%s", ' % self.cert[0], "")
        with Umbra(cfg) as u, connect(u.port) as s:
            s.sendall(upgrade_head("/ws"))
            status, _, _ = read_head(s)
            self.assertEqual(status, "HTTP/1.1 502 Bad Gateway")


def tcp_queues():
    """{(local port, remote port): (tx_queue, rx_queue)} of the established IPv4 TCP
    sockets on 127.0.0.1, from /proc/net/tcp: the bytes a socket holds unsent or unacked,
    and the bytes received that its owner has not read."""
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[3] != "01":  # ESTABLISHED
                continue
            lport = int(cols[1].split(":")[1], 16)
            rport = int(cols[2].split(":")[1], 16)
            tx, rx = (int(v, 16) for v in cols[4].split(":"))
            out[(lport, rport)] = (tx, rx)
    return out


class StillBackend:
    """Answers any upgrade request with 101 and then, on /still, never reads; on /gush,
    sends as much as its socket takes (counted in .sent) and never reads. The port Umbra
    connected from is in .peer_port."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.conns = []
        self.sent = 0
        self.peer_port = None
        self.blocked = threading.Event()
        self.stop = threading.Event()

    def _run(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                c, addr = self.sock.accept()
            except socket.timeout:
                continue
            self.conns.append(c)
            try:  # a test that failed and closed its end must not end this loop
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += c.recv(4096)
                self.peer_port = addr[1]
                c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n"
                          b"Upgrade: raw\r\n\r\n")
                if buf.startswith(b"GET /gush"):
                    self.sent = sent_until_blocked(c)
                    self.blocked.set()
            except OSError:
                pass

    def __enter__(self):
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()
        return False


def sent_until_blocked(s, quiet=0.5, limit=10):
    """Sends on s without blocking until it has taken nothing for quiet seconds; the bytes
    sent."""
    s.setblocking(False)
    block = b"t" * 65536
    sent, since = 0, None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            sent += s.send(block)
            since = None
        except BlockingIOError:
            if since is None:
                since = time.monotonic()
            elif time.monotonic() - since > quiet:
                return sent
            time.sleep(0.02)
    raise AssertionError("still sending after %d s: %d bytes" % (limit, sent))


class TunnelBufferTest(unittest.TestCase):
    """Issue #26, README: "Each direction buffers at most 64 KiB". With a peer that never
    reads, the bytes the sender got rid of are in the kernel's socket queues (which
    /proc/net/tcp shows, on both ends of both connections) or in Umbra's buffer: the
    difference is what Umbra holds."""

    @classmethod
    def setUpClass(cls):
        cls.backend = class_context(cls, StillBackend())
        cls.umbra = class_context(cls, Umbra(
            'upstreams = { app = { servers = { "%s" } } }\n'
            'routes = { { path = "/", upstream = "app" } }\n' % cls.backend.url, workers=1))

    def open(self, path):
        """The tunnel's client socket, and what it read past the 101's head (a backend that
        sends at once may have its first bytes read with the head)."""
        s = connect(self.umbra.port)
        s.sendall(upgrade_head(path, token="raw"))
        status, _, rest = read_head(s)
        self.assertEqual(status, "HTTP/1.1 101 Switching Protocols")
        return s, rest

    def held(self, sent, sender, receiver):
        """What Umbra holds of sent bytes: sender and receiver are the (local, remote)
        ports of the two outer sockets; Umbra's own are their reverse."""
        q = tcp_queues()
        for k in (sender, receiver, sender[::-1], receiver[::-1]):
            self.assertIn(k, q)
        return (sent - q[sender][0] - q[sender[::-1]][1] - q[receiver[::-1]][0]
                - q[receiver][1])

    def test_client_to_backend_at_most_64KiB(self):
        s, rest = self.open("/still")
        with s:
            self.assertEqual(rest, b"")  # this backend sends nothing
            sent = sent_until_blocked(s)
            held = self.held(sent, (s.getsockname()[1], self.umbra.port),
                             (self.backend.port, self.backend.peer_port))
        self.assertLessEqual(held, 65536)
        self.assertGreater(held, 32768)

    def test_backend_to_client_at_most_64KiB(self):
        self.backend.blocked.clear()
        s, rest = self.open("/gush")
        with s:
            self.assertTrue(self.backend.blocked.wait(15))
            self.assertEqual(rest, b"t" * len(rest))
            held = self.held(self.backend.sent - len(rest),
                             (self.backend.port, self.backend.peer_port),
                             (s.getsockname()[1], self.umbra.port))
        self.assertLessEqual(held, 65536)
        self.assertGreater(held, 32768)


if __name__ == "__main__":
    unittest.main()
