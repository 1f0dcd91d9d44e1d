"""Compression (issue #16): gzip, br and zstd on the fly, the cache's compressed variants,
precompressed static files, against the real binary.

Bodies are checked by decompressing them as a client would: gzip with Python's zlib, br
and zstd with the Debian `brotli` and `zstd` tools. The scripted test origin
(tests/origin/origin.c) answers what its query asks for (`?size=N&ct=TYPE&cc=...`), and
counts what reached it (its --record file), so the tests also check how many fills the
cache made.
"""

import ctypes
import ctypes.util
import http.server
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest
import zlib
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, connect, fetch_req, origin_body,  # noqa: E402
                           req)

JSON = "ct=application/json"


def q(value):
    return quote(value, safe="")


def decode(coding, data):
    """data decompressed the way a client would; raises when it is not a valid stream."""
    if coding == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(data) + d.flush()
        if not d.eof:
            raise ValueError("truncated gzip stream")
        return out
    tool = {"br": ["brotli", "-d", "-c"], "zstd": ["zstd", "-d", "-c", "-q"]}[coding]
    r = subprocess.run(tool, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=30)
    if r.returncode != 0:
        raise ValueError("%s failed: %r" % (tool[0], r.stderr))
    return r.stdout


class _Buf(ctypes.Structure):
    """ZSTD_inBuffer and ZSTD_outBuffer: a pointer, its size, the position reached."""
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


def _lib(name, soname):
    return ctypes.CDLL(ctypes.util.find_library(name) or soname)


class StreamDecoder:
    """Decodes a coded body piece by piece, as a browser does, giving every byte a piece
    makes decodable at once (Python's zlib; libbrotlidec and libzstd, which Umbra's own
    libraries come with, through ctypes: the Debian tools read their whole input first).
    .eof: the coded stream ended properly."""

    def __init__(self, coding):
        self.coding = coding
        self.eof = False
        if coding == "gzip":
            self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "br":
            self.lib = _lib("brotlidec", "libbrotlidec.so.1")
            self.lib.BrotliDecoderCreateInstance.restype = ctypes.c_void_p
            self.lib.BrotliDecoderCreateInstance.argtypes = [ctypes.c_void_p] * 3
            self.lib.BrotliDecoderDecompressStream.argtypes = [
                ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p),
                ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
            self.lib.BrotliDecoderDestroyInstance.argtypes = [ctypes.c_void_p]
            self.state = self.lib.BrotliDecoderCreateInstance(None, None, None)
        else:
            self.lib = _lib("zstd", "libzstd.so.1")
            self.lib.ZSTD_createDStream.restype = ctypes.c_void_p
            self.lib.ZSTD_decompressStream.restype = ctypes.c_size_t
            self.lib.ZSTD_decompressStream.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Buf),
                                                       ctypes.POINTER(_Buf)]
            self.lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
            self.lib.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
            self.state = self.lib.ZSTD_createDStream()

    def close(self):
        if self.coding == "br":
            self.lib.BrotliDecoderDestroyInstance(self.state)
        elif self.coding == "zstd":
            self.lib.ZSTD_freeDStream(self.state)
        self.coding = None

    def feed(self, data):
        """The bytes data makes decodable; raises ValueError on a corrupt stream."""
        if self.coding == "gzip":
            out = self.z.decompress(data)
            self.eof = self.z.eof
            return out
        src = ctypes.create_string_buffer(data, len(data))
        dst = ctypes.create_string_buffer(1 << 16)
        out = []
        if self.coding == "br":
            avail_in = ctypes.c_size_t(len(data))
            next_in = ctypes.c_void_p(ctypes.addressof(src))
            while True:
                avail_out = ctypes.c_size_t(len(dst))
                next_out = ctypes.c_void_p(ctypes.addressof(dst))
                rc = self.lib.BrotliDecoderDecompressStream(
                    self.state, ctypes.byref(avail_in), ctypes.byref(next_in),
                    ctypes.byref(avail_out), ctypes.byref(next_out), None)
                out.append(dst.raw[:len(dst) - avail_out.value])
                if rc == 0:
                    raise ValueError("corrupt brotli stream")
                if rc == 1:
                    self.eof = True
                if rc != 3:  # 3: it wants more room for its output
                    return b"".join(out)
        ib = _Buf(ctypes.addressof(src), len(data), 0)
        while True:
            ob = _Buf(ctypes.addressof(dst), len(dst), 0)
            rc = self.lib.ZSTD_decompressStream(self.state, ctypes.byref(ob), ctypes.byref(ib))
            if self.lib.ZSTD_isError(rc):
                raise ValueError("corrupt zstd stream")
            out.append(dst.raw[:ob.pos])
            self.eof = rc == 0
            if ib.pos == ib.size and ob.pos < ob.size:
                return b"".join(out)


def one_shot(coding, data):
    """data compressed in one call at Umbra's default level and window for a body of
    unknown length (gzip 6, br 4 with a 512 KiB window, zstd 3)."""
    if coding == "gzip":
        z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return z.compress(data) + z.flush()
    out = ctypes.create_string_buffer(len(data) + (1 << 16))
    if coding == "br":
        lib = _lib("brotlienc", "libbrotlienc.so.1")
        n = ctypes.c_size_t(len(out))
        lib.BrotliEncoderCompress.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                              ctypes.c_size_t, ctypes.c_char_p,
                                              ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
        ok = lib.BrotliEncoderCompress(4, 19, 1, len(data), data, ctypes.byref(n), out)
        assert ok
        return out.raw[:n.value]
    lib = _lib("zstd", "libzstd.so.1")
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p,
                                  ctypes.c_size_t, ctypes.c_int]
    n = lib.ZSTD_compress(out, len(out), data, len(data), 3)
    return out.raw[:n]


