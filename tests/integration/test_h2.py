"""HTTP/2 to clients (issue #15): real clients (curl --http2 over TLS, curl
--http2-prior-knowledge on a plain port, nghttp, h2load) against the real binary for
static files, the upstream (request bodies streamed both ways), the cache (hit, miss,
Cache-Status, purge), Range and conditionals, Lua's req.http_version, many streams on one
connection and GOAWAY on reload and stop; and a small raw-frame client (hand-written
frames, HPACK literals without indexing) for RFC 9113 stream errors and hostile clients
(CONTINUATION flood, rapid reset, header lists past the limit, heads that never end,
PING floods).
"""

import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, class_context, origin_body,  # noqa: E402
                           wait_until)

HEADER_TIMEOUT = 1.5
SLACK = 2.0
CERT_DIR = None
STATIC = os.urandom(300000)

# Frame types and error codes (RFC 9113 sections 6 and 7).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0, 0x1, 0x2, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, CANCEL, ENHANCE_YOUR_CALM = 0x0, 0x1, 0x3, 0x8, 0xb
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def have(tool):
    return shutil.which(tool) is not None


def setUpModule():
    global CERT_DIR
    CERT_DIR = tempfile.mkdtemp(prefix="umbra-h2-pki-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    os.path.join(CERT_DIR, "k.pem"), "-out", os.path.join(CERT_DIR, "c.pem"),
                    "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost"], check=True, capture_output=True)


def tearDownModule():
    if CERT_DIR:
        shutil.rmtree(CERT_DIR, ignore_errors=True)


def cert_files():
    out = {}
    for name in ("c.pem", "k.pem"):
        with open(os.path.join(CERT_DIR, name), "rb") as f:
            out[name] = f.read()
    return out


# listen order: plain (h2 by prior knowledge), TLS (ALPN h2), plain http2 = false,
# TLS http2 = false.
LISTEN = """listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true },
  { "127.0.0.1:0", http2 = false }, { "127.0.0.1:0", tls = true, http2 = false } }
tls = { { hosts = { "localhost" }, cert = "c.pem", key = "k.pem" } }
"""


def config(url, http2='{ max_concurrent_streams = 64, initial_window = "64KB", '
           'max_header_list = "16KB" }', extra="", send=30):
    return LISTEN + """
timeouts = { header = %(ht)g, shutdown = 5, send = %(send)g }
admin = { listen = "127.0.0.1:0" }
access_log = { path = "access.log" }
upstreams = { app = { servers = { "%(url)s" }, timeout = 10 } }
cache = { memory = "64MB", purge = { allow = { "127.0.0.1" } } }
http2 = %(http2)s
routes = {
  { path = "/up/", upstream = "app" },
  { path = "/nocache/", upstream = "app", cache = false },
  { path = "/lua", on_request = function(req) return umbra.respond(200, req.http_version) end },
  { path = "/", root = "www" },
}
%(extra)s
""" % {"ht": HEADER_TIMEOUT, "url": url, "http2": http2, "extra": extra, "send": send}


def files():
    f = cert_files()
    f["www/index.html"] = b"hello over h2\n"
    f["www/big.bin"] = STATIC
    return f


# -- curl ------------------------------------------------------------------------------------

class CurlResult:
    def __init__(self, version, status, headers, body):
        self.version, self.status, self.headers, self.body = version, status, headers, body

    def header(self, name):
        return self.headers.get(name.lower())


def curl(url, *args, timeout=30):
    """Runs curl on url; returns a CurlResult (headers of the final response, lower-case
    names)."""
    with tempfile.TemporaryDirectory() as d:
        hfile, bfile = os.path.join(d, "h"), os.path.join(d, "b")
        cmd = ["curl", "-s", "-k", "--max-time", str(timeout), "-D", hfile, "-o", bfile,
               "-w", "%{http_version} %{http_code}"] + list(args) + [url]
        p = subprocess.run(cmd, capture_output=True, timeout=timeout + 5)
        version, status = p.stdout.decode().split()
        headers = {}
        if os.path.exists(hfile):
            with open(hfile, "rb") as f:
                for line in f.read().decode("latin-1").split("\r\n"):
                    if ":" in line and not line.startswith("HTTP/"):
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                    elif line.startswith("HTTP/"):
                        headers = {}
        body = b""
        if os.path.exists(bfile):
            with open(bfile, "rb") as f:
                body = f.read()
        return CurlResult(version, int(status), headers, body)


def h2c(port, path, *args, **kw):
    return curl("http://127.0.0.1:%d%s" % (port, path), "--http2-prior-knowledge", *args, **kw)


def h2s(port, path, *args, **kw):
    return curl("https://localhost:%d%s" % (port, path), "--http2", "--resolve",
                "localhost:%d:127.0.0.1" % port, *args, **kw)


# -- a raw-frame client ----------------------------------------------------------------------

def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """A field as a literal without indexing, with a new (literal, not Huffman) name."""
    name, value = name.encode() if isinstance(name, str) else name, \
        value.encode() if isinstance(value, str) else value
    return (b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value)


def hpack(fields):
    return b"".join(hpack_literal(n, v) for n, v in fields)


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def request_fields(port, path="/index.html", method="GET", extra=()):
    return [(":method", method), (":scheme", "http"), (":authority", "127.0.0.1:%d" % port),
            (":path", path)] + list(extra)


class RawH2:
    """One prior-knowledge HTTP/2 connection with frames written and read by hand."""

    def __init__(self, port, settings=b"", timeout=5, preface=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.eof = False
        self.ack_pings = True
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings) if preface is None
                          else preface)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def headers(self, stream, fields, end_stream=True, end_headers=True):
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        self.send(frame(HEADERS, flags, stream, hpack(fields)))

    def read_frame(self, deadline):
        """The next frame (type, flags, stream, payload), or None at EOF or the deadline."""
        while True:
            if len(self.buf) >= 9:
                n = struct.unpack(">I", b"\x00" + self.buf[:3])[0]
                if len(self.buf) >= 9 + n:
                    t, fl = self.buf[3], self.buf[4]
                    sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff
                    payload = self.buf[9:9 + n]
                    self.buf = self.buf[9 + n:]
                    if (t == SETTINGS or (t == PING and self.ack_pings)) and not fl & ACK:
                        # As a client does: SETTINGS and PINGs are acknowledged (the
                        # server's PING after a shutdown GOAWAY waits for its ACK).
                        try:
                            self.send(frame(t, ACK, 0, payload if t == PING else b""))
                        except OSError:
                            pass
                    return t, fl, sid, payload
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
            self.buf += data

    def until(self, pred, timeout=5):
        """Frames read until pred(frame) is true: (frames, the matching frame or None)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            f = self.read_frame(deadline)
            if f is None:
                return seen, None
            seen.append(f)
            if pred(f):
                return seen, f

    def wait_closed(self, timeout):
        deadline = time.monotonic() + timeout
        while self.read_frame(deadline) is not None:
            pass
        return self.eof


def rst_code(f):
    return struct.unpack(">I", f[3][:4])[0]


def goaway(f):
    """(last stream id, error code) of a GOAWAY frame."""
    return struct.unpack(">I", f[3][:4])[0] & 0x7fffffff, struct.unpack(">I", f[3][4:8])[0]


def stream_done(frames, sid):
    """Whether frames hold the end of stream sid's response (END_STREAM on HEADERS/DATA)."""
    return any(f[2] == sid and f[0] in (HEADERS, DATA) and f[1] & END_STREAM for f in frames)


