"""Static file serving: bodies, types, validators, ranges, directories, methods, and
never a byte from outside the root."""

import email.utils
import hashlib
import os
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (HttpAssertions, Umbra, class_context, connect, exchange,  # noqa: E402
                           parse_responses, read_response, req)

HELLO = b"0123456789abcdefghijklmnop"  # 26 bytes: ranges are easy to check
SECRET = b"TOPSECRET-do-not-serve-3f1c\n"
BIG = os.urandom(5 << 20)
MTIME = 1700000000  # 2023-11-14T22:13:20Z

CONFIG = """
mime = { wasm = "application/wasm", txt = "text/x-umbra-test" }
routes = {
  { host = "a.test", path = "/", root = "hosta" },
  { path = "/static/", root = "pub" },
  { path = "/", root = "www", index = "index.html" },
}
"""

FILES = {
    "www/index.html": "<html>root index</html>\n",
    "www/hello.bin": HELLO,
    "www/hello.txt": "text file\n",
    "www/style.css": "body { color: red }\n",
    "www/img.png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    "www/blob.unknownext": b"\x00\x01\x02",
    "www/noext": b"no extension",
    "www/mod.wasm": b"\x00asm\x01\x00\x00\x00",
    "www/PAGE.HTML": "<p>upper case extension</p>",
    "www/empty.bin": b"",
    "www/big.bin": BIG,
    "www/which.txt": "default host\n",
    "www/dir/index.html": "<html>dir index</html>\n",
    "www/dir/sub.txt": "sub\n",
    "www/noindex/file.txt": "x\n",
    "www/a/b/c.txt": "c\n",
    "www/space name.txt": "spaced\n",
    "pub/a.txt": "public a\n",
    "hosta/which.txt": "host a\n",
    "secret": SECRET,
}


def make_links(d):
    os.utime(os.path.join(d, "www/hello.bin"), (MTIME, MTIME))
    os.symlink(os.path.join(d, "secret"), os.path.join(d, "www/link_out"))
    os.symlink("../secret", os.path.join(d, "www/link_out_rel"))
    os.symlink(d, os.path.join(d, "www/dirlink_out"))
    os.symlink("hello.bin", os.path.join(d, "www/link_in"))
    os.symlink("dir", os.path.join(d, "www/dirlink_in"))


