"""HTTP/2 to upstreams (upstreams.NAME.protocol = "h2", src/upstream/h2.c): nghttpd serving
files through Umbra with the right bytes (prior knowledge, and TLS with ALPN), many requests sharing few connections, the cache
in front, and a scripted HTTP/2 origin of this file's own (the h2 module over raw sockets)
that sends GOAWAY in the middle of a load, resets and refuses streams, and sends a large
body to a client that does not read (flow control: Umbra holds a bounded amount).

Needs nghttpd (Debian nghttp2-server) and python3-h2 (third_party/install.sh).
UMBRA_H2UP_PROTOCOL=h1 runs the same tests with HTTP/1.1 to the servers: they fail, which
shows that they test HTTP/2.
"""

# Every Umbra here runs one worker: the tests count the connections a worker opens.
import gzip
import hashlib
import os
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import need_debian_python  # noqa: E402

need_debian_python("h2.config")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.errors  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402

from umbra_harness import (Umbra, closed_port, connect, fetch_req, free_port,  # noqa: E402
                           h2_call, make_cert, parse_response, vm_rss_kb, wait_until)

PROTOCOL = os.environ.get("UMBRA_H2UP_PROTOCOL", "h2")


def body_for(key, size):
    """size deterministic bytes named by key."""
    seed = hashlib.sha256(key.encode()).digest()
    out = bytearray()
    block = 0
    while len(out) < size:
        out += hashlib.sha256(seed + block.to_bytes(8, "big")).digest() * 32
        block += 1
    return bytes(out[:size])


def config(port, extra="", route_extra=""):
    return """
upstreams = { app = { servers = { "http://127.0.0.1:%d" }, protocol = "%s", timeout = 10 %s } }
routes = { { path = "/", upstream = "app" %s } }
""" % (port, PROTOCOL, extra, route_extra)


def parallel(fn, args, timeout=60):
    """fn(arg) for each arg, each in its thread; the results in order (an exception is
    returned as such)."""
    out = [None] * len(args)

    def run(i, a):
        try:
            out[i] = fn(a)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out[i] = e

    threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    return out


# -- a scripted HTTP/2 origin ------------------------------------------------------------