class ChunkedReader:
    """Reads one HTTP/1.1 response from a socket as its bytes arrive: .head (bytes), then
    body pieces from pieces() with their arrival time (chunked or close-delimited);
    .complete: the body ended with its last chunk."""

    def __init__(self, sock, timeout):
        self.sock = sock
        self.deadline = time.monotonic() + timeout
        self.buf = b""
        self.complete = False
        self.closed = False
        while b"\r\n\r\n" not in self.buf:
            if not self._recv():
                raise ConnectionError("closed before the head: %r" % self.buf[:200])
        end = self.buf.index(b"\r\n\r\n") + 4
        self.head, self.buf = self.buf[:end], self.buf[end:]
        self.chunked = b"transfer-encoding: chunked" in self.head.lower()

    def header(self, name):
        for line in self.head.decode("latin-1").split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == name.lower():
                return v.strip()
        return None

    def _recv(self):
        left = self.deadline - time.monotonic()
        if left <= 0 or self.closed:
            return False
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.buf += data
        return True

    def pieces(self):
        """Yields (time, body bytes) until the body ends, the peer closes or the time is
        up."""
        if not self.chunked:
            while True:
                if self.buf:
                    yield time.monotonic(), self.buf
                    self.buf = b""
                if not self._recv():
                    return
        while True:
            while b"\r\n" not in self.buf:
                if not self._recv():
                    return
            line, rest = self.buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.complete = True
                return
            while len(rest) < size + 2:
                self.buf = line + b"\r\n" + rest
                if not self._recv():
                    return
                line, rest = self.buf.split(b"\r\n", 1)
            self.buf = rest[size + 2:]
            yield time.monotonic(), rest[:size]


def upstream(url, compress="compress = true", routes=""):
    return """
%s
upstreams = { app = { servers = { "%s" } } }
routes = { %s
  { path = "/nc/", upstream = "app", cache = false },
  { path = "/", upstream = "app" } }
""" % (compress, url, routes)


def get(port, target, ae=None, method="GET", headers=()):
    h = list(headers)
    if ae is not None:
        h.append(("Accept-Encoding", ae))
    return fetch_req(port, target, method=method, headers=h)


def seen(o, path):
    """How many requests for path (any query) reached the origin."""
    return sum(1 for _, t, _ in o.records() if t.split("?")[0] == path)