class StaticTest(unittest.TestCase, HttpAssertions):
    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra(CONFIG, files=FILES, setup=make_links))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def get(self, path, method="GET", headers=(), host="localhost", timeout=5):
        """One request on its own connection; returns the parsed response after checking
        the headers every response must carry."""
        data, closed = exchange(self.port, req(path, method, headers, host=host), timeout=timeout)
        self.assertTrue(closed, "server did not close after Connection: close (%r)" % path)
        rs = parse_responses(data, head_methods=[method == "HEAD"])
        self.assertEqual(len(rs), 1, "one response for %s %r, got %r" % (method, path, data[:300]))
        r = rs[0]
        self.assertCommonHeaders(r, body_framed=r.status != 304)
        if r.status != 304 and method != "HEAD":
            self.assertEqual(int(r.header("Content-Length")), len(r.body))
        return r

    # -- bodies and types ---------------------------------------------------------------

    def test_file_body_and_length(self):
        r = self.get("/hello.bin")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)
        self.assertEqual(r.header("Content-Length"), "26")

    def test_content_types(self):
        cases = {
            "/index.html": "text/html; charset=utf-8",
            "/style.css": "text/css",
            "/img.png": "image/png",
            "/blob.unknownext": "application/octet-stream",
            "/noext": "application/octet-stream",
            "/mod.wasm": "application/wasm",          # mime override adds a type
            "/hello.txt": "text/x-umbra-test",         # mime override replaces one
            "/PAGE.HTML": "text/html; charset=utf-8",  # extensions match case-insensitively
        }
        for path, want in cases.items():
            with self.subTest(path=path):
                r = self.get(path)
                self.assertEqual(r.status, 200)
                got = r.header("Content-Type")
                self.assertIsNotNone(got)
                if want == "text/css":
                    self.assertRegex(got, r"^text/css(; ?charset=utf-8)?$")
                else:
                    self.assertEqual(got, want)

    def test_zero_byte_file(self):
        r = self.get("/empty.bin")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Length"), "0")
        self.assertEqual(r.body, b"")

    def test_big_file_intact(self):
        r = self.get("/big.bin", timeout=20)
        self.assertEqual(r.status, 200)
        self.assertEqual(int(r.header("Content-Length")), len(BIG))
        self.assertEqual(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(BIG).hexdigest())

    def test_percent_encoded_name(self):
        r = self.get("/space%20name.txt")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"spaced\n")

    def test_query_string_ignored_for_files(self):
        r = self.get("/hello.bin?v=1&x=%2e%2e")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)

    # -- validators ---------------------------------------------------------------------

    def test_etag_and_last_modified(self):
        r = self.get("/hello.bin")
        etag = r.header("ETag")
        self.assertIsNotNone(etag)
        self.assertRegex(etag, r'^(W/)?"[^"]+"$')
        lm = r.header("Last-Modified")
        self.assertIsNotNone(lm)
        self.assertEqual(email.utils.parsedate_to_datetime(lm).timestamp(), MTIME)
        # Stable across requests.
        self.assertEqual(self.get("/hello.bin").header("ETag"), etag)
        # Different files, different tags.
        self.assertNotEqual(self.get("/style.css").header("ETag"), etag)

    def test_if_none_match_304(self):
        etag = self.get("/hello.bin").header("ETag")
        for inm in (etag, '"nope", ' + etag, "*"):
            with self.subTest(inm=inm):
                r = self.get("/hello.bin", headers=[("If-None-Match", inm)])
                self.assertEqual(r.status, 304)
                self.assertEqual(r.body, b"")
                self.assertEqual(r.header("ETag"), etag)

    def test_304_has_no_body_on_keepalive(self):
        etag = self.get("/hello.bin").header("ETag")
        with connect(self.port) as s:
            s.sendall(("GET /hello.bin HTTP/1.1\r\nHost: x\r\nIf-None-Match: %s\r\n\r\n"
                       % etag).encode())
            r = read_response(s)
            self.assertEqual(r.status, 304)
            self.assertCommonHeaders(r, body_framed=False)
            s.sendall(b"GET /hello.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            r = read_response(s)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, HELLO)

    def test_if_none_match_other_etag_200(self):
        r = self.get("/hello.bin", headers=[("If-None-Match", '"definitely-not-it"')])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)

    def test_if_modified_since_304(self):
        lm = self.get("/hello.bin").header("Last-Modified")
        r = self.get("/hello.bin", headers=[("If-Modified-Since", lm)])
        self.assertEqual(r.status, 304)
        self.assertEqual(r.body, b"")
        later = email.utils.formatdate(MTIME + 3600, usegmt=True)
        self.assertEqual(self.get("/hello.bin", headers=[("If-Modified-Since", later)]).status, 304)

    def test_if_modified_since_older_200(self):
        earlier = email.utils.formatdate(MTIME - 3600, usegmt=True)
        r = self.get("/hello.bin", headers=[("If-Modified-Since", earlier)])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)

    def test_if_none_match_wins_over_if_modified_since(self):
        # RFC 9110 13.2.2: If-Modified-Since is ignored when If-None-Match is present.
        lm = self.get("/hello.bin").header("Last-Modified")
        r = self.get("/hello.bin", headers=[("If-None-Match", '"other"'),
                                            ("If-Modified-Since", lm)])
        self.assertEqual(r.status, 200)

    def test_weak_comparison_for_if_none_match(self):
        etag = self.get("/hello.bin").header("ETag").removeprefix("W/")
        r = self.get("/hello.bin", headers=[("If-None-Match", "W/" + etag)])
        self.assertEqual(r.status, 304)

    def test_if_modified_since_obsolete_date_formats(self):
        for date in ("Tuesday, 14-Nov-23 22:13:20 GMT", "Tue Nov 14 22:13:20 2023"):
            with self.subTest(date=date):
                self.assertEqual(self.get("/hello.bin",
                                          headers=[("If-Modified-Since", date)]).status, 304)

    def test_if_modified_since_garbage_ignored(self):
        r = self.get("/hello.bin", headers=[("If-Modified-Since", "yesterday-ish")])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)

    def test_head_if_modified_since_304(self):
        lm = self.get("/hello.bin").header("Last-Modified")
        r = self.get("/hello.bin", method="HEAD", headers=[("If-Modified-Since", lm)])
        self.assertEqual(r.status, 304)

    # -- ranges -------------------------------------------------------------------------

    def check_range(self, spec, first, last):
        r = self.get("/hello.bin", headers=[("Range", spec)])
        self.assertEqual(r.status, 206, spec)
        self.assertEqual(r.header("Content-Range"), "bytes %d-%d/%d" % (first, last, len(HELLO)))
        self.assertEqual(r.body, HELLO[first:last + 1])
        self.assertEqual(int(r.header("Content-Length")), last - first + 1)
        return r

    def test_range_first_bytes(self):
        self.check_range("bytes=0-9", 0, 9)

    def test_range_suffix(self):
        self.check_range("bytes=-5", 21, 25)

    def test_range_open_ended(self):
        self.check_range("bytes=10-", 10, 25)

    def test_range_end_past_size_is_clamped(self):
        self.check_range("bytes=20-1000", 20, 25)

    def test_range_on_big_file(self):
        r = self.get("/big.bin", headers=[("Range", "bytes=1000000-1000099")])
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, BIG[1000000:1000100])

    def test_range_unsatisfiable_416(self):
        for spec in ("bytes=100-200", "bytes=26-"):
            with self.subTest(spec=spec):
                r = self.get("/hello.bin", headers=[("Range", spec)])
                self.assertEqual(r.status, 416)
                self.assertEqual(r.header("Content-Range"), "bytes */26")

    def test_multiple_ranges_give_full_200(self):
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-1,5-6")])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)
        self.assertIsNone(r.header("Content-Range"))

    def test_if_range(self):
        etag = self.get("/hello.bin").header("ETag")
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-9"), ("If-Range", '"stale"')])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-9"), ("If-Range", etag)])
        self.assertEqual(r.status, 206)
        self.assertEqual(r.body, HELLO[:10])

    def test_range_on_empty_file_416(self):
        r = self.get("/empty.bin", headers=[("Range", "bytes=0-0")])
        self.assertEqual(r.status, 416)
        self.assertEqual(r.header("Content-Range"), "bytes */0")

    def test_invalid_range_ignored(self):
        for spec in ("bytes=5-2", "bytes=abc", "items=0-1", "bytes=", "bytes=--1"):
            with self.subTest(spec=spec):
                r = self.get("/hello.bin", headers=[("Range", spec)])
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, HELLO)

    def test_range_suffix_longer_than_file(self):
        self.check_range("bytes=-100", 0, 25)

    def test_range_zero_suffix_416(self):
        r = self.get("/hello.bin", headers=[("Range", "bytes=-0")])
        self.assertEqual(r.status, 416)
        self.assertEqual(r.header("Content-Range"), "bytes */26")

    def test_if_range_by_date_and_weak_etag(self):
        r = self.get("/hello.bin")
        lm, etag = r.header("Last-Modified"), r.header("ETag").removeprefix("W/")
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-1"), ("If-Range", lm)])
        self.assertEqual((r.status, r.body), (206, HELLO[:2]))
        later = email.utils.formatdate(MTIME + 1, usegmt=True)
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-1"), ("If-Range", later)])
        self.assertEqual((r.status, r.body), (200, HELLO))
        # If-Range uses the strong comparison: a weak tag never matches.
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-1"), ("If-Range", "W/" + etag)])
        self.assertEqual((r.status, r.body), (200, HELLO))

    def test_not_modified_wins_over_range(self):
        etag = self.get("/hello.bin").header("ETag")
        r = self.get("/hello.bin", headers=[("Range", "bytes=0-3"), ("If-None-Match", etag)])
        self.assertEqual(r.status, 304)

    # -- HEAD ---------------------------------------------------------------------------

    def test_head_same_headers_no_body(self):
        get = self.get("/hello.bin")
        with connect(self.port) as s:
            s.sendall(b"HEAD /hello.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            head = read_response(s, head=True)
            self.assertEqual(head.status, 200)
            self.assertCommonHeaders(head)
            for name in ("Content-Length", "Content-Type", "ETag", "Last-Modified"):
                self.assertEqual(head.header(name), get.header(name), name)
            # No body follows: the next bytes on the connection are the next response.
            time.sleep(0.2)
            s.sendall(b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n")
            r = read_response(s)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, b"body { color: red }\n")

    def test_head_of_errors_has_no_body(self):
        reqs = (b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                b"HEAD /noindex/ HTTP/1.1\r\nHost: x\r\n\r\n"
                b"HEAD /dir HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data, closed = exchange(self.port, reqs)
        self.assertTrue(closed)
        rs = parse_responses(data, head_methods=["HEAD", "HEAD", "HEAD", "GET"])
        self.assertEqual([r.status for r in rs], [404, 403, 301, 200])
        self.assertEqual(rs[3].body, b"body { color: red }\n")

    # -- directories --------------------------------------------------------------------

    def test_root_index(self):
        r = self.get("/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"<html>root index</html>\n")
        self.assertEqual(r.header("Content-Type"), "text/html; charset=utf-8")

    def test_directory_index(self):
        r = self.get("/dir/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"<html>dir index</html>\n")

    def check_redirect(self, target, want_path, want_query):
        r = self.get(target)
        self.assertEqual(r.status, 301, target)
        loc = urllib.parse.urlsplit(r.header("Location", ""))
        self.assertEqual(loc.path, want_path, r.header("Location"))
        self.assertEqual(loc.query, want_query, r.header("Location"))

    def test_directory_without_slash_redirects(self):
        self.check_redirect("/dir", "/dir/", "")

    def test_directory_redirect_keeps_query(self):
        self.check_redirect("/dir?x=1&y=2", "/dir/", "x=1&y=2")

    def test_directory_without_index_403(self):
        self.assertEqual(self.get("/noindex/").status, 403)

    def test_missing_404(self):
        self.assertEqual(self.get("/nope.txt").status, 404)
        self.assertEqual(self.get("/nodir/nope.txt").status, 404)

    def test_file_with_trailing_slash_not_served_as_dir(self):
        r = self.get("/hello.bin/")
        self.assertIn(r.status, (404, 301))
        self.assertNotEqual(r.status, 200)

    # -- methods ------------------------------------------------------------------------

    def test_other_methods_405(self):
        for method in ("POST", "PUT", "DELETE", "FOO", "PATCH"):
            with self.subTest(method=method):
                r = self.get("/hello.bin", method=method, headers=[("Content-Length", "0")])
                self.assertEqual(r.status, 405)
                allow = [m.strip() for m in r.header("Allow", "").split(",")]
                self.assertEqual(sorted(allow), ["GET", "HEAD"])

    # -- routes -------------------------------------------------------------------------

    def test_prefix_route_strips_prefix(self):
        r = self.get("/static/a.txt")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"public a\n")
        # The prefix is not looked up under the catch-all root.
        self.assertEqual(self.get("/static/hello.bin").status, 404)

    def test_bug_route_prefix_matched_before_percent_decoding(self):
        # %69 is "i": /stat%69c/a.txt and /static/a.txt are the same URI (RFC 3986 6.2.2.2)
        # and the file lookup does decode it, so route matching must agree with it.
        r = self.get("/stat%69c/a.txt")
        self.assertEqual((r.status, r.body), (200, b"public a\n"))

    def test_host_routes(self):
        cases = [("a.test", b"host a\n"), ("a.test:8080", b"host a\n"), ("A.TEST", b"host a\n"),
                 ("b.test", b"default host\n"), ("localhost", b"default host\n"),
                 ("a.test.evil", b"default host\n")]
        for host, body in cases:
            with self.subTest(host=host):
                r = self.get("/which.txt", host=host)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, body)

    def test_absolute_form_authority_wins_over_host(self):
        # RFC 9112 3.2.2: with an absolute-form target, Host is replaced by its authority.
        data, _ = exchange(self.port, b"GET http://a.test/which.txt HTTP/1.1\r\nHost: b.test\r\n"
                                      b"Connection: close\r\n\r\n")
        rs = parse_responses(data)
        self.assertEqual([r.status for r in rs], [200])
        self.assertEqual(rs[0].body, b"host a\n")

    # -- confinement --------------------------------------------------------------------

    def assertNotLeaked(self, target, host="localhost"):
        data, _ = exchange(self.port, req(target, host=host), timeout=5)
        self.assertNotIn(b"TOPSECRET", data, target)
        self.assertNotIn(b"root:", data, target)
        rs = parse_responses(data, strict=False)
        self.assertEqual(len(rs), 1, "%r -> %r" % (target, data[:300]))
        self.assertIn(rs[0].status, (400, 403, 404), target)
        return rs[0]

    def test_path_traversal(self):
        for target in ("/../secret", "/%2e%2e/secret", "/%2E%2E%2fsecret", "/%2e%2e%2Fsecret",
                       "/a/..%2f..%2fsecret", "/a/b/../../../secret", "/./../secret",
                       "/..%5csecret", "/%00", "/hello.bin%00.txt", "/a\\..\\..\\secret",
                       "/a\\..\\secret", "//etc/passwd", "/..", "/../", "/%2e%2e",
                       "/static/../secret", "/static/%2e%2e/secret", "/..%c0%afsecret"):
            with self.subTest(target=target):
                self.assertNotLeaked(target)

    def test_dot_segments_inside_root_served(self):
        # As nginx does: dot segments are resolved before routing, and a path that stays
        # inside the root after that is the file it names, on the route it now matches
        # ("/static/../" leaves the /static/ route for the one on "/").
        index = b"<html>root index</html>\n"
        cases = {"/a/b/../b/c.txt": b"c\n", "/a/../index.html": index,
                 "/a/./b/c.txt": b"c\n", "/a/b/%2E/c.txt": b"c\n",
                 "/a/%2e%2e/index.html": index, "/a/b/../../a/b/c.txt": b"c\n",
                 "/static/../index.html": index, "/static/%2e%2e/hello.bin": HELLO}
        for target, body in cases.items():
            with self.subTest(target=target):
                r = self.get(target)
                self.assertEqual(r.status, 200, r.raw_head)
                self.assertEqual(r.body, body)

    def test_dot_segments_above_root_are_400(self):
        # A ".." that climbs above "/" has nothing to resolve to: the request is malformed
        # (400, as nginx answers it), whichever route its first segments name.
        for target in ("/..", "/../", "/%2e%2e", "/../secret", "/%2e%2e/secret",
                       "/./../secret", "/a/b/../../../secret", "/a/%2E%2E/%2e%2e/secret",
                       "/static/../../secret", "/a/../../index.html"):
            with self.subTest(target=target):
                r = self.assertNotLeaked(target)
                self.assertEqual(r.status, 400, r.raw_head)

    def test_symlink_out_of_root_refused(self):
        for target in ("/link_out", "/link_out_rel", "/dirlink_out/secret"):
            with self.subTest(target=target):
                self.assertNotLeaked(target)
                self.assertIn(self.get(target).status, (403, 404))

    def test_symlink_inside_root_served(self):
        r = self.get("/link_in")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, HELLO)
        r = self.get("/dirlink_in/sub.txt")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"sub\n")



