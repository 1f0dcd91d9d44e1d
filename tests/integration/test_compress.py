"""Compression (issue #16): gzip, br and zstd on the fly, the cache's compressed variants,
precompressed static files, against the real binary.

Bodies are checked by decompressing them as a client would: gzip with Python's zlib, br
and zstd with the Debian `brotli` and `zstd` tools. The scripted test origin
(tests/origin/origin.c) answers what its query asks for (`?size=N&ct=TYPE&cc=...`), and
counts what reached it (its --record file), so the tests also check how many fills the
cache made.
"""

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest
import zlib
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, fetch_req, origin_body)  # noqa: E402

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
        r = get(self.umbra.port, "/nc/slow?size=300000&slow=5&piece=8192&chunked=1&" + JSON,
                "gzip")
        self.check_coded(r, "gzip", 300000)

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
        r = None
        try:
            r = get(self.umbra.port, "/nc/drop?size=200000&drop=body&" + JSON, "gzip")
        except Exception:
            return  # the connection ended without a complete response: right
        # A complete-looking response must not decode as the whole body.
        try:
            body = decode("gzip", r.body)
        except (ValueError, zlib.error):
            return
        self.assertNotEqual(body, origin_body(200000))

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


class CacheVariantTest(unittest.TestCase):
    """A cached route: one fill per coding bucket, hits served as stored."""

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
            self.assertEqual(seen(o, "/v"), 4)  # one fill per bucket

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
    origin cannot compare validators): 5000 bytes of JSON, ETag "v3", max-age=1."""

    def __enter__(self):
        body = origin_body(5000)
        seen = self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                seen.append(self.headers.get("If-None-Match"))
                cond = self.headers.get("If-None-Match") is not None
                self.send_response(304 if cond else 200)
                self.send_header("ETag", '"v3"')
                self.send_header("Cache-Control", "max-age=1")
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
        with RevalidatingOrigin() as o, Umbra(upstream(o.url)) as u:
            r = get(u.port, "/rv", "gzip")
            self.assertEqual(r.header("ETag"), 'W/"v3"')
            time.sleep(2.2)
            for _ in range(2):
                r = get(u.port, "/rv", "gzip")
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("Content-Encoding"), "gzip", r.raw_head)
                self.assertEqual(decode("gzip", r.body), origin_body(5000))
                self.assertEqual(r.header("ETag"), 'W/"v3"', r.raw_head)
            self.assertEqual(o.requests[0], None)
            self.assertIn('W/"v3"', o.requests[1] or "")

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