class H2Origin:
    """An HTTP/2 server with prior knowledge on 127.0.0.1, one thread per connection.

    GET /data?key=K&size=N[&delay=MS][&cache=1] answers size bytes of body_for(K) after
    delay ms; /reset resets the stream (INTERNAL_ERROR); /refuse refuses the stream
    (REFUSED_STREAM) the first time, then answers; /big?size=N sends N bytes as flow
    control allows and counts them in .sent. goaway=(n, k, answer): the first connection,
    once it has n requests, says GOAWAY with the k-th's stream id as the last, answers the
    first `answer` of those k and closes (answer=None: answers all k, then closes).
    deaf: the first connection sends nothing more (not even PING answers) once its first
    answer went. /trailers reads the whole request (its trailers in .trailers_seen), then
    answers "got N bytes" with trailers: x-origin-trailer, x-echo-NAME for each request
    trailer, and two that may not be trailers (cache-control, set-cookie).
    """

    def __init__(self, max_streams=100, goaway=None, deaf=False):
        self.max_streams = max_streams
        self.goaway = goaway
        self.deaf = deaf    # the first connection sends nothing after its first answer
        self.pings = 0
        self.eofs = 0       # connections Umbra closed
        self.lock = threading.Lock()
        self.accepts = 0
        self.requests = []  # paths, in arrival order
        self.sent = 0       # bytes of /big bodies sent
        self.received = 0   # bytes of request bodies received
        self.refused = set()
        self.trailers_seen = []  # the request trailers of /trailers requests
        self.unanswered = []  # paths of processed streams the goaway connection never answered
        self.stop = False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def close(self):
        self.stop = True
        self.sock.close()

    def _accept(self):
        while not self.stop:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepts += 1
                n = self.accepts
            threading.Thread(target=self._serve, args=(s, n), daemon=True).start()

    def _serve(self, s, nconn):
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                  header_encoding="utf-8"))
        c.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        c.initiate_connection()
        s.sendall(c.data_to_send())
        pending = {}   # stream id -> [due time, headers, body, offset]
        order = []     # stream ids in arrival order (this connection)
        paths = {}
        reads = {}     # /trailers stream id -> [body bytes, request trailers]
        goaway_here = self.goaway is not None and nconn == 1
        said_goaway = False
        first_seen = None
        mute = False
        try:
            while not self.stop:
                now = time.monotonic()
                self._send_due(c, pending, now)
                if goaway_here and not said_goaway and order and (
                        len(order) >= self.goaway[0] or now - first_seen > 3):
                    said_goaway = True
                    k = min(self.goaway[1], len(order))
                    last = order[k - 1]
                    # Written by hand: the h2 module sends nothing more after its own GOAWAY,
                    # where a server answers the streams up to the last it names.
                    s.sendall(c.data_to_send())
                    s.sendall(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" +
                              last.to_bytes(4, "big") + b"\x00\x00\x00\x00")
                    keep = order[:k] if self.goaway[2] is None else order[:self.goaway[2]]
                    for sid in list(pending):
                        if sid not in keep:
                            del pending[sid]
                    with self.lock:
                        self.unanswered += [paths[sid] for sid in order[len(keep):k]]
                    for sid in keep:
                        pending[sid][0] = now
                    self._send_due(c, pending, now)
                out = c.data_to_send()
                if out and not mute:
                    s.sendall(out)
                if self.deaf and nconn == 1 and order and not pending:
                    mute = True
                if said_goaway and not pending:
                    # Closed after the last answer, reading what is left so that the
                    # answers are not lost to a reset.
                    s.shutdown(socket.SHUT_WR)
                    s.settimeout(2)
                    while s.recv(65536):
                        pass
                    return
                wait = 0.05
                r, _, _ = select.select([s], [], [], wait)
                if not r:
                    continue
                data = s.recv(65536)
                if not data:
                    with self.lock:
                        self.eofs += 1
                    return
                for ev in c.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        path = dict(ev.headers)[":path"]
                        with self.lock:
                            self.requests.append(path)
                        paths[ev.stream_id] = path
                        order.append(ev.stream_id)
                        if first_seen is None:
                            first_seen = time.monotonic()
                        if goaway_here and said_goaway:
                            continue
                        if path.startswith("/trailers"):
                            reads[ev.stream_id] = [0, []]
                            continue
                        self._request(c, ev.stream_id, path, pending, goaway_here)
                    elif isinstance(ev, h2.events.TrailersReceived) and ev.stream_id in reads:
                        reads[ev.stream_id][1] = list(ev.headers)
                    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in reads:
                        got, trailers = reads.pop(ev.stream_id)
                        with self.lock:
                            self.trailers_seen.append(trailers)
                        c.send_headers(ev.stream_id, [(":status", "200"),
                                                      ("cache-control", "max-age=60")])
                        c.send_data(ev.stream_id, b"got %d bytes" % got)
                        c.send_headers(ev.stream_id, [("x-origin-trailer", "done")] +
                                       [("x-echo-" + k, v) for k, v in trailers] +
                                       [("cache-control", "no-store"), ("set-cookie", "a=b")],
                                       end_stream=True)
                    elif isinstance(ev, h2.events.DataReceived):
                        if ev.stream_id in reads:
                            reads[ev.stream_id][0] += len(ev.data)
                        # /sink never gives back its window: the upload stalls.
                        if not paths.get(ev.stream_id, "").startswith("/sink"):
                            c.acknowledge_received_data(ev.flow_controlled_length,
                                                        ev.stream_id)
                        with self.lock:
                            self.received += ev.flow_controlled_length
                    elif isinstance(ev, h2.events.PingReceived):
                        with self.lock:
                            self.pings += 1
                    elif isinstance(ev, h2.events.StreamReset):
                        pending.pop(ev.stream_id, None)
                out = c.data_to_send()
                if out and not mute:
                    s.sendall(out)
        except (OSError, h2.exceptions.ProtocolError):
            pass
        finally:
            s.close()

    def _request(self, c, sid, path, pending, hold):
        base, _, query = path.partition("?")
        q = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        if base == "/sink":
            return  # no answer: the test gives up first
        if base == "/reset":
            c.reset_stream(sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
            return
        if base == "/refuse":
            with self.lock:
                first = path not in self.refused
                self.refused.add(path)
            if first:
                c.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
                return
        size = int(q.get("size", "100"))
        headers = [(":status", "200"), ("content-type", q.get("type", "application/octet-stream"))]
        if base == "/big":
            body = None
        else:
            body = body_for(q.get("key", path), size)
            headers.append(("content-length", str(size)))
        headers.append(("cache-control", "max-age=60" if q.get("cache") else "no-store"))
        due = time.monotonic() + int(q.get("delay", "0")) / 1000.0
        pending[sid] = [float("inf") if hold else due, headers, body, 0, size]

    def _send_due(self, c, pending, now):
        for sid in list(pending):
            p = pending[sid]
            if p[0] > now:
                continue
            if p[1] is not None:
                c.send_headers(sid, p[1])
                p[1] = None
            size = p[4]
            while p[3] < size:
                room = min(c.local_flow_control_window(sid), c.max_outbound_frame_size,
                           size - p[3])
                if room <= 0:
                    break
                chunk = p[2][p[3]:p[3] + room] if p[2] is not None else b"x" * room
                c.send_data(sid, chunk)
                p[3] += room
                if p[2] is None:
                    with self.lock:
                        self.sent += room
            if p[3] >= size:
                c.end_stream(sid)
                del pending[sid]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def get(port, path, timeout=20):
    return fetch_req(port, path, timeout=timeout)


# -- trailers ---------------------------------------------------------------------------------

def h1_chunked_call(port, path, chunks, trailers, method="POST", timeout=10):
    """One HTTP/1.1 request with a chunked body and a trailer section, read to the close:
    (status, head text, decoded body, trailer lines as (lower-case name, value))."""
    req = "%s %s HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nTE: trailers\r\n" \
          "Connection: close\r\n\r\n" % (method, path)
    out = req.encode()
    for ch in chunks:
        out += b"%x\r\n%s\r\n" % (len(ch), ch)
    out += b"0\r\n" + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in trailers) + b"\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(out)
    raw = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        raw += d
    s.close()
    return parse_chunked_answer(raw)