class OnTheFlyTest(unittest.TestCase):
    """An uncached upstream route: compressed as the bytes arrive, sent chunked."""

    @classmethod
    def setUpClass(cls):
        cls.origin = Origin().__enter__()
        cls.umbra = Umbra(upstream(cls.origin.url)).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.umbra.__exit__(None, None, None)
        cls.origin.__exit__(None, None, None)

    def check_coded(self, r, coding, size):
        self.assertEqual(r.status, 200, r.raw_head)
        self.assertEqual(r.header("Content-Encoding"), coding, r.raw_head)
        self.assertIn("accept-encoding", (r.header("Vary") or "").lower())
        self.assertLess(len(r.body), size // 4)
        self.assertEqual(decode(coding, r.body), origin_body(size))

    def test_each_coding_streams_chunked(self):
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding):
                r = get(self.umbra.port, "/nc/a?size=200000&" + JSON, coding)
                self.check_coded(r, coding, 200000)
                self.assertIsNone(r.header("Content-Length"), r.raw_head)
                self.assertEqual((r.header("Transfer-Encoding") or "").lower(), "chunked")

    def test_slow_origin_body_compressed_as_it_arrives(self):
        # Ten pieces 150 ms apart: the client decodes each one while the origin still
        # sends, not all of them at the end (where a body this compressible would stay in
        # the encoder's block until it ended).
        size, piece = 300000, 30000
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding), connect(self.umbra.port, 30) as sock:
                sock.sendall(req("/nc/slow?size=%d&slow=150&piece=%d&chunked=1&%s"
                                 % (size, piece, JSON), headers=[("Accept-Encoding", coding)]))
                rd = ChunkedReader(sock, 30)
                self.assertEqual(rd.header("Content-Encoding"), coding, rd.head)
                dec, got, reached = StreamDecoder(coding), b"", []
                for t, data in rd.pieces():
                    got += dec.feed(data)
                    while len(reached) < size // piece and len(got) >= (len(reached) + 1) * piece:
                        reached.append(t)  # when piece k was whole at the client
                dec.close()
                self.assertTrue(rd.complete and dec.eof, "the body did not end properly")
                self.assertEqual(got, origin_body(size))
                apart = sum(1 for a, b in zip(reached, reached[1:]) if b - a >= 0.05)
                self.assertGreaterEqual(apart, 7, "pieces decoded at %r" % [
                    round(t - reached[0], 3) for t in reached])

    def test_fast_body_ratio_not_spoiled_by_flushes(self):
        # A large body arriving at full speed runs dry seldom: flushing only then must
        # leave its compression about as good as the library's in one go.
        size = 1000000
        plain = get(self.umbra.port, "/nc/ratio?size=%d&json=1&chunked=1" % size).body
        self.assertEqual(len(plain), size)
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding):
                r = get(self.umbra.port, "/nc/ratio?size=%d&json=1&chunked=1" % size, coding)
                self.assertEqual(r.header("Content-Encoding"), coding, r.raw_head)
                self.assertEqual(decode(coding, r.body), plain)
                ref = one_shot(coding, plain)
                self.assertLess(len(r.body), len(ref) * 1.05,
                                "%d bytes, %d in one go" % (len(r.body), len(ref)))

    def test_q_values_choose(self):
        cases = [
            ("gzip;q=1, br;q=0.5", "gzip"),
            ("br;q=0.5, gzip;q=0.9, zstd;q=0.1", "gzip"),
            ("gzip, br", "br"),                  # equal q: the server's order
            ("gzip, deflate, br, zstd", "zstd"),
            ("*", "zstd"),
            ("br;q=0, *", "zstd"),
            ("zstd;q=0, br;q=0, *;q=0.5", "gzip"),
            ("GZIP", "gzip"),
            ("x-gzip", "gzip"),
            ("gzip;q=0.5, identity", None),      # identity preferred
            ("br;q=0", None),
            ("*;q=0", None),
            ("identity;q=0", None),              # nothing else acceptable: identity anyway
            ("deflate", None),
            ("", None),
        ]
        for ae, want in cases:
            with self.subTest(ae=ae):
                r = get(self.umbra.port, "/nc/q?size=5000&" + JSON, ae)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("Content-Encoding"), want, r.raw_head)
                body = decode(want, r.body) if want else r.body
                self.assertEqual(body, origin_body(5000))

    def test_no_accept_encoding_is_identity_with_vary(self):
        r = get(self.umbra.port, "/nc/none?size=5000&" + JSON)
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertEqual(r.body, origin_body(5000))
        self.assertIn("accept-encoding", (r.header("Vary") or "").lower())

    def test_malformed_accept_encoding_gives_identity(self):
        for ae in ("gzip;q=abc", "gzip;q=2", "gzip;q=0.5000", "gz ip", "br;q=1;x=y",
                   "gzip;level=3"):
            with self.subTest(ae=ae):
                r = get(self.umbra.port, "/nc/bad?size=5000&" + JSON, ae)
                self.assertEqual(r.status, 200)
                self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
                self.assertEqual(r.body, origin_body(5000))

    def test_no_transform_left_alone(self):
        r = get(self.umbra.port, "/nc/nt?size=5000&cc=%s&%s" % (q("no-transform"), JSON), "gzip")
        self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
        self.assertEqual(r.body, origin_body(5000))

    def test_existing_content_encoding_left_alone(self):
        raw = zlib.compress(b"x" * 5000)
        r = get(self.umbra.port, "/nc/ce?header=%s&%s&body=%s"
                % (q("Content-Encoding:deflate"), JSON, q(raw.decode("latin-1"))), "gzip, br")
        self.assertEqual(r.header("Content-Encoding"), "deflate", r.raw_head)

    def test_head_left_alone(self):
        r = get(self.umbra.port, "/nc/h?size=5000&" + JSON, "gzip", method="HEAD")
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
        self.assertEqual(r.header("Content-Length"), "5000")

    def test_range_request_left_alone(self):
        r = get(self.umbra.port, "/nc/r?size=5000&" + JSON, "gzip",
                headers=[("Range", "bytes=0-99")])
        self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
        self.assertIn(r.body, (origin_body(5000), origin_body(100)))

    def test_small_body_left_alone(self):
        r = get(self.umbra.port, "/nc/small?size=1000&" + JSON, "gzip")
        self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
        self.assertEqual(r.header("Content-Length"), "1000")
        # Unknown length: compressed (the size is known only at the end).
        r = get(self.umbra.port, "/nc/small2?size=1000&chunked=1&" + JSON, "gzip")
        self.assertEqual(r.header("Content-Encoding"), "gzip", r.raw_head)
        self.assertEqual(decode("gzip", r.body), origin_body(1000))

    def test_non_compressible_type_left_alone(self):
        for ct in ("image/png", "application/octet-stream", ""):
            with self.subTest(ct=ct):
                r = get(self.umbra.port, "/nc/png?size=5000&ct=" + q(ct), "gzip, br, zstd")
                self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
                self.assertIsNone(r.header("Vary"), r.raw_head)
                self.assertEqual(r.body, origin_body(5000))

    def test_types_with_parameters_and_wildcards(self):
        for ct in ("text/html; charset=utf-8", "TEXT/CSS", "image/svg+xml",
                   "application/wasm", "application/javascript"):
            with self.subTest(ct=ct):
                r = get(self.umbra.port, "/nc/t?size=5000&ct=" + q(ct), "gzip")
                self.assertEqual(r.header("Content-Encoding"), "gzip", r.raw_head)

    def test_error_status_left_alone(self):
        r = get(self.umbra.port, "/nc/e?status=404&size=5000&" + JSON, "gzip")
        self.assertEqual(r.status, 404)
        self.assertIsNone(r.header("Content-Encoding"))

    def test_digests_of_the_identity_bytes_dropped(self):
        t = "/nc/dg?size=5000&header=%s&header=%s&%s" % (
            q("Content-Digest:sha-256=:AAAA:"), q("Content-MD5:Q2hlY2sgSW50ZWdyaXR5IQ=="), JSON)
        r = get(self.umbra.port, t, "gzip")
        self.assertEqual(r.header("Content-Encoding"), "gzip")
        self.assertIsNone(r.header("Content-Digest"))
        self.assertIsNone(r.header("Content-MD5"))
        r = get(self.umbra.port, t)
        self.assertEqual(r.header("Content-Digest"), "sha-256=:AAAA:")

    def test_strong_etag_made_weak(self):
        r = get(self.umbra.port, "/nc/etag?size=5000&header=%s&%s" % (q('ETag:"abc"'), JSON),
                "gzip")
        self.assertEqual(r.header("ETag"), 'W/"abc"')
        r = get(self.umbra.port, "/nc/etag?size=5000&header=%s&%s" % (q('ETag:"abc"'), JSON))
        self.assertEqual(r.header("ETag"), '"abc"')

    def test_origin_cut_short_is_not_a_whole_body(self):
        # The origin sends half its body and closes: the client must see the response cut
        # short (no last chunk, a coded stream without its end), with nothing wrong in
        # what it got.
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding), connect(self.umbra.port, 20) as sock:
                sock.sendall(req("/nc/drop?size=200000&drop=body&" + JSON,
                                 headers=[("Accept-Encoding", coding)]))
                rd = ChunkedReader(sock, 20)
                self.assertIn(b" 200 ", rd.head.split(b"\r\n")[0])
                self.assertEqual(rd.header("Content-Encoding"), coding, rd.head)
                dec, got = StreamDecoder(coding), b""
                for _, data in rd.pieces():
                    got += dec.feed(data)
                dec.close()
                self.assertFalse(rd.complete, "a cut body ended with its last chunk")
                self.assertFalse(dec.eof, "a cut body ended its %s stream" % coding)
                self.assertTrue(rd.closed, "the connection stayed open")
                self.assertEqual(got, origin_body(len(got)))  # a prefix of the body
                self.assertLess(len(got), 200000)

    @unittest.skipUnless(shutil.which("curl"), "curl not installed")
    def test_http2_client_gets_compressed(self):
        out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--max-time", "20",
                              "-H", "Accept-Encoding: br", "-D", "-", "-o", "-",
                              "http://127.0.0.1:%d/nc/h2?size=50000&%s" % (self.umbra.port, JSON)],
                             stdout=subprocess.PIPE, timeout=30).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertIn(b"HTTP/2 200", head)
        self.assertIn(b"content-encoding: br", head.lower())
        self.assertEqual(decode("br", body), origin_body(50000))