def data_bytes(frames, sid):
    return sum(len(f[3]) for f in frames if f[0] == DATA and f[2] == sid)


# -- the tests -------------------------------------------------------------------------------

class H2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url), files=files()))
        cls.plain, cls.tls, cls.plain_h1, cls.tls_h1 = cls.umbra.ports[:4]

    def seen(self, target):
        return len([r for r in self.origin.records() if r[1] == target])

    # -- where HTTP/2 is spoken --------------------------------------------------------------

    def test_static_prior_knowledge(self):
        r = h2c(self.plain, "/index.html")
        self.assertEqual((r.version, r.status), ("2", 200))
        self.assertEqual(r.body, b"hello over h2\n")
        self.assertEqual(r.header("content-length"), "14")
        self.assertTrue(r.header("date"))
        for hop in ("connection", "keep-alive", "transfer-encoding"):
            self.assertIsNone(r.header(hop))
        r = h2c(self.plain, "/big.bin")
        self.assertEqual(r.body, STATIC)

    def test_tls_alpn_offers_h2(self):
        r = h2s(self.tls, "/big.bin")
        self.assertEqual((r.version, r.status), ("2", 200))
        self.assertEqual(r.body, STATIC)

    def test_http2_false_listeners_speak_http1_only(self):
        r = h2s(self.tls_h1, "/index.html")
        self.assertEqual((r.version, r.status), ("1.1", 200))
        with socket.create_connection(("127.0.0.1", self.plain_h1), timeout=5) as s:
            s.sendall(PREFACE + frame(SETTINGS, 0, 0))
            data = s.recv(4096)
        self.assertTrue(data.startswith(b"HTTP/1.1 "), data)
        # HTTP/1.1 still works on the listeners that speak both.
        r = curl("http://127.0.0.1:%d/index.html" % self.plain, "--http1.1")
        self.assertEqual((r.version, r.status), ("1.1", 200))

    def test_lua_sees_http_version(self):
        self.assertEqual(h2c(self.plain, "/lua").body, b"2")
        self.assertEqual(h2s(self.tls, "/lua").body, b"2")
        self.assertEqual(curl("http://127.0.0.1:%d/lua" % self.plain).body, b"1.1")

    # -- the exchange over HTTP/2 -----------------------------------------------------------

    def test_upstream_post_body_streams_past_the_window(self):
        body = os.urandom(3 << 20)  # 48 times the 64 KB stream window
        with tempfile.NamedTemporaryFile() as f:
            f.write(body)
            f.flush()
            for run in (h2c, h2s):
                r = run(self.plain if run is h2c else self.tls, "/nocache/post?echo=1",
                        "--data-binary", "@" + f.name)
                self.assertEqual((r.version, r.status), ("2", 200))
                self.assertEqual(r.header("x-echo-body-length"), str(len(body)))
                self.assertEqual(r.header("x-echo-body-sha256"), hashlib.sha256(body).hexdigest())

    def test_upstream_sees_host_and_via(self):
        r = h2c(self.plain, "/nocache/head?echo=head", "-H", "X-Test: yes")
        head = r.body.decode("latin-1")
        self.assertIn("Host: 127.0.0.1:%d" % self.plain, head.replace("host:", "Host:"))
        self.assertRegex(head, r"(?i)via: 2 umbra")
        self.assertRegex(head, r"(?i)x-test: yes")

    def test_cookie_crumbs_are_joined_for_the_origin(self):
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/cookie?echo=head",
                                        extra=[("cookie", "a=1"), ("x-mid", "m"),
                                               ("cookie", "b=2"), ("cookie", "c=3")]))
            frames, f = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM)
            self.assertIsNotNone(f)
        head = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1).decode("latin-1")
        self.assertEqual(re.findall(r"(?im)^cookie: (.*?)\r$", head), ["a=1; b=2; c=3"], head)
        self.assertRegex(head, r"(?im)^x-mid: m\r$")

    def test_empty_cookie_crumbs_are_joined_without_a_sanitizer_report(self):
        # Issue #26: crumbs that are all empty joined into an empty buffer whose NULL base
        # went to memcpy (UBSan aborts the ASan+UBSan build's server, which fails this).
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/cookie-empty?echo=head",
                                        extra=[("cookie", ""), ("cookie", "")]))
            frames, f = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)
        head = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1).decode("latin-1")
        self.assertRegex(head, r"^GET /nocache/cookie-empty", head)
        self.assertLessEqual(len(re.findall(r"(?im)^cookie:", head)), 1, head)
        self.assertTrue(self.umbra.alive())

    def test_early_answer_resets_the_upload_with_no_error(self):
        # Answered before its body ended (a hook answers at once): the full response,
        # then RST_STREAM NO_ERROR so that the client stops sending (RFC 9113 8.1).
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/lua", "POST"), end_stream=False)
            c.send(frame(DATA, 0, 1, b"x" * 1000))
            frames, f = c.until(lambda f: f[2] == 1 and f[0] == RST_STREAM)
            self.assertIsNotNone(f, frames)
            self.assertEqual(rst_code(f), NO_ERROR)
            self.assertTrue(stream_done(frames, 1), frames)
            # The connection goes on.
            c.headers(3, request_fields(self.plain))
            _, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
            self.assertIsNotNone(f)

    def test_expect_100_continue(self):
        # An interim HEADERS (the 100) comes before any body is sent; then the response.
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/cont?echo=1", "POST",
                                        [("expect", "100-continue"), ("content-length", "5")]),
                      end_stream=False)
            frames, f = c.until(lambda f: f[2] == 1 and f[0] == HEADERS, timeout=5)
            self.assertIsNotNone(f, frames)
            self.assertFalse(f[1] & END_STREAM)
            c.send(frame(DATA, END_STREAM, 1, b"hello"))
            frames, f = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)
            self.assertEqual(len([f for f in frames if f[0] == HEADERS and f[2] == 1]), 1)
            self.assertTrue(b"".join(f[3] for f in frames if f[0] == DATA).endswith(b"hello"))

    def test_interim_responses_reach_http2_clients(self):
        # 1xx from the origin (and Early Hints from a hook) are HEADERS frames of their own
        # before the response's, as over HTTP/1.1 (i17's send_info, conn_h2.c).
        link = "</h2.css>; rel=preload"
        target = ("/nocache/info?info=102&info=103&infoh=" +
                  urllib.parse.quote("Link: " + link))
        for port, scheme, flag in ((self.plain, "http", "--http2-prior-knowledge"),
                                   (self.tls, "https", "--http2")):
            with tempfile.TemporaryDirectory() as d:
                hfile = os.path.join(d, "h")
                p = subprocess.run(
                    ["curl", "-s", "-k", "--max-time", "20", flag, "-D", hfile, "-o", os.devnull,
                     "--resolve", "localhost:%d:127.0.0.1" % port,
                     "%s://localhost:%d%s" % (scheme, port, target)],
                    capture_output=True, timeout=30)
                self.assertEqual(p.returncode, 0, p.stderr)
                with open(hfile, "rb") as f:
                    text = f.read().decode("latin-1")
            statuses = re.findall(r"^HTTP/2 (\d+)", text, re.M)
            self.assertEqual(statuses, ["102", "103", "200"], text)
            hints = text.split("HTTP/2 103")[1].split("HTTP/2 200")[0]
            self.assertIn("link: " + link, hints.lower(), text)

    def test_large_response_through_small_windows(self):
        n = 6 << 20
        r = h2c(self.plain, "/nocache/big?size=%d" % n, "--limit-rate", "8M")
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), n)
        self.assertEqual(r.body, origin_body(n))

    def test_body_cut_short_by_the_origin_resets_the_stream(self):
        # The origin sends its head and half its body, then closes: the client must not
        # take what it got for the whole (RST_STREAM, no END_STREAM), and the connection's
        # other streams go on.
        with RawH2(self.plain, settings=struct.pack(">HI", 0x4, 0x7fffffff)) as c:
            c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7fffffff - 65535)))
            c.headers(1, request_fields(self.plain, "/nocache/cut?size=200000&drop=body"))
            frames, f = c.until(lambda f: f[2] == 1 and (f[1] & END_STREAM or f[0] == RST_STREAM),
                                timeout=10)
            self.assertIsNotNone(f, "neither END_STREAM nor RST_STREAM")
            self.assertEqual(f[0], RST_STREAM, "the cut body ended like a whole one")
            self.assertLess(data_bytes(frames, 1), 200000)
            c.headers(3, request_fields(self.plain))
            _, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
            self.assertIsNotNone(f, "stream 3 not answered")
        r = h2c(self.plain, "/nocache/cut2?size=200000&drop=body")
        self.assertLess(len(r.body), 200000)

    def test_cache_hit_of_a_large_object_on_many_streams(self):
        # A 1 MiB hit on 8 streams of one connection at once, each body whole and right
        # (its slices borrowed from the cache until their frames are written).
        t = "/up/big-hit?cc=max-age%3D60&size=1048576"
        self.assertEqual(h2c(self.plain, t).body, origin_body(1 << 20))
        with RawH2(self.plain, settings=struct.pack(">HI", 0x4, 0x7fffffff)) as c:
            c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7fffffff - 65535)))
            ids = [1 + 2 * i for i in range(8)]
            for sid in ids:
                c.headers(sid, request_fields(self.plain, t))
            done = set()

            def progress(f):
                if f[0] in (HEADERS, DATA) and f[1] & END_STREAM:
                    done.add(f[2])
                return f[0] in (RST_STREAM, GOAWAY) or len(done) == len(ids)
            frames, f = c.until(progress, timeout=30)
            self.assertIsNotNone(f, "%d of %d streams done" % (len(done), len(ids)))
            self.assertNotIn(f[0], (RST_STREAM, GOAWAY), f)
            for sid in ids:
                body = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == sid)
                self.assertEqual(body, origin_body(1 << 20), sid)
        self.assertEqual(self.seen(t), 1)

    def test_cache_miss_hit_and_purge(self):
        t = "/up/cached?cc=max-age%3D60&size=100000"
        r1 = h2c(self.plain, t)
        self.assertIn("fwd=uri-miss", r1.header("cache-status"))
        r2 = h2c(self.plain, t)
        self.assertEqual(r2.version, "2")
        self.assertRegex(r2.header("cache-status"), r"umbra; hit")
        self.assertEqual(r2.body, origin_body(100000))
        self.assertEqual(self.seen(t), 1)
        self.assertEqual(h2c(self.plain, t, "-X", "PURGE").status, 200)
        r3 = h2c(self.plain, t)
        self.assertNotRegex(r3.header("cache-status"), r"; hit")
        self.assertEqual(self.seen(t), 2)

    def test_range_and_conditionals(self):
        r = h2c(self.plain, "/big.bin", "-r", "1000-1999")
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, STATIC[1000:2000])
        etag = h2c(self.plain, "/big.bin", "-I").header("etag")
        self.assertTrue(etag)
        r = h2c(self.plain, "/big.bin", "-H", "If-None-Match: " + etag)
        self.assertEqual((r.status, r.body), (304, b""))

    def test_head_request(self):
        r = h2c(self.plain, "/big.bin", "-I")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("content-length"), str(len(STATIC)))

    @unittest.skipUnless(have("h2load"), "h2load (nghttp2-client) not installed")
    def test_many_streams_on_few_connections(self):
        for scheme, port, path in (("http", self.plain, "/index.html"),
                                   ("http", self.plain, "/nocache/many?size=3000"),
                                   ("https", self.tls, "/nocache/many-tls?size=3000")):
            before = self.seen(path)
            p = subprocess.run(["h2load", "-n", "400", "-c", "2", "-m", "64",
                                "%s://127.0.0.1:%d%s" % (scheme, port, path)],
                               capture_output=True, timeout=60)
            out = p.stdout.decode()
            self.assertIn("400 succeeded, 0 failed", out, out)
            self.assertIn("400 2xx", out, out)
            if path.startswith("/nocache"):
                self.assertEqual(self.seen(path) - before, 400)

    @unittest.skipUnless(have("nghttp"), "nghttp (nghttp2-client) not installed")
    def test_nghttp_client(self):
        p = subprocess.run(["nghttp", "-nv", "http://127.0.0.1:%d/index.html" % self.plain,
                            "http://127.0.0.1:%d/nocache/ng?size=20000" % self.plain],
                           capture_output=True, timeout=30)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, out)
        self.assertEqual(len(re.findall(r":status: 200", out)), 2, out)

    def test_metrics_and_access_log_say_http2(self):
        h2c(self.plain, "/index.html?logged-h2")
        body = curl("http://127.0.0.1:%d/metrics" % admin_port(self.umbra)).body.decode()
        m = re.search(r"^umbra_http2_streams_total (\d+)", body, re.M)
        self.assertTrue(m and int(m.group(1)) > 0, body)
        m = re.search(r"^umbra_http2_connections_total (\d+)", body, re.M)
        self.assertTrue(m and int(m.group(1)) > 0, body)
        log = self.umbra.path("access.log")

        def logged():
            if not os.path.exists(log):
                return False
            with open(log, errors="replace") as f:
                return "GET /index.html?logged-h2 HTTP/2.0" in f.read()
        self.assertTrue(wait_until(logged, timeout=5))

    # -- RFC 9113 stream errors --------------------------------------------------------------

    def assertStreamError(self, fields, code=PROTOCOL_ERROR):
        with RawH2(self.plain) as c:
            c.headers(1, fields)
            _, f = c.until(lambda f: f[2] == 1 and f[0] in (RST_STREAM, HEADERS, GOAWAY))
            self.assertIsNotNone(f, "no answer on stream 1")
            self.assertEqual(f[0], RST_STREAM, f)
            self.assertEqual(rst_code(f), code)
            # A stream error, not a connection error: the next stream is answered.
            c.headers(3, request_fields(self.plain))
            frames, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)

    def test_uppercase_field_name_is_a_stream_error(self):
        self.assertStreamError(request_fields(self.plain, extra=[("X-Upper", "1")]))

    def test_connection_specific_fields_are_stream_errors(self):
        # An Upgrade (WebSocket's handshake) does not exist in HTTP/2 either: the stream is
        # reset, not tunnelled.
        for field in (("connection", "keep-alive"), ("transfer-encoding", "chunked"),
                      ("keep-alive", "5"), ("te", "gzip"), ("upgrade", "websocket")):
            with self.subTest(field=field):
                self.assertStreamError(request_fields(self.plain, extra=[field]))

    def test_pseudo_field_rules(self):
        p = self.plain
        cases = {
            "no :path": [f for f in request_fields(p) if f[0] != ":path"],
            "no :method": [f for f in request_fields(p) if f[0] != ":method"],
            "twice :path": request_fields(p) + [(":path", "/x")],
            "pseudo after regular": [(":method", "GET"), ("accept", "*/*"), (":scheme", "http"),
                                     (":path", "/"), (":authority", "x")],
            "unknown pseudo": request_fields(p, extra=[(":protocol", "x")]),
            "response pseudo": request_fields(p) + [(":status", "200")],
            "empty :path": [(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                            (":path", "")],
        }
        for name, fields in cases.items():
            with self.subTest(case=name):
                self.assertStreamError(fields)

    def test_streams_past_max_concurrent_streams_are_refused(self):
        # max_concurrent_streams = 64: of 70 streams opened at once (before the client
        # acknowledged the server's SETTINGS), 6 are refused with REFUSED_STREAM (RFC 9113
        # 5.1.2, 8.7: safe to retry) and 64 are answered.
        with RawH2(self.plain) as c:
            ids = [1 + 2 * i for i in range(70)]
            c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, sid, hpack(
                request_fields(self.plain, "/nocache/conc?delay=300&n=%d" % sid))) for sid in ids))
            done, refused = set(), set()

            def progress(f):
                if f[0] == RST_STREAM:
                    self.assertEqual(rst_code(f), 0x7)
                    refused.add(f[2])
                elif f[0] in (HEADERS, DATA) and f[1] & END_STREAM:
                    done.add(f[2])
                return len(done) + len(refused) == 70
            _, f = c.until(progress, timeout=15)
            self.assertIsNotNone(f, (len(done), len(refused)))
            self.assertEqual((len(done), len(refused)), (64, 6))

    def test_streams_past_acknowledged_limit_end_the_connection(self):
        # Once the client acknowledged SETTINGS_MAX_CONCURRENT_STREAMS, going past it is a
        # connection error (nghttp2's choice, RFC 9113 5.1.2): GOAWAY, then the close.
        with RawH2(self.plain) as c:
            c.until(lambda f: f[0] == SETTINGS and f[1] & ACK)
            c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, hpack(
                request_fields(self.plain, "/nocache/conc2?delay=2000&n=%d" % i)))
                for i in range(70)))
            _, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
            self.assertIsNotNone(f)
            self.assertEqual(goaway(f), (127, PROTOCOL_ERROR))
            self.assertTrue(c.wait_closed(5))
        # The upstream work of the 64 streams it had begun is cancelled.
        self.assertTrue(wait_until(lambda: self.origin_active() == 0, timeout=5),
                        self.origin_stats())

    def test_host_must_agree_with_authority(self):
        # (curl turns a Host header into :authority: raw frames say both.)
        def body(extra):
            with RawH2(self.plain) as c:
                c.headers(1, request_fields(self.plain, extra=extra))
                frames, f = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM)
                self.assertIsNotNone(f)
                return b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1)
        self.assertEqual(body([("host", "elsewhere.test")]), b"400 Bad Request\n")
        self.assertEqual(body([("host", "127.0.0.1:%d" % self.plain)]), b"hello over h2\n")

    def test_header_list_past_the_limit_gets_431(self):
        r = h2c(self.plain, "/index.html", "-H", "X-Big: " + "a" * 20000)
        self.assertEqual((r.version, r.status), ("2", 431))
        # The connection's other streams are not affected.
        self.assertEqual(h2c(self.plain, "/index.html").status, 200)

    # -- hostile clients ---------------------------------------------------------------------

    def test_continuation_flood_gets_goaway(self):
        with RawH2(self.plain) as c:
            fields = hpack(request_fields(self.plain))
            c.send(frame(HEADERS, 0, 1, fields))
            flood = b"".join(frame(CONTINUATION, 0, 1, b"") for _ in range(200))
            try:
                c.send(flood)
            except (BrokenPipeError, ConnectionResetError):
                pass
            _, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
            self.assertIsNotNone(f, "no GOAWAY")
            self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)
            self.assertTrue(c.wait_closed(5))

    def test_rapid_reset_gets_goaway(self):
        with RawH2(self.plain) as c:
            out = b""
            for i in range(600):
                sid = 1 + 2 * i
                out += frame(HEADERS, END_STREAM | END_HEADERS, sid,
                             hpack(request_fields(self.plain, "/nocache/rr?delay=3000")))
                out += frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
            try:
                c.send(out)
            except (BrokenPipeError, ConnectionResetError):
                pass
            _, f = c.until(lambda f: f[0] == GOAWAY, timeout=10)
            self.assertIsNotNone(f, "no GOAWAY")
            self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)
            self.assertTrue(c.wait_closed(5))
        # The upstream work those streams began is cancelled, not left running.
        self.assertTrue(wait_until(lambda: self.origin_active() == 0, timeout=5),
                        self.origin_stats())
        self.assertEqual(h2c(self.plain, "/index.html").status, 200)

    def origin_stats(self):
        return self.origin._control("/__stats")

    def origin_active(self):
        m = re.search(r"active\D*(\d+)", self.origin_stats())
        return int(m.group(1)) if m else -1

    def test_reset_stream_cancels_its_upstream_request(self):
        with RawH2(self.plain) as c:
            for sid in (1, 3, 5):
                c.headers(sid, request_fields(self.plain, "/nocache/cancel?delay=5000&n=%d" % sid))
            self.assertTrue(wait_until(lambda: self.origin_active() >= 3, timeout=5),
                            self.origin_stats())
            for sid in (1, 3, 5):
                c.send(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))
            self.assertTrue(wait_until(lambda: self.origin_active() == 0, timeout=3),
                            self.origin_stats())
            # The connection carries on.
            c.headers(7, request_fields(self.plain))
            _, f = c.until(lambda f: f[2] == 7 and f[1] & END_STREAM)
            self.assertIsNotNone(f)

    def test_rst_stream_keeps_the_frame_scan_in_step(self):
        # Bug: a received RST_STREAM set the CONTINUATION counter's scan back to "skip the
        # 24-byte client preface", so it read the client's next bytes out of step with
        # their frames. A legal SETTINGS frame whose payload, read 24 bytes in, looks like
        # ten empty CONTINUATION frame headers then got GOAWAY ENHANCE_YOUR_CALM.
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/scan?delay=2000"))
            c.send(frame(RST_STREAM, 0, 1, struct.pack(">I", CANCEL)))
            time.sleep(0.3)  # the reset is read alone: the next bytes come in a read of their own
            fake = b"\x00\x00\x00" + bytes([CONTINUATION]) + b"\x00" * 5
            payload = bytearray(18 * 6)  # 18 entries; unknown identifiers are ignored
            pos = 24 - 9  # the scan's wrong start, in the payload
            for _ in range(10):
                payload[pos:pos + 9] = fake
                pos += 9
            c.send(frame(SETTINGS, 0, 0, bytes(payload)))
            c.headers(3, request_fields(self.plain))
            frames, f = c.until(lambda f: f[0] == GOAWAY or (f[2] == 3 and f[1] & END_STREAM))
            self.assertIsNotNone(f, frames)
            self.assertNotEqual(f[0], GOAWAY, "GOAWAY %r" % (goaway(f),) if f[0] == GOAWAY else "")

    def test_head_that_never_ends_times_out(self):
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain), end_headers=False)
            start = time.monotonic()
            self.assertTrue(c.wait_closed(HEADER_TIMEOUT + SLACK + 1))
            self.assertLess(time.monotonic() - start, HEADER_TIMEOUT + SLACK)

    def test_silent_connection_times_out(self):
        with socket.create_connection(("127.0.0.1", self.plain), timeout=10) as s:
            s.sendall(PREFACE[:10])
            start = time.monotonic()
            s.settimeout(HEADER_TIMEOUT + SLACK + 1)
            try:
                while s.recv(4096):
                    pass
            except (socket.timeout, ConnectionResetError):
                self.fail("not closed")
            self.assertLess(time.monotonic() - start, HEADER_TIMEOUT + SLACK)

    def test_ping_and_settings_floods_get_goaway(self):
        # A client that sends PINGs (or SETTINGS) and never reads the ACKs: once more than
        # nghttp2's outbound ACK limit wait, GOAWAY ENHANCE_YOUR_CALM, and the server
        # serves everyone else meanwhile.
        for name, one in (("PING", frame(PING, 0, 0, b"12345678")),
                          ("SETTINGS", frame(SETTINGS, 0, 0))):
            with self.subTest(flood=name), RawH2(self.plain) as c:
                c.sock.settimeout(2)
                try:
                    for _ in range(20):
                        c.send(one * 1000)
                except (socket.timeout, BrokenPipeError, ConnectionResetError):
                    pass
                _, f = c.until(lambda f: f[0] == GOAWAY, timeout=10)
                self.assertIsNotNone(f, "no GOAWAY")
                self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)
                self.assertEqual(h2c(self.plain, "/index.html").status, 200)

    def assertCalm(self, c, timeout=10):
        """c gets GOAWAY ENHANCE_YOUR_CALM and is closed; another client is served."""
        _, f = c.until(lambda f: f[0] == GOAWAY, timeout=timeout)
        self.assertIsNotNone(f, "no GOAWAY")
        self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)
        self.assertTrue(c.wait_closed(5))
        self.assertEqual(h2c(self.plain, "/index.html").status, 200)

    def test_ping_and_settings_floods_of_a_reading_client_get_goaway(self):
        # The client reads every ACK, so nghttp2's limit of queued ACKs never trips: the
        # budget of frames that do no work does (1000 at once, 100/s after).
        for name, one, ack in (("PING", frame(PING, 0, 0, b"12345678"), PING),
                               ("SETTINGS", frame(SETTINGS, 0, 0), SETTINGS)):
            with self.subTest(flood=name), RawH2(self.plain) as c:
                got = None
                for _ in range(30):
                    try:
                        c.send(one * 200)
                    except (BrokenPipeError, ConnectionResetError):
                        break
                    acks = [0]

                    def counted(f):
                        if f[0] == ack and f[1] & ACK:
                            acks[0] += 1
                        return f[0] == GOAWAY or acks[0] >= 200
                    _, got = c.until(counted, timeout=5)
                    if got is None or got[0] == GOAWAY:
                        break
                self.assertIsNotNone(got, "neither the ACKs nor a GOAWAY came")
                self.assertEqual(got[0], GOAWAY, "6000 %s frames read and answered" % name)
                self.assertEqual(goaway(got)[1], ENHANCE_YOUR_CALM)
                self.assertTrue(c.wait_closed(5))
                self.assertEqual(h2c(self.plain, "/index.html").status, 200)

    def test_priority_flood_gets_goaway(self):
        # PRIORITY frames for idle streams are legal and ask for nothing back.
        with RawH2(self.plain) as c:
            try:
                c.send(b"".join(frame(PRIORITY, 0, 1 + 2 * i, struct.pack(">IB", 0, 15))
                                for i in range(3000)))
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertCalm(c)

    def test_empty_data_flood_gets_goaway(self):
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/empty?delay=3000", "POST"),
                      end_stream=False)
            try:
                c.send(frame(DATA, 0, 1) * 3000)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.assertCalm(c)

    def test_a_few_pings_and_priorities_are_fine(self):
        # The budget leaves room for what real clients do.
        with RawH2(self.plain) as c:
            c.send(frame(PING, 0, 0, b"abcdefgh") * 50 +
                   frame(PRIORITY, 0, 3, struct.pack(">IB", 0, 200)) * 50)
            c.headers(1, request_fields(self.plain))
            frames, f = c.until(lambda f: f[0] == GOAWAY or (f[2] == 1 and f[1] & END_STREAM))
            self.assertIsNotNone(f, frames)
            self.assertNotEqual(f[0], GOAWAY)
            self.assertEqual(len([f for f in frames if f[0] == PING and f[1] & ACK]), 50)

    def test_window_update_overflow(self):
        # A window past 2^31-1 (RFC 9113 6.9.1): on the connection, GOAWAY
        # FLOW_CONTROL_ERROR; on a stream, RST_STREAM FLOW_CONTROL_ERROR and the connection
        # goes on.
        with RawH2(self.plain) as c:
            c.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7fffffff)))
            _, f = c.until(lambda f: f[0] == GOAWAY)
            self.assertIsNotNone(f, "no GOAWAY")
            self.assertEqual(goaway(f)[1], FLOW_CONTROL_ERROR)
            self.assertTrue(c.wait_closed(5))
        with RawH2(self.plain) as c:
            c.headers(1, request_fields(self.plain, "/nocache/wu?delay=1000"))
            c.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0x7fffffff)))
            _, f = c.until(lambda f: f[2] == 1 and f[0] in (RST_STREAM, GOAWAY))
            self.assertIsNotNone(f, "no RST_STREAM")
            self.assertEqual((f[0], rst_code(f)), (RST_STREAM, FLOW_CONTROL_ERROR))
            c.headers(3, request_fields(self.plain))
            frames, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)

    def test_frames_on_the_wrong_stream_are_connection_errors(self):
        # RFC 9113 sections 5.1, 5.1.1 and 6: GOAWAY PROTOCOL_ERROR, then the close; other
        # clients are served.
        p = self.plain
        get = hpack(request_fields(p))
        cases = {
            "DATA on stream 0": frame(DATA, 0, 0, b"x"),
            "HEADERS on stream 0": frame(HEADERS, END_STREAM | END_HEADERS, 0, get),
            "SETTINGS on stream 1": frame(SETTINGS, 0, 1),
            "PING on stream 1": frame(PING, 0, 1, b"12345678"),
            "RST_STREAM on stream 0": frame(RST_STREAM, 0, 0, struct.pack(">I", CANCEL)),
            "GOAWAY on stream 1": frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)),
            "WINDOW_UPDATE of 0": frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)),
            "even client stream id": frame(HEADERS, END_STREAM | END_HEADERS, 2, get),
            "DATA on an idle stream": frame(DATA, END_STREAM, 7, b"x"),
            "CONTINUATION without HEADERS": frame(CONTINUATION, END_HEADERS, 1, get),
            "HEADERS interrupted": frame(HEADERS, END_STREAM, 1, get[:4]) +
            frame(PING, 0, 0, b"12345678"),
        }
        for name, data in cases.items():
            with self.subTest(case=name), RawH2(p) as c:
                c.send(data)
                _, f = c.until(lambda f: f[0] == GOAWAY)
                self.assertIsNotNone(f, "no GOAWAY")
                self.assertEqual(goaway(f)[1], PROTOCOL_ERROR)
                self.assertTrue(c.wait_closed(5))
        self.assertEqual(h2c(p, "/index.html").status, 200)

    def test_headers_on_a_skipped_stream_id_is_a_protocol_error(self):
        # Issue #26: stream 7 closed the idle streams 1, 3 and 5 (RFC 9113 5.1.1); HEADERS
        # on 5 afterwards was served. It is a connection error PROTOCOL_ERROR, and stream 5
        # gets nothing.
        p = self.plain
        with RawH2(p) as c:
            c.headers(7, request_fields(p))
            frames, f = c.until(lambda f: f[2] == 7 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)
            c.headers(5, request_fields(p))
            frames, f = c.until(lambda f: f[0] == GOAWAY)
            self.assertIsNotNone(f, "no GOAWAY: %r" % frames)
            self.assertEqual(goaway(f), (7, PROTOCOL_ERROR))
            frames += c.until(lambda f: False, timeout=1)[0]
            self.assertEqual([f for f in frames if f[2] == 5 and f[0] in (HEADERS, DATA)], [])
            self.assertTrue(c.wait_closed(5))
        # Trailers on a lower stream that is still open are no such error.
        with RawH2(p) as c:
            c.headers(1, request_fields(p, "/nocache/trailers?echo=1", "POST"), end_stream=False)
            c.headers(3, request_fields(p))
            c.send(frame(DATA, 0, 1, b"body"))
            c.headers(1, [("x-trailer", "t")])
            frames, f = c.until(lambda f: f[0] == GOAWAY or (f[2] == 1 and f[1] & END_STREAM))
            self.assertIsNotNone(f, frames)
            self.assertNotEqual(f[0], GOAWAY, frames)
            frames += c.until(lambda f: stream_done(frames + [f], 3))[0]
            self.assertTrue(stream_done(frames, 3), frames)

    def test_invalid_preface_on_a_plain_listener_gets_goaway(self):
        # RFC 9113 3.4: an invalid connection preface is a connection error PROTOCOL_ERROR.
        # The sniffing plain listener took a preface that starts as HTTP/2's does and then
        # goes wrong for HTTP/1.1, and closed it without a GOAWAY.
        cases = {
            "wrong magic": b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + frame(SETTINGS, 0, 0),
            "no SETTINGS first": PREFACE + frame(PING, 0, 0, b"12345678"),
        }
        for name, data in cases.items():
            with self.subTest(case=name), RawH2(self.plain, preface=data) as c:
                _, f = c.until(lambda f: f[0] == GOAWAY)
                self.assertIsNotNone(f, "no GOAWAY")
                self.assertEqual(goaway(f), (0, PROTOCOL_ERROR))
                self.assertTrue(c.wait_closed(5))
        # A listener without HTTP/2 still reads it as an HTTP/1.1 request.
        with socket.create_connection(("127.0.0.1", self.plain_h1), timeout=5) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n")
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 "))

    def test_content_length_must_match_the_data(self):
        # RFC 9113 8.1.1: a request whose DATA add up to more or less than its
        # content-length is malformed: RST_STREAM PROTOCOL_ERROR; the origin gets no
        # request of it; the connection goes on.
        for n, cl in ((5, 10), (5, 3)):
            with self.subTest(data=n, content_length=cl), RawH2(self.plain) as c:
                target = "/nocache/cl-%d-%d?echo=1" % (n, cl)
                c.headers(1, request_fields(self.plain, target, "POST",
                                            [("content-length", str(cl))]), end_stream=False)
                c.send(frame(DATA, END_STREAM, 1, b"x" * n))
                _, f = c.until(lambda f: f[2] == 1 and f[0] in (RST_STREAM, GOAWAY))
                self.assertIsNotNone(f, "no RST_STREAM")
                self.assertEqual((f[0], rst_code(f)), (RST_STREAM, PROTOCOL_ERROR))
                c.headers(3, request_fields(self.plain))
                frames, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
                self.assertIsNotNone(f, frames)
                self.assertFalse([r for r in self.origin.records() if r[1] == target])

    def test_hpack_bomb_gets_431(self):
        # One 4000-byte field put into the HPACK table, then referenced 200 times with a
        # byte each: 800 KB of head from 4 KB on the wire. Past max_header_list (16 KB)
        # nothing more is kept and the stream gets 431; the connection goes on.
        bomb = b"\x40" + hpack_int(6, 7) + b"x-bomb" + hpack_int(4000, 7) + b"a" * 4000
        bomb += b"\xbe" * 200  # indexed field 62: the newest entry of the table
        with RawH2(self.plain) as c:
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1,
                         hpack(request_fields(self.plain)) + bomb))
            frames, f = c.until(lambda f: f[2] == 1 and (f[1] & END_STREAM or f[0] == RST_STREAM))
            self.assertIsNotNone(f, frames)
            body = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1)
            self.assertEqual(body, b"431 Request Header Fields Too Large\n")
            c.headers(3, request_fields(self.plain))
            frames, f = c.until(lambda f: f[2] == 3 and f[1] & END_STREAM)
            self.assertIsNotNone(f, frames)
        self.assertTrue(self.umbra.alive())

    def test_body_read_with_its_head_reaches_the_origin(self):
        # Bug: a request without content-length whose DATA and END_STREAM came in the same
        # read as its HEADERS went to the origin with no body (neither Content-Length nor
        # chunked: the stream's body was taken as absent).
        with RawH2(self.plain) as c:
            c.send(frame(HEADERS, END_HEADERS, 1, hpack(request_fields(
                self.plain, "/nocache/oneread?echo=1", "POST"))) +
                frame(DATA, 0, 1, b"abc") + frame(DATA, END_STREAM, 1, b"defg"))
            frames, f = c.until(lambda f: f[2] == 1 and (f[1] & END_STREAM or f[0] == RST_STREAM))
            self.assertIsNotNone(f, frames)
            body = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1)
            self.assertTrue(body.endswith(b"\r\n\r\nabcdefg"), body)
            self.assertRegex(body, rb"(?i)\r\ncontent-length: 7\r\n")
        self.assertIn(("POST", "/nocache/oneread?echo=1", 7), self.origin.records())

    def test_request_trailers_are_accepted(self):
        # A request body followed by trailers (a HEADERS frame with END_STREAM, RFC 9113
        # 8.1): the origin gets the whole body, the client the answer.
        with RawH2(self.plain) as c:
            c.send(frame(HEADERS, END_HEADERS, 1, hpack(request_fields(
                self.plain, "/nocache/trailers?echo=1", "POST"))) +
                frame(DATA, 0, 1, b"hello ") + frame(DATA, 0, 1, b"world") +
                frame(HEADERS, END_STREAM | END_HEADERS, 1, hpack([("x-checksum", "abc")])))
            frames, f = c.until(lambda f: f[2] == 1 and (f[1] & END_STREAM or f[0] == RST_STREAM))
            self.assertIsNotNone(f, frames)
            self.assertNotEqual(f[0], RST_STREAM, frames)
            body = b"".join(f[3] for f in frames if f[0] == DATA and f[2] == 1)
            self.assertTrue(body.endswith(b"hello world"), body)
            self.assertRegex(body, rb"(?i)^POST /nocache/trailers\?echo=1 HTTP/1.1\r\n")

    def test_bad_preface_closes(self):
        # RFC 9113 3.4: the client's preface is the magic and a SETTINGS frame; a first
        # frame of another type (a GOAWAY here) is a connection error of type
        # PROTOCOL_ERROR: a GOAWAY with that code, then the connection closes.
        with socket.create_connection(("127.0.0.1", self.plain), timeout=5) as s:
            s.sendall(PREFACE + b"\x00\x00\x04\x07\x00\x00\x00\x00\x00garbage-frames-here")
            data, closed = b"", False
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    d = s.recv(4096)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    closed = True
                    break
                if not d:
                    closed = True
                    break
                data += d
        self.assertTrue(closed, "the connection stayed open after a bad preface: %r" % data)
        frames = []
        while len(data) >= 9:
            n = struct.unpack(">I", b"\x00" + data[:3])[0]
            frames.append((data[3], data[4], struct.unpack(">I", data[5:9])[0] & 0x7fffffff,
                           data[9:9 + n]))
            data = data[9 + n:]
        away = [f for f in frames if f[0] == GOAWAY]
        self.assertEqual(len(away), 1, frames)
        self.assertEqual(goaway(away[0]), (0, PROTOCOL_ERROR), frames)
        # Only this connection ended: the server still answers.
        self.assertTrue(self.umbra.alive())
        r = h2c(self.plain, "/index.html")
        self.assertEqual((r.version, r.status), ("2", 200))