def parse_chunked_answer(raw):
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        line, _, rest = rest.partition(b"\r\n")
        n = int(line.split(b";")[0], 16)
        if n == 0:
            break
        body += rest[:n]
        rest = rest[n + 2:]
    tail = []
    while True:
        line, _, rest = rest.partition(b"\r\n")
        if not line:
            break
        k, _, v = line.decode().partition(":")
        tail.append((k.lower(), v.strip()))
    return status, head.decode(), body, tail


class H1ChunkedOrigin:
    """An HTTP/1.1 origin on 127.0.0.1 answering every request, read with its chunked body
    and trailers (kept in .trailers_seen), with a chunked "got N bytes" and trailers:
    X-Origin-Trailer, X-Echo-NAME for each request trailer, and Set-Cookie (which may not
    be one)."""

    def __init__(self):
        self.trailers_seen = []
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s):
        buf = b""
        s.settimeout(10)
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = s.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                got, tail = 0, []
                if b"transfer-encoding: chunked" in head.lower():
                    while True:
                        while b"\r\n" not in buf:
                            buf += s.recv(65536)
                        line, _, buf = buf.partition(b"\r\n")
                        n = int(line.split(b";")[0], 16)
                        if n == 0:
                            break
                        while len(buf) < n + 2:
                            buf += s.recv(65536)
                        got += n
                        buf = buf[n + 2:]
                    while True:
                        while b"\r\n" not in buf:
                            buf += s.recv(65536)
                        line, _, buf = buf.partition(b"\r\n")
                        if not line:
                            break
                        k, _, v = line.decode().partition(":")
                        tail.append((k.lower(), v.strip()))
                self.requests += 1
                self.trailers_seen.append(tail)
                body = b"got %d bytes" % got
                trailer = "X-Origin-Trailer: h1\r\n" + "".join(
                    "X-Echo-%s: %s\r\n" % (k, v) for k, v in tail) + "Set-Cookie: a=b\r\n"
                s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: "
                          b"X-Origin-Trailer\r\nCache-Control: max-age=60\r\n\r\n" +
                          b"%x\r\n%s\r\n0\r\n%s\r\n" % (len(body), body, trailer.encode()))
        except (OSError, ValueError):
            pass
        finally:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