class EventStreamOrigin:
    """An origin in this process that answers GET /ev?id=ID[&cc=V] with a chunked
    text/event-stream of EVENTS events (Cache-Control: V, default no-cache), each sent
    GAP s after the test's client decoded the one before it (ack), or after WAIT s if it
    never did. .sent[ID][i]: when event i left."""

    EVENTS, GAP, WAIT = 4, 0.3, 3.0

    @staticmethod
    def event(i):
        return ("id: %d\nevent: progress\ndata: {\"step\": %d, \"of\": 4, \"note\": "
                "\"working on it\"}\n\n" % (i, i)).encode()

    def __enter__(self):
        self.sent, self.acks = {}, {}
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                query = dict(p.split("=", 1) for p in self.path.split("?", 1)[1].split("&"))
                sid = query["id"]
                sent, acks = outer.streams(sid)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", query.get("cc", "no-cache").replace("%3D", "="))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(outer.EVENTS):
                    if i > 0:
                        acks[i - 1].wait(outer.WAIT)
                        time.sleep(outer.GAP)
                    e = outer.event(i)
                    sent.append(time.monotonic())
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(e), e))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        return self

    def streams(self, sid):
        if sid not in self.sent:
            self.sent[sid] = []
            self.acks[sid] = [threading.Event() for _ in range(self.EVENTS)]
        return self.sent[sid], self.acks[sid]

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False


class LiveStreamTest(unittest.TestCase):
    """Issue #26 (8): a compressed live stream stays live. The encoder's block is flushed
    whenever the origin's bytes run dry, so each event reaches the client, decodable, before
    the origin sends the next one (the origin waits for it, up to 3 s)."""

    @classmethod
    def setUpClass(cls):
        cls.origin = EventStreamOrigin().__enter__()
        cls.addClassCleanup(cls.origin.__exit__, None, None, None)
        cls.umbra = Umbra(upstream(cls.origin.url)).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)
        cls.ids = iter(range(1, 1000))

    def follow(self, coding, pieces, sid):
        """Decodes the body pieces (time, bytes) of stream sid, telling the origin of each
        event as it becomes readable; checks that every event was readable before the
        origin sent the next one."""
        ev = EventStreamOrigin
        sent, acks = self.origin.streams(sid)
        dec, got, seen_at = StreamDecoder(coding), b"", []
        try:
            for t, data in pieces:
                got += dec.feed(data)
                while len(seen_at) < ev.EVENTS and ev.event(len(seen_at)) in got:
                    seen_at.append(t)
                    acks[len(seen_at) - 1].set()
            self.assertTrue(dec.eof, "the %s stream did not end" % coding)
        finally:
            dec.close()
        self.assertEqual(got, b"".join(ev.event(i) for i in range(ev.EVENTS)))
        for i in range(ev.EVENTS - 1):
            self.assertLess(seen_at[i], sent[i + 1],
                            "event %d became readable only after event %d was sent" % (i, i + 1))

    def stream_http1(self, port, path, coding):
        sid = str(next(self.ids))
        with connect(port, 30) as sock:
            sock.sendall(req("%s?id=%s" % (path, sid), headers=[("Accept-Encoding", coding)]))
            rd = ChunkedReader(sock, 30)
            self.assertEqual(rd.header("Content-Encoding"), coding, rd.head)
            self.follow(coding, rd.pieces(), sid)
            self.assertTrue(rd.complete)
        return sid

    def test_each_coding_live(self):
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding):
                self.stream_http1(self.umbra.port, "/nc/ev", coding)

    def test_live_through_a_cache_fill(self):
        # A cacheable stream: the client reads it from the object the fill writes.
        sid = str(next(self.ids))
        with connect(self.umbra.port, 30) as sock:
            sock.sendall(req("/ev?id=%s&cc=max-age%%3D60" % sid,
                             headers=[("Accept-Encoding", "gzip")]))
            rd = ChunkedReader(sock, 30)
            self.assertEqual(rd.header("Content-Encoding"), "gzip", rd.head)
            self.assertIn("stored", rd.header("Cache-Status") or "", rd.head)
            self.follow("gzip", rd.pieces(), sid)

    def test_libcurl_client_live(self):
        cfg = upstream(self.origin.url).replace('servers = { "%s" }' % self.origin.url,
                                                'servers = { "%s" }, client = "curl"'
                                                % self.origin.url)
        self.assertIn('client = "curl"', cfg)
        with Umbra(cfg) as u:
            for coding in ("gzip", "zstd"):
                with self.subTest(coding=coding):
                    self.stream_http1(u.port, "/nc/ev", coding)

    @unittest.skipUnless(shutil.which("curl"), "curl not installed")
    def test_http2_client_live(self):
        for coding in ("gzip", "br"):
            with self.subTest(coding=coding):
                sid = str(next(self.ids))
                p = subprocess.Popen(
                    ["curl", "-s", "-N", "--http2-prior-knowledge", "--max-time", "30",
                     "-H", "Accept-Encoding: " + coding, "-o", "-",
                     "http://127.0.0.1:%d/nc/ev?id=%s" % (self.umbra.port, sid)],
                    stdout=subprocess.PIPE)

                def pieces():
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline:
                        r, _, _ = select.select([p.stdout], [], [], deadline - time.monotonic())
                        data = os.read(p.stdout.fileno(), 65536) if r else b""
                        if not data:
                            return
                        yield time.monotonic(), data
                try:
                    self.follow(coding, pieces(), sid)
                finally:
                    p.kill()
                    p.wait(10)
                    p.stdout.close()


# A CGI script streaming four events; before each one after the first it waits (up to
# 3 s) for the test to say it decoded the one before (a file ../ack-ID-N), and says in
# the event whether it had to give up waiting.
CGI_EVENTS = """#!%s
import os, sys, time
sid = os.environ["QUERY_STRING"].split("=", 1)[1]
sys.stdout.write("Content-Type: text/event-stream\\r\\n\\r\\n")
sys.stdout.flush()
for i in range(4):
    late = False
    if i:
        ack = "../ack-%%s-%%d" %% (sid, i - 1)
        end = time.monotonic() + 3
        while not os.path.exists(ack) and time.monotonic() < end:
            time.sleep(0.02)
        late = not os.path.exists(ack)
        time.sleep(0.3)
    sys.stdout.write("id: %%d\\ndata: %%s\\n\\n" %% (i, "late" if late else "on time"))
    sys.stdout.flush()
""" % sys.executable