class H2GoawayTest(unittest.TestCase):
    """Reload and stop: GOAWAY, and the streams in flight finish."""

    def test_goaway_on_reload_lets_streams_finish(self):
        with Origin() as o, Umbra(config(o.url), files=files()) as u:
            with RawH2(u.ports[0]) as c:
                c.headers(1, request_fields(u.ports[0], "/nocache/slow?delay=1000&size=50000"))
                wait_until(lambda: len(o.records()) >= 1, timeout=5)
                os.kill(u.proc.pid, signal.SIGHUP)
                # RFC 9113 6.8: first a GOAWAY that refuses nothing (2^31-1) and a PING,
                # then, once the PING's ACK came back, the GOAWAY with the last stream.
                frames, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
                self.assertIsNotNone(f, "no GOAWAY after the reload")
                self.assertEqual(goaway(f), (0x7fffffff, NO_ERROR))
                more, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
                frames += more
                self.assertIsNotNone(f, "no final GOAWAY")
                self.assertEqual(goaway(f), (1, NO_ERROR))
                self.assertTrue(any(g[0] == PING and not g[1] & ACK for g in frames), frames)
                frames2, _ = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM, timeout=5)
                frames += frames2
                self.assertTrue(stream_done(frames, 1), frames)
                self.assertEqual(data_bytes(frames, 1), 50000)
                self.assertTrue(c.wait_closed(5))
            # New connections are served by the new configuration.
            self.assertEqual(h2c(u.ports[0], "/index.html").status, 200)

    def test_shutdown_ping_never_acknowledged(self):
        # A client that does not answer the shutdown PING gets the final GOAWAY after the
        # header timeout, and the connection ends once its stream is done.
        with Origin() as o, Umbra(config(o.url), files=files()) as u:
            with RawH2(u.ports[0]) as c:
                c.ack_pings = False
                c.headers(1, request_fields(u.ports[0], "/nocache/noack?delay=300"))
                wait_until(lambda: len(o.records()) >= 1, timeout=5)
                os.kill(u.proc.pid, signal.SIGHUP)
                frames, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
                self.assertIsNotNone(f, "no GOAWAY after the reload")
                self.assertEqual(goaway(f), (0x7fffffff, NO_ERROR))
                start = time.monotonic()
                more, f = c.until(lambda f: f[0] == GOAWAY, timeout=HEADER_TIMEOUT + SLACK + 2)
                self.assertIsNotNone(f, "no final GOAWAY")
                self.assertEqual(goaway(f), (1, NO_ERROR))
                self.assertLess(time.monotonic() - start, HEADER_TIMEOUT + SLACK)
                self.assertTrue(stream_done(frames + more, 1), frames + more)
                self.assertTrue(c.wait_closed(5))

    def test_goaway_on_stop_lets_streams_finish(self):
        with Origin() as o, Umbra(config(o.url), files=files()) as u:
            with RawH2(u.ports[0]) as c:
                c.headers(1, request_fields(u.ports[0], "/nocache/slow?delay=1000&size=30000"))
                wait_until(lambda: len(o.records()) >= 1, timeout=5)
                os.kill(u.proc.pid, signal.SIGTERM)
                frames, f = c.until(lambda f: f[0] == GOAWAY, timeout=5)
                self.assertIsNotNone(f, "no GOAWAY on stop")
                self.assertEqual(goaway(f)[1], NO_ERROR)
                frames2, _ = c.until(lambda f: f[2] == 1 and f[1] & END_STREAM, timeout=5)
                self.assertTrue(stream_done(frames + frames2, 1))
                self.assertEqual(data_bytes(frames + frames2, 1), 30000)
            self.assertEqual(u.proc.wait(10), 0, u.log())