class SmallFileCopyTest(unittest.TestCase):
    """Each worker keeps small files it served; a change on disk is seen by the very next
    request (one stat per request checks the copy), and the copy never outlives what the
    root may serve."""

    def setUp(self):
        self.umbra = Umbra('routes = { { path = "/", root = "www" } }\n',
                           files={"www/c.txt": "one\n", "secret": SECRET})
        self.umbra.__enter__()
        self.addCleanup(self.umbra.__exit__, None, None, None)
        self.path = os.path.join(self.umbra.dir, "www/c.txt")
        # Older than the window in which a file's next change could keep its timestamps:
        # only such a file is kept.
        time.sleep(2.1)

    def fetch_all(self, target, times=6):
        """target on new connections, spread over the workers: the bodies (or statuses)."""
        out = set()
        for _ in range(times):
            data, _ = exchange(self.umbra.port, req(target))
            r = parse_responses(data)[0]
            out.add(r.body if r.status == 200 else r.status)
        return out

    def test_same_size_rewrite_is_seen_at_once(self):
        self.assertEqual(self.fetch_all("/c.txt"), {b"one\n"})
        with open(self.path, "wb") as f:
            f.write(b"two\n")
        self.assertEqual(self.fetch_all("/c.txt"), {b"two\n"})
        # And written again at once, within the same clock tick: not kept, still seen.
        with open(self.path, "wb") as f:
            f.write(b"six\n")
        self.assertEqual(self.fetch_all("/c.txt"), {b"six\n"})

    def test_deleted_file_is_404(self):
        self.assertEqual(self.fetch_all("/c.txt"), {b"one\n"})
        os.unlink(self.path)
        self.assertEqual(self.fetch_all("/c.txt"), {404})

    def test_file_swapped_for_a_symlink_out_of_the_root_is_refused(self):
        self.assertEqual(self.fetch_all("/c.txt"), {b"one\n"})
        os.unlink(self.path)
        os.symlink(os.path.join(self.umbra.dir, "secret"), self.path)
        got = self.fetch_all("/c.txt")
        self.assertNotIn(SECRET, got)
        self.assertTrue(got <= {403, 404}, got)

    def test_etag_follows_the_file(self):
        data, _ = exchange(self.umbra.port, req("/c.txt"))
        etag = parse_responses(data)[0].header("ETag")
        for _ in range(4):
            data, _ = exchange(self.umbra.port, req("/c.txt", headers=[("If-None-Match", etag)]))
            self.assertEqual(parse_responses(data)[0].status, 304)
        os.utime(self.path, (MTIME, MTIME))
        for _ in range(4):
            data, _ = exchange(self.umbra.port, req("/c.txt", headers=[("If-None-Match", etag)]))
            r = parse_responses(data)[0]
            self.assertEqual((r.status, r.body), (200, b"one\n"))
            self.assertNotEqual(r.header("ETag"), etag)