class LiveCgiStreamTest(unittest.TestCase):
    """Issue #26 (8), for a CGI script's output: each event readable before the next."""

    def test_cgi_events_live(self):
        cfg = """cgi = { timeout = 30 }
routes = { { path = "/cgi-bin/", cgi = "cgi-bin", compress = true } }
"""
        with Umbra(cfg, files={"cgi-bin/ev.py": CGI_EVENTS},
                   setup=lambda d: os.chmod(os.path.join(d, "cgi-bin/ev.py"), 0o755)) as u:
            for n, coding in enumerate(("gzip", "br", "zstd")):
                with self.subTest(coding=coding), connect(u.port, 30) as sock:
                    sock.sendall(req("/cgi-bin/ev.py?id=%d" % n,
                                     headers=[("Accept-Encoding", coding)]))
                    rd = ChunkedReader(sock, 30)
                    self.assertEqual(rd.header("Content-Encoding"), coding, rd.head)
                    dec, got, acked = StreamDecoder(coding), b"", 0
                    for _, data in rd.pieces():
                        got += dec.feed(data)
                        while acked < 4 and b"id: %d\n" % acked in got and got.endswith(b"\n\n"):
                            open(u.path("ack-%d-%d" % (n, acked)), "w").close()
                            acked += 1
                    self.assertTrue(dec.eof)
                    dec.close()
                    self.assertEqual(got.count(b"data: on time\n\n"), 4, got)