class StreamingClient(threading.Thread):
    """A client that keeps 32 streams in flight on one prior-knowledge connection (most
    of them static files answered at once, every 8th one an upstream request that takes
    300 ms) until the server's first GOAWAY, then reads until the connection closes, and
    counts the streams it sent before that GOAWAY that did not complete: reset, or never
    answered (refused by a GOAWAY whose last stream id is below them)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.done, self.failed, self.goaways, self.sent = set(), set(), [], 0
        self.closed = False
        self.error = None

    def run(self):
        try:
            self.drive()
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = repr(e)

    def drive(self):
        with RawH2(self.port, timeout=10) as c:
            sid, outstanding = 1, set()
            stop_at = time.monotonic() + 20
            while time.monotonic() < stop_at and not c.eof:
                if not self.goaways and len(outstanding) < 32:
                    batch = []
                    while len(outstanding) < 32:
                        path = ("/nocache/inflight?delay=300&n=%d" % sid if sid % 16 == 1
                                else "/index.html")
                        batch.append(frame(HEADERS, END_STREAM | END_HEADERS, sid,
                                           hpack(request_fields(self.port, path))))
                        outstanding.add(sid)
                        sid += 2
                    c.send(b"".join(batch))
                f = c.read_frame(time.monotonic() + (0.005 if not self.goaways else 1))
                if f is None:
                    continue
                if f[0] == GOAWAY:
                    if not self.goaways:
                        stop_at = time.monotonic() + 8  # the rest must end by then
                    self.goaways.append(goaway(f))
                elif f[0] == RST_STREAM:
                    self.failed.add(f[2])
                    outstanding.discard(f[2])
                elif f[0] in (HEADERS, DATA) and f[1] & END_STREAM:
                    self.done.add(f[2])
                    outstanding.discard(f[2])
            self.closed = c.eof
            self.failed |= outstanding
            self.sent = (sid - 1) // 2


class H2GracefulShutdownTest(unittest.TestCase):
    """Issue #26: one SIGHUP under h2load failed HTTP/2 requests that were in flight: the
    GOAWAY said the last stream the server had seen, so the streams the client had sent
    meanwhile were refused. Now every stream sent before the GOAWAY completes, on reload
    and on a graceful stop."""

    CONNS = 4

    def run_clients(self, u, sig):
        port = u.ports[0]
        clients = [StreamingClient(port) for _ in range(self.CONNS)]
        for t in clients:
            t.start()
        self.assertTrue(wait_until(lambda: all(len(t.done) >= 200 for t in clients) or
                                   any(t.error for t in clients), timeout=10),
                        [len(t.done) for t in clients])
        os.kill(u.proc.pid, sig)
        for t in clients:
            t.join(30)
            self.assertFalse(t.is_alive())
        for t in clients:
            self.assertIsNone(t.error)
            self.assertTrue(t.goaways, "no GOAWAY")
            self.assertEqual(sorted(t.failed), [], "streams failed of %d sent, GOAWAYs %r"
                             % (t.sent, t.goaways))
            self.assertEqual(len(t.done), t.sent)
            self.assertTrue(t.closed)
        return clients

    def test_reload_fails_no_stream_in_flight(self):
        with Origin() as o, Umbra(config(o.url), files=files()) as u:
            self.run_clients(u, signal.SIGHUP)
            self.assertEqual(h2c(u.ports[0], "/index.html").status, 200)
            self.assertTrue(u.alive())

    def test_stop_fails_no_stream_in_flight(self):
        with Origin() as o, Umbra(config(o.url), files=files()) as u:
            self.run_clients(u, signal.SIGTERM)
            self.assertEqual(u.proc.wait(10), 0, u.log())


ROUTES = 'routes = { { path = "/", root = "www" } }\n'


class H2SendTimeoutTest(unittest.TestCase):
    def test_window_never_opened_hits_the_send_timeout(self):
        # SETTINGS_INITIAL_WINDOW_SIZE = 0 and never a WINDOW_UPDATE: the response cannot
        # move, and the send timeout ends the connection (and cancels the origin).
        with Origin() as o, Umbra(config(o.url, send=1), files=files()) as u:
            with RawH2(u.ports[0], settings=struct.pack(">HI", 0x4, 0)) as c:
                c.headers(1, request_fields(u.ports[0], "/nocache/stuck?size=5000000"))
                start = time.monotonic()
                self.assertTrue(c.wait_closed(1 + SLACK + 2))
                self.assertLess(time.monotonic() - start, 1 + SLACK + 1)
            self.assertEqual(h2c(u.ports[0], "/index.html").status, 200)


class H2ConfigTest(unittest.TestCase):
    def test_bad_settings_name_file_and_line(self):
        cases = [
            ('http2 = { max_concurrent_streams = 0 }', "http2.max_concurrent_streams"),
            ('http2 = { initial_window = "1KB" }', "http2.initial_window"),
            ('http2 = { max_header_list = "1GB" }', "http2.max_header_list"),
            ('http2 = { streams = 5 }', "http2"),
            ('http2 = true', "http2"),
            ('listen = { { "127.0.0.1:0", http2 = "yes" } }', "listen.1.http2"),
        ]
        for text, what in cases:
            with self.subTest(text=text):
                with Umbra("\n\n" + text + "\n" + ROUTES, files={"www/x": "x"},
                           expect_fail=True) as u:
                    self.assertNotEqual(u.returncode, 0)
                    self.assertRegex(u.log(), r"config\.lua:5: .*%s" % re.escape(what))

    def test_settings_are_announced(self):
        with Umbra('http2 = { max_concurrent_streams = 7, initial_window = "100KB", '
                   'max_header_list = "20KB" }\n' + ROUTES, files={"www/x": "x"}) as u:
            with RawH2(u.port) as c:
                _, f = c.until(lambda f: f[0] == SETTINGS and not f[1] & ACK)
                self.assertIsNotNone(f)
                got = {}
                for i in range(0, len(f[3]), 6):
                    k, v = struct.unpack(">HI", f[3][i:i + 6])
                    got[k] = v
                self.assertEqual(got.get(0x3), 7)
                self.assertEqual(got.get(0x4), 100 * 1024)
                self.assertEqual(got.get(0x6), 20 * 1024)


class H2PromisesTest(unittest.TestCase):
    """Issue #26, README: "more than 200 resets in a burst, 50/s after) and more than 8
    CONTINUATION frames in a row ... get GOAWAY ENHANCE_YOUR_CALM": each at its boundary,
    the limit passing on one connection and one past it failing on another."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url), files=files()))
        cls.plain = cls.umbra.ports[0]

    def served_or_goaway(self, c, sid):
        """The stream's last frame, or a GOAWAY, whichever came first."""
        frames, f = c.until(lambda f: f[0] == GOAWAY or (f[2] == sid and f[1] & END_STREAM),
                            timeout=10)
        self.assertIsNotNone(f, frames)
        return frames, f

    def continuations(self, n):
        """A request whose head is a HEADERS frame and n CONTINUATION frames: its answer's
        frames and the last one (the stream's end or a GOAWAY)."""
        block = hpack(request_fields(self.plain))
        self.assertGreater(len(block), n + 1)
        step = len(block) // (n + 1)
        pieces = [block[i * step:(i + 1) * step] for i in range(n)] + [block[n * step:]]
        out = frame(HEADERS, END_STREAM, 1, pieces[0])
        for i, p in enumerate(pieces[1:]):
            out += frame(CONTINUATION, END_HEADERS if i == n - 1 else 0, 1, p)
        with RawH2(self.plain) as c:
            try:
                c.send(out)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return self.served_or_goaway(c, 1)

    def test_8_continuation_frames_pass_the_9th_gets_goaway(self):
        frames, f = self.continuations(8)
        self.assertNotEqual(f[0], GOAWAY, "GOAWAY %r" % (goaway(f),) if f[0] == GOAWAY else "")
        self.assertEqual(data_bytes(frames, 1), len(b"hello over h2\n"))
        _, f = self.continuations(9)
        self.assertEqual(f[0], GOAWAY)
        self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)

    def resets(self, n):
        """n streams opened and reset at once, then one more request: the frames after."""
        out = b""
        for i in range(n):
            sid = 1 + 2 * i
            out += frame(HEADERS, END_STREAM | END_HEADERS, sid,
                         hpack(request_fields(self.plain, "/nocache/burst?delay=3000")))
            out += frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL))
        last = 1 + 2 * n
        out += frame(HEADERS, END_STREAM | END_HEADERS, last, hpack(request_fields(self.plain)))
        with RawH2(self.plain) as c:
            try:
                c.send(out)  # one write: the burst arrives well within 20 ms (1 token at 50/s)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return self.served_or_goaway(c, last)

    def test_200_resets_pass_the_201st_gets_goaway(self):
        frames, f = self.resets(200)
        self.assertNotEqual(f[0], GOAWAY, "GOAWAY %r" % (goaway(f),) if f[0] == GOAWAY else "")
        self.assertEqual(data_bytes(frames, f[2]), len(b"hello over h2\n"))
        _, f = self.resets(201)
        self.assertEqual(f[0], GOAWAY)
        self.assertEqual(goaway(f)[1], ENHANCE_YOUR_CALM)
        self.assertTrue(wait_until(lambda: self.origin_active() == 0, timeout=5))

    def origin_active(self):
        m = re.search(r"active\D*(\d+)", self.origin._control("/__stats"))
        return int(m.group(1)) if m else -1


if __name__ == "__main__":
    unittest.main()