def rchar(pid):
    """Bytes the process read through read, pread and sendfile (/proc/PID/io), which a
    file served from disk adds to and a worker's copy of it does not."""
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/%d/io" % pid)


class SmallFileLimitsTest(unittest.TestCase):
    """Issue #26, README: "Each worker keeps the small files it served (up to 32 KiB each,
    8 MiB per worker)". Whether a request was answered from the worker's copy shows in the
    bytes the process read: a file sent from disk adds its size (sendfile counts), the copy
    nothing."""

    NFILES = 257  # 257 x 32 KiB is more than 8 MiB of bodies alone

    @classmethod
    def setUpClass(cls):
        files = {"www/k32768": "k" * 32768, "www/k32769": "k" * 32769}
        for i in range(cls.NFILES):
            files["www/f%03d" % i] = "%03d" % i + "f" * (32768 - 3)
        cls.umbra = class_context(cls, Umbra('routes = { { path = "/", root = "www" } }\n',
                                             files=files, workers=1))
        # Only a file older than the window in which its next change could keep its
        # timestamps is kept.
        time.sleep(2.1)

    def read_by(self, target):
        """Bytes read by the process while it answered target (a 200)."""
        before = rchar(self.umbra.proc.pid)
        data, _ = exchange(self.umbra.port, req(target))
        after = rchar(self.umbra.proc.pid)
        r = parse_responses(data)[0]
        self.assertEqual(r.status, 200, target)
        return after - before, r.body

    def kept(self, target):
        n, _ = self.read_by(target)
        return n < 4096

    def test_32KiB_file_is_kept_32KiB_plus_1_is_not(self):
        for name, size, keep in (("/k32768", 32768, True), ("/k32769", 32769, False)):
            n, body = self.read_by(name)  # the first answer reads the file either way
            self.assertEqual(len(body), size)
            self.assertGreaterEqual(n, size)
            for _ in range(3):
                self.assertEqual(self.kept(name), keep, name)

    def test_8MiB_per_worker(self):
        # 250 copies of 32 KiB (7.8 MiB of bodies, with what each entry costs besides) fit
        # in 8 MiB: the first is still kept; 257 do not, and the oldest goes first.
        for i in range(250):
            self.read_by("/f%03d" % i)
        self.assertTrue(self.kept("/f000"))
        self.assertTrue(self.kept("/f249"))
        for i in range(250, self.NFILES):
            self.read_by("/f%03d" % i)
        self.assertFalse(self.kept("/f000"), "257 x 32 KiB kept in 8 MiB")
        self.assertTrue(self.kept("/f%03d" % (self.NFILES - 1)))


if __name__ == "__main__":
    unittest.main()