class CacheVariantTest(unittest.TestCase):
    """A cached route: one variant per coding bucket, hits served as stored."""

    def test_one_fill_per_bucket_and_hits(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/v?size=100000&cc=%s&header=%s&%s" % (q("max-age=60"), q('ETag:"v1"'), JSON)
            spellings = {
                "br": ["gzip, deflate, br", "br, gzip", "BR;q=1, gzip;q=0.9", "br"],
                "zstd": ["gzip, deflate, br, zstd", "zstd", "*"],
                "gzip": ["gzip", "gzip, deflate", "x-gzip"],
                None: [None, "identity", "deflate", "gzip;q=0", "gzip;q=oops"],
            }
            for coding, aes in spellings.items():
                for i, ae in enumerate(aes):
                    with self.subTest(ae=ae):
                        r = get(u.port, t, ae)
                        self.assertEqual(r.status, 200)
                        self.assertEqual(r.header("Content-Encoding"), coding, r.raw_head)
                        body = decode(coding, r.body) if coding else r.body
                        self.assertEqual(body, origin_body(100000))
                        self.assertIn("accept-encoding", (r.header("Vary") or "").lower())
                        cs = r.header("Cache-Status") or ""
                        if i > 0:
                            self.assertIn("hit", cs, r.raw_head)
                            # A hit knows its length: no chunks.
                            self.assertEqual(r.header("Content-Length"), str(len(r.body)))
                        self.assertEqual(r.header("ETag"), 'W/"v1"' if coding else '"v1"')
            self.assertEqual(seen(o, "/v"), 1)  # one origin fetch for every coding

    def test_if_none_match_weak_gives_304(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/inm?size=100000&cc=%s&header=%s&%s" % (q("max-age=60"), q('ETag:"v2"'), JSON)
            r = get(u.port, t, "gzip")
            self.assertEqual(r.header("ETag"), 'W/"v2"')
            for inm in ('W/"v2"', '"v2"', '"x", W/"v2"', "*"):
                with self.subTest(inm=inm):
                    r = get(u.port, t, "gzip", headers=[("If-None-Match", inm)])
                    self.assertEqual(r.status, 304, r.raw_head)
                    self.assertEqual(r.body, b"")
            r = get(u.port, t, "gzip", headers=[("If-None-Match", 'W/"other"')])
            self.assertEqual(r.status, 200)
            self.assertEqual(seen(o, "/inm"), 1)

    def test_range_of_compressed_variant_from_cache(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/rg?size=100000&cc=%s&%s" % (q("max-age=60"), JSON)
            full = get(u.port, t, "gzip")
            self.assertEqual(full.header("Content-Encoding"), "gzip")
            r = get(u.port, t, "gzip", headers=[("Range", "bytes=0-9")])
            # The cache answers a Range of what it stores: the stored (compressed) bytes.
            if r.status == 206:
                self.assertEqual(r.body, full.body[:10])
            else:
                self.assertEqual(r.status, 200)

    def test_origin_vary_kept_beside_accept_encoding(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/vy?size=20000&cc=%s&header=%s&%s" % (q("max-age=60"), q("Vary:X-Lang"), JSON)
            r = get(u.port, t, "gzip", headers=[("X-Lang", "fr")])
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            vary = ",".join(r.header_all("Vary")).lower()
            self.assertIn("x-lang", vary)
            self.assertIn("accept-encoding", vary)
            r = get(u.port, t, "gzip, deflate", headers=[("X-Lang", "fr")])
            self.assertIn("hit", r.header("Cache-Status") or "")
            r = get(u.port, t, "gzip", headers=[("X-Lang", "de")])
            self.assertNotIn("hit", r.header("Cache-Status") or "")
            self.assertEqual(decode("gzip", r.body), origin_body(20000))
            self.assertEqual(seen(o, "/vy"), 2)

    def test_origin_own_coding_not_shared_by_the_bucket(self):
        # The origin compressed on its own (br, with Vary: Accept-Encoding) for a client of
        # the zstd bucket that also takes br: a client that takes zstd only must not get
        # that br body from the cache.
        with Origin() as o, Umbra(upstream(o.url)) as u:
            raw = "x" * 3000
            t = "/own?cc=%s&header=%s&header=%s&%s&body=%s" % (
                q("max-age=60"), q("Content-Encoding:br"), q("Vary:Accept-Encoding"), JSON, raw)
            r = get(u.port, t, "gzip, deflate, br, zstd")
            self.assertEqual(r.header("Content-Encoding"), "br")
            r = get(u.port, t, "zstd")
            self.assertNotIn("hit", r.header("Cache-Status") or "", r.raw_head)
            r = get(u.port, t, "gzip, deflate, br, zstd")
            self.assertIn("hit", r.header("Cache-Status") or "", r.raw_head)

    def test_compressed_hit_no_origin_request(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/hit?size=50000&cc=%s&%s" % (q("max-age=60"), JSON)
            for _ in range(5):
                r = get(u.port, t, "zstd")
                self.assertEqual(decode("zstd", r.body), origin_body(50000))
            self.assertEqual(seen(o, "/hit"), 1)


class RevalidatingOrigin:
    """An origin in this process that answers 304 to any If-None-Match (the scripted
    origin cannot compare validators): 5000 bytes of JSON, ETag "v3", max-age=1 (or
    max_age), tags (Surrogate-Key) when given. requests: the If-None-Match of each request
    (None: unconditional); encodings: the Accept-Encoding of each."""

    def __init__(self, max_age=1, tags=None):
        self.max_age = max_age
        self.tags = tags

    def __enter__(self):
        body = origin_body(5000)
        seen = self.requests = []
        encodings = self.encodings = []
        max_age, tags = self.max_age, self.tags

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.append(self.headers.get("If-None-Match"))
                encodings.append(self.headers.get("Accept-Encoding"))
                cond = self.headers.get("If-None-Match") is not None
                self.send_response(304 if cond else 200)
                self.send_header("ETag", '"v3"')
                self.send_header("Cache-Control", "max-age=%d" % max_age)
                if tags:
                    self.send_header("Surrogate-Key", tags)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "0" if cond else str(len(body)))
                self.end_headers()
                if not cond:
                    self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False


class RevalidationTest(unittest.TestCase):
    def test_revalidated_variant_keeps_weak_etag(self):
        # A stale compressed variant is revalidated; the origin's 304 carries its strong
        # ETag: the gzip body must not go out with that strong tag afterwards.
        # max-age=3: the revalidated copy stays fresh (at least 2 s, ages being whole
        # seconds) while the two requests after it are served, however slow the build.
        with RevalidatingOrigin(max_age=3) as o, Umbra(upstream(o.url)) as u:
            r = get(u.port, "/rv", "gzip")
            self.assertEqual(r.header("ETag"), 'W/"v3"')
            time.sleep(4.2)
            for _ in range(2):
                r = get(u.port, "/rv", "gzip")
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("Content-Encoding"), "gzip", r.raw_head)
                self.assertEqual(decode("gzip", r.body), origin_body(5000))
                self.assertEqual(r.header("ETag"), 'W/"v3"', r.raw_head)
            self.assertEqual(o.requests[0], None)
            # The stale coding is made again from the identity object, revalidated with
            # its own (strong) tag.
            self.assertEqual(o.requests[1], '"v3"')
            self.assertEqual(len(o.requests), 2)

    def test_uncached_304_to_a_compressing_client_is_weak(self):
        # The client's copy is compressed (its tag weak): the origin's 304 must not hand
        # it a strong tag of the identity bytes.
        with RevalidatingOrigin() as o, Umbra(upstream(o.url)) as u:
            r = get(u.port, "/nc/rv", "br", headers=[("If-None-Match", 'W/"v3"')])
            self.assertEqual(r.status, 304)
            self.assertEqual(r.header("ETag"), 'W/"v3"', r.raw_head)
            r = get(u.port, "/nc/rv", None, headers=[("If-None-Match", '"v3"')])
            self.assertEqual(r.status, 304)
            self.assertEqual(r.header("ETag"), '"v3"', r.raw_head)


class OneFetchForEveryCodingTest(unittest.TestCase):
    """Issue #26, defect 2: the codings of one object cost one origin fetch. A coding the
    cache lacks is compressed from the stored identity bytes (or from the identity fill,
    as it arrives, when it is the first request); one revalidation refreshes every coding;
    a purge, by URL or by tag, removes them all."""

    ORDERS = (("gzip", "br", "zstd", None), (None, "zstd", "gzip", "br"))

    def check(self, r, coding, size=5000):
        self.assertEqual(r.status, 200, r.raw_head)
        self.assertEqual(r.header("Content-Encoding"), coding, r.raw_head)
        self.assertEqual(decode(coding, r.body) if coding else r.body, origin_body(size))
        self.assertIn("accept-encoding", (r.header("Vary") or "").lower())

    def test_four_codings_one_origin_request(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            for n, order in enumerate(self.ORDERS):
                t = "/one%d?size=30000&cc=%s&header=%s&%s" % (n, q("max-age=60"),
                                                              q('ETag:"o1"'), JSON)
                for i, coding in enumerate(order):
                    with self.subTest(order=order, coding=coding):
                        r = get(u.port, t, coding)
                        self.check(r, coding, 30000)
                        cs = r.header("Cache-Status") or ""
                        if i == 0:
                            self.assertIn("fwd=uri-miss", cs, r.raw_head)
                        else:
                            self.assertIn("hit", cs, r.raw_head)
                            self.assertNotIn("fwd", cs, r.raw_head)
                        self.assertEqual(r.header("ETag"), 'W/"o1"' if coding else '"o1"')
                # Asked once, for the identity bytes, whatever the first client took.
                self.assertEqual(seen(o, "/one%d" % n), 1, order)
                for coding in order:  # and each coding is stored: hits again
                    r = get(u.port, t, coding)
                    self.check(r, coding, 30000)
                    self.assertIn("hit", r.header("Cache-Status") or "", r.raw_head)
                self.assertEqual(seen(o, "/one%d" % n), 1, order)

    def test_one_revalidation_refreshes_every_coding(self):
        with RevalidatingOrigin(max_age=2) as o, Umbra(upstream(o.url)) as u:
            for coding in ("gzip", "br", "zstd", None):
                self.check(get(u.port, "/rv4", coding), coding)
            self.assertEqual(len(o.requests), 1)
            time.sleep(3.2)  # every coding is stale now
            r = get(u.port, "/rv4", "br")
            self.check(r, "br")
            self.assertIn("fwd=stale", r.header("Cache-Status") or "", r.raw_head)
            self.assertEqual(len(o.requests), 2)
            self.assertIsNotNone(o.requests[1])  # a conditional request: the 304 freshens
            for coding in ("gzip", "zstd", None):
                r = get(u.port, "/rv4", coding)
                self.check(r, coding)
                cs = r.header("Cache-Status") or ""
                self.assertIn("hit", cs, r.raw_head)
                self.assertNotIn("ttl=-", cs, r.raw_head)  # fresh again, not served stale
            self.assertEqual(len(o.requests), 2, o.requests)

    def test_purge_by_url_removes_every_coding(self):
        with Origin() as o, Umbra(upstream(o.url)) as u:
            t = "/pu?size=8000&cc=%s&%s" % (q("max-age=600"), JSON)
            for coding in ("gzip", "br", "zstd", None):
                self.check(get(u.port, t, coding), coding, 8000)
            self.assertEqual(seen(o, "/pu"), 1)
            r = fetch_req(u.port, t, method="PURGE")
            self.assertEqual(r.status, 200, r.raw_head)
            for i, coding in enumerate(("zstd", None, "gzip", "br")):
                r = get(u.port, t, coding)
                self.check(r, coding, 8000)
                cs = r.header("Cache-Status") or ""
                if i == 0:  # nothing of any coding was left: to the origin
                    self.assertIn("fwd=uri-miss", cs, r.raw_head)
                else:
                    self.assertIn("hit", cs, r.raw_head)
            self.assertEqual(seen(o, "/pu"), 2)

    def test_purge_by_tag_removes_every_coding(self):
        with RevalidatingOrigin(max_age=600, tags="cat1 all") as o, \
                Umbra(upstream(o.url)) as u:
            for coding in ("gzip", "br", "zstd", None):
                r = get(u.port, "/tg", coding)
                self.check(r, coding)
                self.assertIsNone(r.header("Surrogate-Key"), r.raw_head)  # not shown
            self.assertEqual(len(o.requests), 1)
            r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "cat1")])
            self.assertEqual(r.status, 200, r.raw_head)
            for coding in ("br", "gzip", "zstd", None):
                r = get(u.port, "/tg", coding)
                self.check(r, coding)
                self.assertNotIn("hit", r.header("Cache-Status") or "", r.raw_head)
                # the next request of the same coding is a hit of the new fetch
                self.assertIn("hit", get(u.port, "/tg", coding).header("Cache-Status") or "")
                r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "all")])
                self.assertEqual(r.status, 200, r.raw_head)
            self.assertEqual(len(o.requests), 5, o.requests)
            # Every fetch asked the origin for the identity bytes (explicitly, or by
            # asking for no coding).
            self.assertTrue(all(e in ("identity", None) for e in o.encodings), o.encodings)