class TrailersTest(unittest.TestCase):
    """Trailers both ways (issue 31): HTTP/2 <-> HTTP/2 and HTTP/1.1 chunked <-> HTTP/2,
    fields that may not be trailers refused, and a response with trailers not cached."""

    REQ_TRAILERS = [("x-checksum", "abc123"), ("content-length", "5"), ("x-note", "hi")]

    def test_h2_client_to_h2_server_both_ways(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            st, head, body, tail = h2_call(u.port, "/trailers", body=b"x" * 1000,
                                           headers=[("te", "trailers")],
                                           trailers=[("x-checksum", "abc123"), ("x-note", "hi")])
            self.assertEqual(st, 200)
            self.assertEqual(body, b"got 1000 bytes")
            self.assertEqual(o.trailers_seen, [[("x-checksum", "abc123"), ("x-note", "hi")]])
            self.assertEqual(tail, [("x-origin-trailer", "done"), ("x-echo-x-checksum", "abc123"),
                                    ("x-echo-x-note", "hi")])  # no cache-control, no set-cookie

    def test_h1_chunked_client_to_h2_server_both_ways(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            st, head, body, tail = h1_chunked_call(u.port, "/trailers", [b"a" * 300, b"b" * 200],
                                                   self.REQ_TRAILERS)
            self.assertEqual(st, 200)
            self.assertEqual(body, b"got 500 bytes")
            # Content-Length may not be a trailer: refused on the way in.
            self.assertEqual(o.trailers_seen, [[("x-checksum", "abc123"), ("x-note", "hi")]])
            self.assertEqual(tail, [("x-origin-trailer", "done"), ("x-echo-x-checksum", "abc123"),
                                    ("x-echo-x-note", "hi")])

    def test_h2_client_to_h1_chunked_server_both_ways(self):
        conf = """
upstreams = { app = { servers = { "http://127.0.0.1:%d" }, timeout = 10 } }
routes = { { path = "/", upstream = "app", cache = false } }
"""
        with H1ChunkedOrigin() as o, Umbra(conf % o.port, workers=1) as u:
            st, head, body, tail = h2_call(u.port, "/t", body=b"y" * 700,
                                           trailers=[("x-checksum", "abc123")])
            self.assertEqual(st, 200)
            self.assertEqual(body, b"got 700 bytes")
            self.assertEqual(o.trailers_seen, [[("x-checksum", "abc123")]])
            self.assertEqual(tail, [("x-origin-trailer", "h1"), ("x-echo-x-checksum", "abc123")])
            # And HTTP/1.1 chunked on both sides.
            st, head, body, tail = h1_chunked_call(u.port, "/t", [b"z" * 10], self.REQ_TRAILERS)
            self.assertEqual(body, b"got 10 bytes")
            self.assertEqual(o.trailers_seen[-1], [("x-checksum", "abc123"), ("x-note", "hi")])
            self.assertEqual(tail, [("x-origin-trailer", "h1"), ("x-echo-x-checksum", "abc123"),
                                    ("x-echo-x-note", "hi")])

    def test_a_response_with_trailers_is_not_stored(self):
        # Cacheable by its fields (max-age=60), but the cache keeps no trailers: each
        # request goes to the origin.
        with H2Origin() as o, Umbra(config(o.port), workers=1) as u:
            for _ in range(2):
                st, head, body, tail = h2_call(u.port, "/trailers?c", method="GET")
                self.assertEqual(st, 200)
                self.assertEqual(body, b"got 0 bytes")
            self.assertEqual(o.requests.count("/trailers?c"), 2)


# -- nghttpd --------------------------------------------------------------------------------

class NghttpdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="umbra-h2up-")
        cls.files = {"small.txt": b"hello over h2\n", "big.bin": body_for("big", 5 << 20),
                     "mid.bin": body_for("mid", 300000)}
        for name, data in cls.files.items():
            with open(os.path.join(cls.dir, name), "wb") as f:
                f.write(data)
        cls.port = free_port()
        cls.nghttpd = subprocess.Popen(["nghttpd", "--no-tls", "-d", cls.dir, "-a", "127.0.0.1",
                                        str(cls.port)], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)

        def up():
            try:
                socket.create_connection(("127.0.0.1", cls.port), 0.2).close()
                return True
            except OSError:
                return False
        wait_until(up, timeout=5)
        cls.umbra = Umbra(config(cls.port, route_extra=", cache = false"), workers=1)
        cls.umbra.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.umbra.__exit__(None, None, None)
        cls.nghttpd.terminate()
        cls.nghttpd.wait(5)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_files_have_the_right_bytes(self):
        for name, data in self.files.items():
            r = get(self.umbra.port, "/" + name)
            self.assertEqual(r.status, 200, name)
            self.assertEqual(r.header("Via"), "2 umbra")
            self.assertEqual(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(data).hexdigest(),
                             name)

    def test_concurrent_files(self):
        names = ["big.bin", "mid.bin", "small.txt"] * 4
        got = parallel(lambda n: get(self.umbra.port, "/" + n, timeout=30), names)
        for n, r in zip(names, got):
            self.assertNotIsInstance(r, Exception, n)
            self.assertEqual(r.status, 200, n)
            self.assertEqual(r.body, self.files[n], n)


class NghttpdTlsTest(unittest.TestCase):
    """https:// servers: TLS with "h2" chosen by ALPN."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="umbra-h2up-tls-")
        cls.cert, cls.key = make_cert(cls.dir)
        cls.files = {"small.txt": b"hello over h2 and TLS\n", "big.bin": body_for("tls", 3 << 20)}
        for name, data in cls.files.items():
            with open(os.path.join(cls.dir, name), "wb") as f:
                f.write(data)
        cls.port = free_port()
        cls.nghttpd = subprocess.Popen(["nghttpd", "-d", cls.dir, "-a", "127.0.0.1",
                                        str(cls.port), cls.key, cls.cert],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                socket.create_connection(("127.0.0.1", cls.port), 0.2).close()
                return True
            except OSError:
                return False
        wait_until(up, timeout=5)

    @classmethod
    def tearDownClass(cls):
        cls.nghttpd.terminate()
        cls.nghttpd.wait(5)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def conf(self, port, tls):
        return """
upstreams = { app = { servers = { "https://127.0.0.1:%d" }, protocol = "%s", %s } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % (port, PROTOCOL, tls)

    def test_files_over_tls(self):
        with Umbra(self.conf(self.port, 'tls = { ca = "%s" }' % self.cert), workers=1) as u:
            names = ["big.bin", "small.txt"] * 3
            got = parallel(lambda n: get(u.port, "/" + n, timeout=30), names)
            for n, r in zip(names, got):
                self.assertNotIsInstance(r, Exception, n)
                self.assertEqual(r.status, 200, n)
                self.assertEqual(r.body, self.files[n], n)

    def test_a_certificate_that_does_not_verify_gives_502(self):
        with Umbra(self.conf(self.port, ""), workers=1) as u:
            self.assertEqual(get(u.port, "/small.txt").status, 502)
            self.assertIn("1 server(s) through Umbra's HTTP/2 client", u.log())
            self.assertTrue(wait_until(lambda: "TLS handshake" in u.log(), timeout=5), u.log())

    def test_a_server_that_does_not_choose_h2_gives_502(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        ctx.set_alpn_protocols(["http/1.1"])
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(10)
        done = []

        def serve():
            try:
                conn, _ = lsock.accept()
                with ctx.wrap_socket(conn, server_side=True) as t:
                    done.append(t.selected_alpn_protocol())
                    t.settimeout(3)
                    t.recv(100)
            except OSError:
                pass
        th = threading.Thread(target=serve, daemon=True)
        th.start()
        try:
            with Umbra(self.conf(lsock.getsockname()[1], 'tls = { ca = "%s" }' % self.cert), workers=1) as u:
                r = get(u.port, "/small.txt")
                self.assertEqual(r.status, 502)
                self.assertTrue(wait_until(lambda: "did not choose h2" in u.log(), timeout=5),
                                u.log())
        finally:
            th.join(5)
            lsock.close()


# -- the scripted origin --------------------------------------------------------------------

class SharingTest(unittest.TestCase):
    def test_200_concurrent_requests_share_few_connections(self):
        with H2Origin(max_streams=100) as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            paths = ["/data?key=k%d&size=%d&delay=400" % (i, 1000 + i) for i in range(200)]
            got = parallel(lambda p: get(u.port, p), paths)
            for i, (p, r) in enumerate(zip(paths, got)):
                self.assertNotIsInstance(r, Exception, p)
                self.assertEqual(r.status, 200, p)
                self.assertEqual(r.body, body_for("k%d" % i, 1000 + i), p)
            self.assertEqual(len(o.requests), 200)
            # 100 streams a connection: 2 are enough; a connection per request is what
            # HTTP/1.1 would take (200).
            self.assertLessEqual(o.accepts, 4, "connections to the origin")

    def test_cached_the_second_time(self):
        with H2Origin() as o, Umbra(config(o.port), workers=1) as u:
            path = "/data?key=c&size=5000&cache=1"
            r1 = get(u.port, path)
            self.assertEqual(r1.status, 200)
            self.assertEqual(r1.body, body_for("c", 5000))
            r2 = get(u.port, path)
            self.assertEqual(r2.status, 200)
            self.assertEqual(r2.body, r1.body)
            self.assertIn("hit", r2.header("Cache-Status"))
            self.assertEqual(o.requests.count(path), 1)

    def test_a_post_body_reaches_the_origin(self):
        # The request body goes as DATA; the origin answers once it ended.
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            body = body_for("post", 200000)
            r = fetch_req(u.port, "/data?key=p&size=10", method="POST", body=body, timeout=20)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_for("p", 10))


class LayersTest(unittest.TestCase):
    def test_hooks_and_compression_over_h2(self):
        # They sit above the origin: the same over either protocol.
        with H2Origin() as o, Umbra(config(o.port, route_extra=""", cache = false, compress = true,
  on_response = function(req, res) res:set_header("X-Hook", tostring(res.status)) end"""), workers=1) as u:
            r = fetch_req(u.port, "/data?key=z&size=50000&type=text/plain",
                          headers=[("Accept-Encoding", "gzip")])
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("X-Hook"), "200")
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            self.assertEqual(gzip.decompress(r.body), body_for("z", 50000))
            self.assertEqual(o.accepts, 1)


class ErrorsTest(unittest.TestCase):
    def test_a_reset_stream_gives_502(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            r = get(u.port, "/reset")
            self.assertEqual(r.status, 502)
            # The connection still serves the others.
            r = get(u.port, "/data?key=a&size=10")
            self.assertEqual(r.status, 200)
            self.assertEqual(o.accepts, 1)

    def test_a_refused_stream_goes_again(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            r = get(u.port, "/refuse?key=r&size=20")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_for("r", 20))
            self.assertEqual(o.requests.count("/refuse?key=r&size=20"), 2)

    def test_goaway_streams_above_the_last_go_again(self):
        # 10 requests on the first connection; GOAWAY names the 4th; those 4 are answered,
        # the 6 above go on a new connection: every request is answered.
        with H2Origin(goaway=(10, 4, None)) as o, \
                Umbra(config(o.port, extra=", retries = 0", route_extra=", cache = false"), workers=1) as u:
            paths = ["/data?key=g%d&size=%d&delay=100" % (i, 100 + i) for i in range(10)]
            got = parallel(lambda p: get(u.port, p), paths)
            for i, (p, r) in enumerate(zip(paths, got)):
                self.assertNotIsInstance(r, Exception, p)
                self.assertEqual(r.status, 200, p)
                self.assertEqual(r.body, body_for("g%d" % i, 100 + i), p)
            # The 6 went together on one new connection.
            self.assertIn(o.accepts, (2, 3))

    def test_goaway_processed_but_unanswered_give_502(self):
        # GOAWAY names the 5th; only 3 are answered before the connection closes: the 2
        # processed but unanswered get 502 (not sent again: the server may have acted on
        # them), the 5 above the last go again and get 200.
        with H2Origin(goaway=(10, 5, 3)) as o, \
                Umbra(config(o.port, extra=", retries = 0", route_extra=", cache = false"), workers=1) as u:
            paths = ["/data?key=h%d&size=%d&delay=100" % (i, 100 + i) for i in range(10)]
            got = parallel(lambda p: get(u.port, p), paths)
            bad = sorted(p for p, r in zip(paths, got) if getattr(r, "status", None) == 502)
            ok = [p for p, r in zip(paths, got) if getattr(r, "status", None) == 200]
            self.assertEqual(bad, sorted(o.unanswered))
            self.assertEqual(len(bad), 2)
            self.assertEqual(len(ok), 8)


    def test_no_answer_in_time_gives_504(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false").replace(
                "timeout = 10", "timeout = 0.5"), workers=1) as u:
            r = get(u.port, "/data?key=t&size=10&delay=3000")
            self.assertEqual(r.status, 504)
            # The stream was given up (reset), not the connection.
            r = get(u.port, "/data?key=t&size=10")
            self.assertEqual(r.status, 200)
            self.assertEqual(o.accepts, 1)

    def test_a_server_that_is_down_gives_502(self):
        with Umbra(config(closed_port(), route_extra=", cache = false"), workers=1) as u:
            r = get(u.port, "/data?key=d&size=10")
            self.assertEqual(r.status, 502)
            self.assertIn("1 server(s) through Umbra's HTTP/2 client", u.log())


    def test_passive_health_takes_a_dead_server_out(self):
        # Two servers, one down: its connect error counts (max_fails = 1) and the request
        # goes again on the other; the dead one is then skipped.
        dead = closed_port()
        with H2Origin() as o, Umbra("""
upstreams = { app = { servers = { "http://127.0.0.1:%d", "http://127.0.0.1:%d" },
                      protocol = "%s", max_fails = 1, fail_timeout = 30 } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % (dead, o.port, PROTOCOL), workers=1) as u:
            for i in range(4):
                r = get(u.port, "/data?key=p%d&size=10" % i)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, body_for("p%d" % i, 10))
            self.assertEqual(u.log().count("failed 1 times in a row; skipped"), 1, u.log())
            self.assertEqual(len(o.requests), 4)
            self.assertEqual(o.accepts, 1)


class PingTest(unittest.TestCase):
    def test_an_idle_connection_is_pinged_and_kept(self):
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            self.assertEqual(get(u.port, "/data?key=i&size=10").status, 200)
            self.assertTrue(wait_until(lambda: o.pings >= 1, timeout=10), "no PING")
            self.assertEqual(get(u.port, "/data?key=j&size=10").status, 200)
            self.assertEqual(o.accepts, 1)
            self.assertEqual(o.eofs, 0)

    def test_a_server_that_does_not_answer_pings_is_left(self):
        with H2Origin(deaf=True) as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            self.assertEqual(get(u.port, "/data?key=i&size=10").status, 200)
            # PING after 5 s idle, no answer within 3 s: Umbra closes the connection.
            self.assertTrue(wait_until(lambda: o.eofs >= 1, timeout=15), "still open")
            self.assertGreaterEqual(o.pings, 1)
            r = get(u.port, "/data?key=k&size=10")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_for("k", 10))
            self.assertEqual(o.accepts, 2)


class FlowControlTest(unittest.TestCase):
    def test_a_client_that_does_not_read_holds_a_bounded_amount(self):
        size = 64 << 20
        with H2Origin() as o, Umbra(config(o.port, route_extra=", cache = false"), workers=1) as u:
            get(u.port, "/data?key=w&size=10")  # the connection is up
            rss0 = vm_rss_kb(u.proc.pid)
            s = connect(u.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(b"GET /big?size=%d HTTP/1.1\r\nHost: umbra.test\r\nConnection: close\r\n\r\n"
                      % size)
            data = [s.recv(65536)]
            # The client reads nothing more; what the origin could send settles.
            time.sleep(1.0)
            sent1 = o.sent
            time.sleep(1.0)
            sent2 = o.sent
            rss1 = vm_rss_kb(u.proc.pid)
            # Meanwhile the same connection carries another stream at once.
            t0 = time.monotonic()
            r = get(u.port, "/data?key=x&size=100000")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_for("x", 100000))
            self.assertLess(time.monotonic() - t0, 5)
            self.assertEqual(o.accepts, 1)
            self.assertEqual(sent1, sent2, "the origin still sends to a client that reads nothing")
            self.assertLess(sent2, 32 << 20)
            self.assertLess(rss1 - rss0, 48 << 10, "kB more held by umbra")
            # Reading again, the client gets the whole body.
            s.settimeout(60)
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                data.append(b)
            s.close()
            r = parse_response(b"".join(data))
            self.assertEqual(r.status, 200)
            self.assertEqual(len(r.body), size)
            self.assertEqual(o.sent, size)

    def test_an_upload_to_a_server_that_stalls_its_window_holds_a_bounded_amount(self):
        size = 100 << 20
        with H2Origin() as o, Umbra('limits = { max_body_bytes = "128MB" }\n' +
                                    config(o.port, route_extra=", cache = false"), workers=1) as u:
            get(u.port, "/data?key=w&size=10")
            rss0 = vm_rss_kb(u.proc.pid)
            s = connect(u.port)
            s.sendall(b"POST /sink HTTP/1.1\r\nHost: umbra.test\r\nContent-Length: %d\r\n\r\n"
                      % size)
            s.setblocking(False)
            chunk = b"u" * 65536
            sent = 0
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and sent < size:
                try:
                    sent += s.send(chunk)
                except BlockingIOError:
                    time.sleep(0.01)
            rss1 = vm_rss_kb(u.proc.pid)
            s.close()
            # The origin took its window (64 KiB) and no more; Umbra read the client's body
            # only as the stream could take it.
            self.assertIn("/sink", o.requests)
            self.assertGreater(o.received, 0)
            self.assertLessEqual(o.received, 65535)
            self.assertLess(sent, 32 << 20, "bytes the client could send")
            self.assertLess(rss1 - rss0, 48 << 10, "kB more held by umbra")


if __name__ == "__main__":
    unittest.main()