class SettingsTest(unittest.TestCase):
    def test_off_by_default(self):
        with Origin() as o, Umbra(upstream(o.url, compress="")) as u:
            r = get(u.port, "/nc/off?size=5000&" + JSON, "gzip, br, zstd")
            self.assertIsNone(r.header("Content-Encoding"))
            self.assertIsNone(r.header("Vary"))
            self.assertEqual(r.body, origin_body(5000))

    def test_compress_false(self):
        with Origin() as o, Umbra(upstream(o.url, compress="compress = false")) as u:
            r = get(u.port, "/nc/off?size=5000&" + JSON, "gzip")
            self.assertIsNone(r.header("Content-Encoding"))

    def test_per_route_override(self):
        routes = """{ path = "/plain/", upstream = "app", cache = false, compress = false },
  { path = "/gz/", upstream = "app", cache = false,
    compress = { algorithms = { "gzip" }, min_size = 10, types = { "text/plain" },
                 level = { gzip = 1 } } },"""
        with Origin() as o, Umbra(upstream(o.url, routes=routes)) as u:
            r = get(u.port, "/plain/x?size=5000&" + JSON, "gzip")
            self.assertIsNone(r.header("Content-Encoding"))
            r = get(u.port, "/gz/x?size=50&ct=text/plain", "zstd, br, gzip")
            self.assertEqual(r.header("Content-Encoding"), "gzip", r.raw_head)
            self.assertEqual(decode("gzip", r.body), origin_body(50))
            r = get(u.port, "/gz/x?size=5000&" + JSON, "gzip")  # not among its types
            self.assertIsNone(r.header("Content-Encoding"))
            r = get(u.port, "/gz/x?size=5000&ct=text/plain", "zstd, br")  # not offered
            self.assertIsNone(r.header("Content-Encoding"))
            r = get(u.port, "/nc/x?size=5000&" + JSON, "br")  # the global setting
            self.assertEqual(r.header("Content-Encoding"), "br")

    def test_route_on_when_global_off(self):
        routes = '{ path = "/on/", upstream = "app", cache = false, compress = { min_size = 0 } },'
        with Origin() as o, Umbra(upstream(o.url, compress="", routes=routes)) as u:
            r = get(u.port, "/on/x?size=100&" + JSON, "gzip")
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            r = get(u.port, "/nc/x?size=5000&" + JSON, "gzip")
            self.assertIsNone(r.header("Content-Encoding"))

    def test_hooks_see_the_origin_answer_and_hook_routes_compress(self):
        # on_response runs below the compression: it sees no Content-Encoding of ours, and
        # what it sets goes out compressed. A route answered by the upstream its hook picks
        # compresses too.
        routes = """{ path = "/hk/", upstream = "app", cache = false,
    on_response = function(req, res)
      res:set_header("X-Seen-CE", res:header("Content-Encoding") or "none")
    end },
  { path = "/pick/", compress = true, on_request = function(req) req.upstream = "app" end },"""
        with Origin() as o, Umbra(upstream(o.url, routes=routes)) as u:
            r = get(u.port, "/hk/x?size=5000&" + JSON, "gzip")
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            self.assertEqual(r.header("X-Seen-CE"), "none")
            self.assertEqual(decode("gzip", r.body), origin_body(5000))
            r = get(u.port, "/pick/x?size=5000&" + JSON, "br")
            self.assertEqual(r.header("Content-Encoding"), "br", r.raw_head)
            self.assertEqual(decode("br", r.body), origin_body(5000))

    def test_bad_settings_name_file_and_line(self):
        bad = [
            'compress = { algorithms = { "lzma" } }',
            'compress = { level = { gzip = 12 } }',
            'compress = { types = { "html" } }',
            'compress = { speed = 3 }',
            'compress = "yes"',
            'compress = { algorithms = { "gzip", "gzip" } }',
        ]
        for text in bad:
            with self.subTest(text=text):
                cfg = 'routes = { { path = "/", root = "www" } }\n' + text + "\n"
                with Umbra(cfg, files={"www/a": "a"}, expect_fail=True) as u:
                    self.assertNotEqual(u.returncode, 0)
                    self.assertRegex(u.log(), r"config\.lua:\d+: compress")

    def test_metrics_count_bytes(self):
        with Origin() as o, Umbra(upstream(o.url) + '\nadmin = { listen = "127.0.0.1:0" }\n') as u:
            get(u.port, "/nc/m?size=100000&" + JSON, "gzip")
            r = fetch_req(admin_port(u), "/metrics")
            text = r.body.decode()
            line = [x for x in text.splitlines()
                    if x.startswith('umbra_compress_in_bytes_total{coding="gzip"}')]
            self.assertEqual(line, ['umbra_compress_in_bytes_total{coding="gzip"} 100000'])
            out = [x for x in text.splitlines()
                   if x.startswith('umbra_compress_out_bytes_total{coding="gzip"}')]
            self.assertEqual(len(out), 1)
            self.assertGreater(int(out[0].split()[-1]), 0)
            self.assertLess(int(out[0].split()[-1]), 100000)


def make_static(d):
    os.makedirs(os.path.join(d, "www"), exist_ok=True)
    data = ("".join('{"k": %d, "v": "value number %d"},\n' % (i, i) for i in range(3000))).encode()
    with open(os.path.join(d, "www", "a.json"), "wb") as f:
        f.write(data)
    # Siblings made by the tools an operator would use, marked so that a test can tell a
    # sibling was sent (an on-the-fly result would differ).
    subprocess.run(["gzip", "-k", "-9", os.path.join(d, "www", "a.json")], check=True)
    subprocess.run(["brotli", "-k", os.path.join(d, "www", "a.json")], check=True)
    # b.json: only a stale .gz sibling (older than the file).
    with open(os.path.join(d, "www", "b.json"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "www", "b.json.gz"), "wb") as f:
        f.write(zlib.compress(b"stale"))
    now = time.time()
    os.utime(os.path.join(d, "www", "b.json.gz"), (now - 100, now - 100))
    os.utime(os.path.join(d, "www", "b.json"), (now, now))
    with open(os.path.join(d, "www", "c.txt"), "wb") as f:
        f.write(data)


class StaticTest(unittest.TestCase):
    CFG = """
routes = { { path = "/p/", root = "www", precompressed = true },
           { path = "/pc/", root = "www", precompressed = true, compress = true },
           { path = "/c/", root = "www", compress = true },
           { path = "/", root = "www" } }
"""

    @classmethod
    def setUpClass(cls):
        cls.umbra = Umbra(cls.CFG, setup=make_static).__enter__()
        with open(cls.umbra.path("www/a.json"), "rb") as f:
            cls.data = f.read()
        with open(cls.umbra.path("www/a.json.br"), "rb") as f:
            cls.br = f.read()
        with open(cls.umbra.path("www/a.json.gz"), "rb") as f:
            cls.gz = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.umbra.__exit__(None, None, None)

    def test_precompressed_siblings(self):
        port = self.umbra.port
        r = get(port, "/p/a.json", "gzip, br")
        self.assertEqual(r.header("Content-Encoding"), "br")
        self.assertEqual(r.body, self.br)
        self.assertEqual(r.header("Content-Length"), str(len(self.br)))
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(r.header("Vary"), "Accept-Encoding")
        r = get(port, "/p/a.json", "gzip")
        self.assertEqual(r.header("Content-Encoding"), "gzip")
        self.assertEqual(r.body, self.gz)
        # zstd wanted first, but there is no .zst: the next best the client takes.
        r = get(port, "/p/a.json", "zstd, br;q=0.5")
        self.assertEqual(r.header("Content-Encoding"), "br")
        r = get(port, "/p/a.json", "zstd")
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertEqual(r.body, self.data)
        self.assertEqual(r.header("Vary"), "Accept-Encoding")
        r = get(port, "/p/a.json")
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertEqual(r.body, self.data)

    def test_precompressed_etag_and_304(self):
        port = self.umbra.port
        br = get(port, "/p/a.json", "br")
        plain = get(port, "/p/a.json")
        self.assertNotEqual(br.header("ETag"), plain.header("ETag"))
        r = get(port, "/p/a.json", "br", headers=[("If-None-Match", br.header("ETag"))])
        self.assertEqual(r.status, 304)
        self.assertEqual(r.header("Vary"), "Accept-Encoding")

    def test_stale_sibling_ignored(self):
        r = get(self.umbra.port, "/p/b.json", "gzip")
        self.assertIsNone(r.header("Content-Encoding"), r.raw_head)
        self.assertEqual(r.body, self.data)

    def test_range_gets_the_file(self):
        r = get(self.umbra.port, "/p/a.json", "br", headers=[("Range", "bytes=0-9")])
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, self.data[:10])
        self.assertIsNone(r.header("Content-Encoding"))

    def test_on_the_fly_when_no_sibling(self):
        r = get(self.umbra.port, "/pc/a.json", "zstd")
        self.assertEqual(r.header("Content-Encoding"), "zstd", r.raw_head)
        self.assertEqual(decode("zstd", r.body), self.data)
        r = get(self.umbra.port, "/pc/a.json", "br")  # the sibling wins
        self.assertEqual(r.body, self.br)
        self.assertEqual(r.header("Vary"), "Accept-Encoding")  # once

    def test_on_the_fly_static(self):
        for coding in ("gzip", "br", "zstd"):
            with self.subTest(coding=coding):
                r = get(self.umbra.port, "/c/c.txt", coding)
                self.assertEqual(r.header("Content-Encoding"), coding)
                self.assertEqual(decode(coding, r.body), self.data)
                self.assertTrue(r.header("ETag").startswith("W/"), r.raw_head)
                self.assertIsNone(r.header("Accept-Ranges"))
                etag = r.header("ETag")
                r = get(self.umbra.port, "/c/c.txt", coding, headers=[("If-None-Match", etag)])
                self.assertEqual(r.status, 304)
        r = get(self.umbra.port, "/c/c.txt", "gzip", method="HEAD")
        self.assertIsNone(r.header("Content-Encoding"))

    def test_no_compression_without_setting(self):
        r = get(self.umbra.port, "/a.json", "gzip, br, zstd")
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertIsNone(r.header("Vary"))
        self.assertEqual(r.body, self.data)


if __name__ == "__main__":
    unittest.main()
