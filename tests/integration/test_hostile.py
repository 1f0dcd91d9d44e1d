"""Hostile clients and origins (issue #8): request smuggling and header injection through
the proxy, cache poisoning and deception, path traversal against static routes, and
resource exhaustion (slowloris, connection and descriptor limits, readers that never
read, origins that never stop or send garbage).

The scripted origin records every request it receives (`Origin.records()`), so each
smuggling test checks both what the client got and that nothing hidden in the request
reached the backend. test_http1.py checks the parser's refusals on a static route; here
the same attacks go through upstream routes, with the cache on and off.
"""

import os
import re
import resource
import socket
import sys
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, class_context, connect, exchange,  # noqa: E402
                           fetch_req, parse_response, parse_responses, recv_all, req,
                           sanitizer_build, vm_rss_kb, wait_until)

PROXY_CONFIG = """
timeouts = { header = 5 }
upstreams = { app = { servers = { "%s" }, timeout = 5 } }
routes = {
  { path = "/c/", upstream = "app", cache = true },
  { path = "/n/", upstream = "app", cache = false },
}
"""

# Both proxy routes: through the shared cache, and straight to the origin.
ROUTES = ("/c/", "/n/")


def smuggled(tag):
    """A complete request that must never reach the origin."""
    return b"GET /n/SMUGGLED-" + tag + b" HTTP/1.1\r\nHost: x\r\n\r\n"


class ProxyBase(unittest.TestCase):
    """One recording origin behind one umbra with a caching and a non-caching route."""

    workers = 2

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(PROXY_CONFIG % cls.origin.url, workers=cls.workers))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def settle_count(self, before, expected, timeout=2):
        """Waits until the origin has seen `expected` more requests than `before` (or the
        timeout), then gives a late one 100 ms to show up; returns the difference."""
        wait_until(lambda: self.origin.count() - before >= expected, timeout=timeout)
        time.sleep(0.1)
        return self.origin.count() - before

    def assertNothingSmuggled(self):
        bad = [r for r in self.origin.records() if b"SMUGGLED" in r[1].encode("latin-1")]
        self.assertEqual(bad, [], "a request hidden in another reached the origin")

    def assertRefused(self, template, statuses=(400,)):
        """template holds b"{P}" where the route prefix goes; a smuggled request follows.
        On both routes: one refusal, the connection closed, nothing reaches the origin."""
        for prefix in ROUTES:
            with self.subTest(route=prefix, raw=template[:80]):
                raw = template.replace(b"{P}", prefix.encode()) + smuggled(b"after")
                before = self.origin.count()
                data, closed = exchange(self.port, raw, timeout=5)
                rs = parse_responses(data)
                self.assertEqual(len(rs), 1, "one response to %r, got %r" % (raw, data[:500]))
                self.assertIn(rs[0].status, statuses, rs[0].raw_head)
                self.assertTrue(closed, "connection left open after a framing error: %r" % raw)
                self.assertEqual(self.settle_count(before, 0), 0,
                                 "the origin saw %r" % self.origin.records()[-3:])
                self.assertNothingSmuggled()


class SmugglingTest(ProxyBase):
    """Every ambiguous framing is refused before anything reaches the origin, and the
    connection is closed so the bytes after the head are never read as a request."""

    def assertForwardedOnce(self, template, body_len, target=b"/x"):
        """The request is accepted as one request whose body (as umbra decoded it) is
        body_len bytes; the origin sees exactly that one request and nothing else."""
        for prefix in ROUTES:
            with self.subTest(route=prefix, raw=template[:80]):
                path = prefix.encode() + b"fwd" + target[1:] + b"-%d" % time.monotonic_ns()
                raw = template.replace(b"{P}", path)
                before = self.origin.count()
                data, closed = exchange(self.port, raw, timeout=5)
                rs = parse_responses(data)
                self.assertEqual([r.status for r in rs], [200], data[:300])
                self.assertEqual(self.settle_count(before, 1), 1)
                method, tgt, n = self.origin.records()[-1]
                self.assertEqual(tgt.encode("latin-1"), path)
                self.assertEqual(n, body_len)
                self.assertNothingSmuggled()

    # -- CL.TE, TE.CL ----------------------------------------------------------------------

    def test_cl_te(self):
        # A front end that trusts Content-Length would forward "0\r\n\r\nGET /SMUGGLED..."
        # as the body; one that trusts chunked would see a second request.
        body = b"0\r\n\r\n" + smuggled(b"clte")
        self.assertRefused(b"POST {P}clte HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n" % len(body) + body)

    def test_te_cl(self):
        chunk = smuggled(b"tecl")
        self.assertRefused(b"POST {P}tecl HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                           b"Content-Length: 4\r\n\r\n%x\r\n" % len(chunk) + chunk +
                           b"\r\n0\r\n\r\n")

    # -- TE.TE: obfuscated codings ----------------------------------------------------------

    def test_obfuscated_transfer_codings_with_content_length_refused(self):
        # With a Content-Length beside it, any Transfer-Encoding at all is refused.
        for te in (b"chunked, identity", b" chunked", b"xchunked", b"CHUNKED", b"\tchunked",
                   b"chunked ", b"identity", b'"chunked"', b"chunked;q=1", b"chunk\x00ed"):
            with self.subTest(te=te):
                body = b"0\r\n\r\n" + smuggled(b"tete")
                self.assertRefused(b"POST {P}tete HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                                   b"Transfer-Encoding: " % len(body) + te + b"\r\n\r\n" + body,
                                   (400, 501))

    def test_obfuscated_transfer_codings_refused(self):
        # Codings that are not exactly a final "chunked": 501 for a coding umbra does not
        # know (RFC 9112 6.1), 400 for syntax that is not a coding at all.
        cases = [
            (b"chunked, identity", (400, 501)),
            (b"identity, chunked", (400, 501)),
            (b"xchunked", (501,)),
            (b"chunkedx", (501,)),
            (b"chunked, chunked", (400, 501)),
            (b'"chunked"', (400,)),
            (b"\x0bchunked", (400,)),
            (b"chunked\x0b", (400,)),
            (b"ch\x00unked", (400,)),
            (b"", (400,)),
        ]
        for te, statuses in cases:
            with self.subTest(te=te):
                self.assertRefused(b"POST {P}te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te +
                                   b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", statuses)

    def test_transfer_encoding_twice_refused(self):
        for second in (b"chunked", b"identity", b"gzip"):
            with self.subTest(second=second):
                self.assertRefused(b"POST {P}te2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                   b"chunked\r\nTransfer-Encoding: " + second +
                                   b"\r\n\r\n0\r\n\r\n", (400, 501))

    def test_transfer_encoding_name_obfuscated_refused(self):
        # Whitespace or odd bytes in or around the field name: not a field name.
        for line in (b"Transfer-Encoding : chunked", b"Transfer-Encoding\t: chunked",
                     b" Transfer-Encoding: chunked", b"Transfer_Encoding\x00: chunked",
                     b"Transfer-Encoding\r: chunked", b"X: y\r\n Transfer-Encoding: chunked"):
            with self.subTest(line=line):
                self.assertRefused(b"POST {P}ten HTTP/1.1\r\nHost: x\r\n" + line +
                                   b"\r\nContent-Length: 5\r\n\r\nhello")

    def test_lenient_spellings_of_chunked_read_as_chunked(self):
        # Case and whitespace around a value are not obfuscation: RFC 9110 makes codings
        # case-insensitive and OWS (SP or HTAB) optional. Read as chunked, the body is 5
        # bytes and what follows the last chunk is the next request on the connection,
        # which umbra forwards as such: the origin never gets bytes of one inside another.
        for te in (b"CHUNKED", b"Chunked", b"\tchunked", b"  chunked", b"chunked\t"):
            with self.subTest(te=te):
                self.assertForwardedOnce(b"POST {P} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                         b"Transfer-Encoding: " + te +
                                         b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 5)

    # -- Content-Length ---------------------------------------------------------------------

    def test_bad_content_lengths_refused(self):
        cases = [b"Content-Length: 5\r\nContent-Length: 5",      # duplicate, even equal
                 b"Content-Length: 5\r\nContent-Length: 40",     # conflicting
                 b"Content-Length: 5, 5", b"Content-Length: +5", b"Content-Length: -1",
                 b"Content-Length: 0x05", b"Content-Length: 5.0", b"Content-Length: 5 5",
                 b"Content-Length: \x0b5", b"Content-Length:", b"Content-Length: 1e1",
                 b"Content-Length : 5", b"Content-Length: 18446744073709551621"]
        for cl in cases:
            with self.subTest(cl=cl):
                self.assertRefused(b"POST {P}cl HTTP/1.1\r\nHost: x\r\n" + cl +
                                   b"\r\n\r\nhello", (400, 413))

    def test_huge_content_length_refused_with_413(self):
        self.assertRefused(b"POST {P}cl HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n"
                           b"\r\nhello", (413,))

    def test_get_with_body_hiding_a_request(self):
        # The body of a GET is a body: the origin sees one GET whose body is the bytes of
        # what looks like a request, never a second request.
        body = smuggled(b"getbody")
        self.assertForwardedOnce(b"GET {P} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body) + body, len(body))

    # -- chunk sizes and extensions ---------------------------------------------------------

    def test_bad_chunk_sizes_refused(self):
        for size in (b"ffffffffffffffffff", b"10000000000000000", b"-5", b"+5", b"0x5",
                     b"5g", b"g", b"", b" 5", b"5 5", b"\x005", b"5\x00"):
            with self.subTest(size=size):
                self.assertRefused(b"POST {P}chunk HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                   b"chunked\r\n\r\n" + size + b"\r\nhello\r\n0\r\n\r\n",
                                   (400, 413))

    def test_chunk_extensions_accepted(self):
        for ext in (b";a", b";a=b", b';a="q s"', b";a=b;c=d", b" ;a=b", b';a="\\"";b'):
            with self.subTest(ext=ext):
                self.assertForwardedOnce(b"POST {P} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                         b"Transfer-Encoding: chunked\r\n\r\n5" + ext +
                                         b"\r\nhello\r\n0" + ext + b"\r\n\r\n", 5)

    def test_bad_chunk_extensions_refused(self):
        for ext in (b";" + b"a" * 8000, b";a=" + b"b" * 8000, b";a=\"unterminated",
                    b";a\nb", b";a\rb", b";a=b\x00", b"; ;", b";=b", b';a="b"c'):
            with self.subTest(ext=ext[:20]):
                self.assertRefused(b"POST {P}ext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                   b"chunked\r\n\r\n5" + ext + b"\r\nhello\r\n0\r\n\r\n")

    def test_chunk_data_longer_than_size_refused(self):
        # 3 declared, 8 sent: the extra bytes must not become a request.
        self.assertRefused(b"POST {P}long HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                           b"\r\n3\r\nabcdefgh\r\n0\r\n\r\n")

    # -- line ends, control bytes, folding --------------------------------------------------

    def test_bare_lf_refused_everywhere(self):
        for raw in (b"POST {P}lf HTTP/1.1\nHost: x\r\nContent-Length: 0\r\n\r\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\nContent-Length: 0\r\n\r\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\nhello\r\n0\r\n\r\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\n0\r\n\r\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n0\n\n",
                    b"POST {P}lf HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"0\r\nX-Trailer: a\n\r\n"):
            with self.subTest(raw=raw):
                self.assertRefused(raw)

    def test_nul_and_cr_in_header_names_and_values_refused(self):
        for line in (b"X-\x00A: b", b"X-A\x00: b", b"X-\rA: b", b"X-A: a\x00b", b"X-A: a\rb",
                     b"X-A: a\r", b"Host\x00: y", b"X-A: \x7f", b"X-A: \x1b[31m"):
            with self.subTest(line=line):
                self.assertRefused(b"GET {P}ctl HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n\r\n")

    def test_obs_fold_refused(self):
        # A folded Transfer-Encoding is the classic one; any fold is refused (RFC 9112 5.2
        # allows replacing it with SP, but a proxy that does not must reject).
        for raw in (b"POST {P}fold HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-A: b\r\n"
                    b" Transfer-Encoding: chunked\r\n\r\nhello",
                    b"POST {P}fold HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n"
                    b"0\r\n\r\n",
                    b"GET {P}fold HTTP/1.1\r\nHost: x\r\nX-A: b\r\n\tc\r\n\r\n"):
            with self.subTest(raw=raw):
                self.assertRefused(raw)

    def test_trailer_cannot_reframe(self):
        # Content-Length or Transfer-Encoding in a trailer section means nothing: the
        # origin sees one request with the chunked body's length, and no smuggled one.
        self.assertForwardedOnce(b"POST {P} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
                                 b"Content-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n", 5)

    def test_pipelined_request_after_good_one_is_separate(self):
        # A well-framed body followed by a request: the second is a request of its own,
        # answered on the same connection, and the origin sees exactly the two targets.
        for prefix in ROUTES:
            with self.subTest(route=prefix):
                t = b"%spipe-%d" % (prefix.encode(), time.monotonic_ns())
                raw = (b"POST " + t + b"-1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                       b"GET " + t + b"-2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                before = self.origin.count()
                data, _ = exchange(self.port, raw)
                self.assertEqual([r.status for r in parse_responses(data)], [200, 200])
                self.assertEqual(self.settle_count(before, 2), 2)
                got = [(m, tg, n) for m, tg, n in self.origin.records()
                       if tg.startswith(t.decode())]
                self.assertEqual(sorted(got), [("GET", t.decode() + "-2", 0),
                                               ("POST", t.decode() + "-1", 5)])


class HeaderInjectionTest(ProxyBase):
    """CR or LF in the target cannot add a field or a request on the way to the origin."""

    def test_raw_cr_lf_in_target_refused(self):
        for target in (b"{P}a\r\nX-Injected: 1", b"{P}a\nX-Injected: 1", b"{P}a\rX-Injected: 1",
                       b"{P}a?q=\r\nGET /n/SMUGGLED HTTP/1.1", b"{P}a\x00b", b"{P}a\tb"):
            self.assertRefused(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")

    def test_encoded_cr_lf_stays_encoded(self):
        # Percent-encoded CR LF goes to the origin as the same bytes, still encoded: the
        # origin sees one request with exactly that target and no injected field.
        for prefix in ROUTES:
            with self.subTest(route=prefix):
                target = ("%sinj-%d?echo=1&a=%%0d%%0aX-Injected:%%201%%0d%%0a%%0d%%0a"
                          "GET%%20/n/HIDDEN%%20HTTP/1.1" % (prefix, time.monotonic_ns()))
                before = self.origin.count()
                r = fetch_req(self.port, target, host="x")
                self.assertEqual(r.status, 200)
                head = r.body.decode("latin-1")
                self.assertTrue(head.startswith("GET %s HTTP/1.1\r\n" % target), head)
                self.assertNotIn("\r\nX-Injected", head)
                self.assertEqual(self.settle_count(before, 1), 1)
                self.assertEqual(self.origin.records()[-1][1], target)
                self.assertFalse([r for r in self.origin.records() if r[1].startswith("/n/HIDDEN")])

    def test_encoded_cr_lf_in_path_of_cached_route(self):
        # The same through a path segment, where the cache key is made from the path.
        r = fetch_req(self.port, "/c/a%0d%0aX-Injected:%201/b?echo=1", host="x")
        self.assertEqual(r.status, 200)
        self.assertNotIn("\r\nX-Injected", r.body.decode("latin-1"))


def cache_status(resp):
    """The members of resp's Cache-Status (RFC 9211), stripped; [] without one."""
    return [p.strip() for p in resp.header("Cache-Status", "").split(";")]


class CachePoisoningTest(ProxyBase):
    """What a request carries beyond its key cannot change what another client gets."""

    def get(self, target, headers=(), host="x"):
        return fetch_req(self.port, target, headers=headers, host=host)

    def test_unkeyed_headers_do_not_reach_a_cached_answer(self):
        # The origin echoes the request head it received into the body, as an application
        # reflecting X-Forwarded-Host into links would. The attacker's response is stored
        # (max-age=60) and the victim's request, without the header, is a hit on it: the
        # same body, in which none of the attacker's values appear (the proxy does not
        # forward these headers).
        attacks = [("X-Forwarded-Host", "evil.example"), ("X-Original-URL", "/admin"),
                   ("X-Rewrite-URL", "/admin"), ("X-Forwarded-Scheme", "nothttp"),
                   ("X-Forwarded-Proto", "nothttp"), ("X-Forwarded-Port", "6666"),
                   ("X-Forwarded-Prefix", "/evilprefix"), ("X-Original-Host", "evil.example"),
                   ("X-Host", "evil.example"), ("X-Forwarded-Server", "evil.example")]
        for name, value in attacks:
            with self.subTest(header=name):
                target = "/c/poison-%s?echo=1&cc=max-age%%3D60" % name
                bad = self.get(target, [(name, value)])
                self.assertEqual(bad.status, 200)
                good = self.get(target)
                self.assertEqual(good.status, 200)
                self.assertIn("hit", cache_status(good), good.raw_head)
                self.assertEqual(good.body, bad.body)
                self.assertNotIn(value.encode(), good.body,
                                 "%s from one client reached another through the cache:\n%s"
                                 % (name, good.body.decode("latin-1")))

    def test_host_is_part_of_the_key(self):
        target = "/c/poison-host?echo=1&cc=max-age%3D60"
        bad = self.get(target, host="evil.example")
        self.assertIn(b"evil.example", bad.body)
        good = self.get(target, host="good.example")
        self.assertNotIn(b"evil.example", good.body)
        self.assertIn(b"good.example", good.body)

    def test_absolute_form_authority_is_the_key(self):
        # An absolute-form target names the host (RFC 9112 3.2.2); it cannot store an
        # answer under the Host of another client's request.
        target = "/c/poison-abs?echo=1&cc=max-age%3D60"
        bad = self.get("http://evil.example" + target, host="good.example")
        self.assertEqual(bad.status, 200)
        self.assertIn(b"evil.example", bad.body)
        good = self.get(target, host="good.example")
        self.assertEqual(good.status, 200)
        self.assertNotIn(b"evil.example", good.body)
        self.assertIn(b"good.example", good.body)

    def deception(self, name, query):
        """An attacker-shaped URL (a personal page with a static-looking suffix) visited
        by the victim with a cookie; returns what a second, anonymous client then gets."""
        target = "/c/account.php/%s.css?%s" % (name, query)
        victim = self.get(target, [("Cookie", "sid=victim")])
        self.assertEqual(victim.status, 200)
        self.assertIn(b"sid=victim", victim.body)
        before = self.origin.count()
        attacker = self.get(target)
        return attacker, self.origin.count() - before

    def test_deception_not_shared(self):
        # The anonymous client's request goes to the origin, and gets nothing of the victim's.
        cases = [("private", "echo=1&cc=private"),
                 ("private-ma", "echo=1&cc=private%2C+max-age%3D600"),
                 ("nostore", "echo=1&cc=no-store%2C+max-age%3D600"),
                 ("cookie", "echo=1&cc=max-age%3D600&header=Set-Cookie:sid%3Dn"),
                 # A .css suffix is no reason to cache: without freshness or validators,
                 # not stored.
                 ("plain", "echo=1&ct=text%2Fcss")]
        for name, query in cases:
            with self.subTest(name=name):
                r, fetched = self.deception(name, query)
                self.assertNotIn(b"sid=victim", r.body)
                self.assertEqual(fetched, 1)

    def test_deception_shared_when_origin_says_public(self):
        # The counterpart: the same URL shape is cached when the origin allows it, so the
        # test above fails if the cache stopped storing altogether.
        r, fetched = self.deception("public", "echo=1&cc=public%2C+max-age%3D600")
        self.assertEqual(fetched, 0)
        self.assertIn(b"sid=victim", r.body)


# -- path traversal ---------------------------------------------------------------------------

SECRET = b"TOP-SECRET-OUTSIDE-THE-ROOT\n"


def traversal_setup(d):
    os.symlink(os.path.join(d, "secret.txt"), os.path.join(d, "www", "esc.txt"))
    os.symlink(d, os.path.join(d, "www", "updir"))
    os.symlink("../secret.txt", os.path.join(d, "www", "sub", "rel.txt"))
    os.symlink("/etc", os.path.join(d, "www", "etc"))


class PathTraversalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra("""
routes = {
  { path = "/s/", root = "www" },
  { path = "/", root = "pub" },
}
""", files={"secret.txt": SECRET, "www/a.txt": "in root\n", "www/sub/b.txt": "b\n",
            "pub/index.html": "pub\n", "pub/p.txt": "p\n"},
            setup=traversal_setup, workers=1))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def fetch(self, target):
        data, _ = exchange(self.port, req(target.decode("latin-1"), host="x"))
        return parse_responses(data)

    def test_no_encoding_escapes_the_root(self):
        targets = [
            b"/s/../secret.txt", b"/s/%2e%2e/secret.txt", b"/s/%2E%2e/secret.txt",
            b"/s/%2e%2E%2fsecret.txt", b"/s/..%2fsecret.txt", b"/s/..%2Fsecret.txt",
            b"/s/.%2e/secret.txt", b"/s/%2e./secret.txt", b"/s/sub/..%2f..%2fsecret.txt",
            b"/s/sub/%2e%2e/%2e%2e/secret.txt", b"/s/%252e%252e/secret.txt",
            b"/s/%252e%252e%252fsecret.txt", b"/s/..%252fsecret.txt", b"/s/..\\secret.txt",
            b"/s/..%5csecret.txt", b"/s/..%5Csecret.txt", b"/s/sub\\..\\..\\secret.txt",
            b"/s/..;/secret.txt", b"/s/;/../secret.txt", b"/s/..;jsessionid=1/secret.txt",
            b"/s/%c0%ae%c0%ae/secret.txt", b"/s/%c0%ae%c0%ae%c0%afsecret.txt",
            b"/s/%e0%80%ae%e0%80%ae/secret.txt", b"/s/%c1%9c..%c1%9csecret.txt",
            b"/s/%uff0e%uff0e/secret.txt", b"/s/%00../secret.txt", b"/s/..%00/secret.txt",
            b"/s/../secret.txt%00.txt", b"/s/a.txt%00/../../secret.txt",
            b"/s/....//secret.txt", b"/s/.../secret.txt", b"/s/..../secret.txt",
            b"/s//../secret.txt", b"/s/sub/../../secret.txt", b"/s/./../secret.txt",
            b"/s/%2fsecret.txt", b"/s/%2f..%2fsecret.txt",
            b"//secret.txt", b"/../secret.txt", b"/%2e%2e/secret.txt", b"/..%2fsecret.txt",
            b"http://x/s/../secret.txt", b"http://x/s/%2e%2e/secret.txt",
            b"http://x/../secret.txt", b"http://x//secret.txt",
            b"/s/esc.txt", b"/s/updir/secret.txt", b"/s/updir/www/a.txt", b"/s/sub/rel.txt",
        ]
        for t in targets:
            with self.subTest(target=t):
                rs = self.fetch(t)
                self.assertEqual(len(rs), 1)
                self.assertNotIn(SECRET.strip(), rs[0].body, "%r served the secret" % t)
                self.assertIn(rs[0].status, (301, 308, 400, 403, 404), "%r: %r" % (t, rs[0].raw_head))

    def test_no_encoding_reaches_etc_passwd(self):
        targets = [b"//etc/passwd", b"/s//etc/passwd", b"/s/%2fetc%2fpasswd",
                   b"/s/%2Fetc/passwd", b"/s/../../../../../../../../etc/passwd",
                   b"/s/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                   b"/s/..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
                   b"/s/%252e%252e%252f%252e%252e%252f%252e%252e%252fetc%252fpasswd",
                   b"/s/..\\..\\..\\..\\..\\..\\etc\\passwd", b"/s/etc/passwd",
                   b"/s/c:\\..\\..\\etc\\passwd", b"/s/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
                   b"http://x/etc/passwd", b"http://x//etc/passwd", b"/s/file:///etc/passwd",
                   b"/etc/passwd", b"/s/./././../../../../etc/passwd"]
        for t in targets:
            with self.subTest(target=t):
                rs = self.fetch(t)
                self.assertEqual(len(rs), 1)
                self.assertNotIn(b"root:", rs[0].body, "%r served /etc/passwd" % t)
                self.assertIn(rs[0].status, (301, 308, 400, 403, 404), "%r: %r" % (t, rs[0].raw_head))

    def test_dot_segments_inside_the_root_still_work(self):
        # The counterpart: the same encodings that stay inside the root serve the file,
        # so the refusals above are about escaping, not about the encodings.
        for t in (b"/s/sub/../a.txt", b"/s/sub/%2e%2e/a.txt", b"/s/./a.txt", b"/s/sub/./b.txt",
                  b"http://x/s/sub/../a.txt"):
            with self.subTest(target=t):
                rs = self.fetch(t)
                self.assertEqual(rs[0].status, 200, rs[0].raw_head)
                self.assertEqual(rs[0].body, b"in root\n" if t.endswith(b"a.txt") else b"b\n")


# -- resource exhaustion --------------------------------------------------------------------

def raise_nofile(want):
    """Raises this process's RLIMIT_NOFILE soft limit towards want (up to the hard limit);
    returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def timed_get(port, path="/a.txt", timeout=5):
    """(seconds, responses) of one GET on a new connection, read until the server closes.
    Blocking reads with a timeout, not select(): descriptors may be past FD_SETSIZE here."""
    t0 = time.monotonic()
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                   % path).encode())
        while True:
            d = s.recv(65536)
            if not d:
                break
            chunks.append(d)
    return time.monotonic() - t0, parse_responses(b"".join(chunks))


class SlowlorisTest(unittest.TestCase):
    N = 2000

    def test_slowloris_does_not_stop_a_normal_client(self):
        have = raise_nofile(self.N + 500)
        if have < self.N + 200:
            self.skipTest("RLIMIT_NOFILE hard limit %d is too low for %d connections"
                          % (have, self.N))
        with Umbra("""
routes = { { path = "/", root = "www" } }
limits = { max_connections = %d }
timeouts = { header = 30, idle = 30 }
""" % (self.N + 100), files={"www/a.txt": "a\n"}, workers=2) as u:
            socks = []
            try:
                for i in range(self.N):
                    s = connect(u.port)
                    # A head that never ends: one more field line is always to come.
                    s.send(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Slow-%d: " % i)
                    socks.append(s)
                cpu0 = u.cpu_seconds()
                # Every slow connection sends one more byte, then a normal client is timed.
                for s in socks:
                    s.send(b"a")
                lat = []
                for _ in range(10):
                    dt, rs = timed_get(u.port)
                    self.assertEqual([r.status for r in rs], [200])
                    lat.append(dt)
                lat.sort()
                self.assertLess(lat[len(lat) // 2], 0.1, "latencies %r" % lat)
                self.assertLess(lat[-1], 0.5, "latencies %r" % lat)
                # The slow connections are still open (not dropped to make room).
                time.sleep(0.5)
                open_now = 0
                for s in socks[::40]:
                    s.setblocking(False)
                    try:
                        s.recv(1)  # EOF or an answer: the server gave up on it
                    except BlockingIOError:
                        open_now += 1  # nothing to read: still waiting for its head
                    except OSError:
                        pass
                self.assertEqual(open_now, len(socks[::40]))
                # Holding 2000 idle connections costs no CPU to speak of: half a second
                # for their 2000 bytes and ten requests (a sanitizer multiplies what
                # every instruction costs: TSan about tenfold, ASan about threefold).
                slower = {"tsan": 10, "asan": 3}.get(sanitizer_build(), 1)
                self.assertLess(u.cpu_seconds() - cpu0, 0.5 * slower)
            finally:
                for s in socks:
                    s.close()
            self.assertTrue(u.alive(), u.log())


def cpu_share(u, seconds=1.5):
    """The CPU time umbra uses over the next seconds, as a share of that time."""
    cpu0, t0 = u.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (u.cpu_seconds() - cpu0) / (time.monotonic() - t0)


class ConnectionLimitTest(unittest.TestCase):
    def test_connections_past_max_connections_wait_without_busy_loop(self):
        raise_nofile(1024)
        with Umbra("""
routes = { { path = "/", root = "www" } }
limits = { max_connections = 20 }
timeouts = { header = 30, idle = 30 }
""", files={"www/a.txt": "a\n"}, workers=2) as u:
            socks = []
            try:
                for _ in range(200):
                    socks.append(connect(u.port))
                time.sleep(0.3)
                share = cpu_share(u)
                self.assertLess(share, 0.15, "%.0f %% of a CPU while at the connection limit"
                                % (share * 100))
                # The limit holds: a new connection is not served while 200 are open.
                s = connect(u.port)
                s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                self.assertEqual(recv_all(s, timeout=0.5), b"")
                socks.append(s)
                self.assertTrue(u.alive())
                for c in socks[:-1]:
                    c.close()
                # Once the others leave, the waiting one is served.
                data = recv_all(s, timeout=5)
                self.assertEqual(parse_response(data).status, 200)
            finally:
                for c in socks:
                    c.close()
            dt, rs = timed_get(u.port)
            self.assertEqual([r.status for r in rs], [200])


def low_nofile(n):
    def fn():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return fn


class DescriptorLimitTest(unittest.TestCase):
    def test_bug_listener_spun_when_out_of_descriptors(self):
        raise_nofile(1024)
        with Umbra("""
routes = { { path = "/", root = "www" } }
limits = { max_connections = 10000 }
timeouts = { header = 30, idle = 30 }
""", files={"www/a.txt": "a\n"}, workers=2, preexec_fn=low_nofile(64)) as u:
            socks = []
            try:
                for _ in range(150):
                    socks.append(connect(u.port))
                wait_until(lambda: "Too many open files" in u.log(), timeout=3)
                self.assertIn("Too many open files", u.log())
                share = cpu_share(u)
                self.assertLess(share, 0.15, "%.0f %% of a CPU while out of descriptors"
                                % (share * 100))
                # The log warns, but does not flood (it used to say so 10 times a second).
                self.assertEqual(u.log().count("Too many open files"), 1, u.log()[-2000:])
                self.assertTrue(u.alive(), u.log())
            finally:
                for c in socks:
                    c.close()
            # Descriptors back: served again.
            ok = wait_until(lambda: timed_get(u.port)[1][0].status == 200, timeout=5)
            self.assertTrue(ok)
            self.assertTrue(u.alive(), u.log())

    def test_bug_out_of_descriptors_took_the_upstream_out(self):
        # Connections to the origin that fail for want of a descriptor here used to count
        # as the server's failures: after max_fails the server was skipped for fail_timeout,
        # and every request got 502 for 10 s after the shortage had ended.
        raise_nofile(1024)
        with Origin(record=False) as o, Umbra("""
timeouts = { header = 30, idle = 30 }
upstreams = { app = { servers = { "%s" }, max_fails = 2, fail_timeout = 30 } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % o.url, workers=2, preexec_fn=low_nofile(64)) as u:
            # First the connections, until the listener has taken every descriptor; only
            # then the requests, so that the ones accepted find none left for the origin.
            socks = []
            answers = {}

            def read_some():
                for s in socks:
                    try:
                        d = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    answers[s] = answers.get(s, b"") + d
                return sum(d.startswith(b"HTTP/1.1 502 ") for d in answers.values()) > 2

            emfile = re.compile(r"upstream app: server %s: Too many open files$"
                                % re.escape(o.url), re.M)
            try:
                for i in range(120):
                    socks.append(connect(u.port))
                self.assertTrue(wait_until(lambda: "accept: Too many open files" in u.log(),
                                           timeout=3), u.log()[-2000:])
                for i, s in enumerate(socks):
                    s.sendall(b"GET /x%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
                    s.setblocking(False)  # read_some takes what has come, no more
                # More failed connects than max_fails: each answered 502 by the upstream
                # (the listener accepted its client), each logged as out of descriptors.
                wait_until(read_some, timeout=5)
                failed = [d for d in answers.values() if d.startswith(b"HTTP/1.1 502 ")]
                self.assertGreater(len(failed), 2, "answers: %r\n%s"
                                   % (list(answers.values())[:5], u.log()[-2000:]))
                for d in failed:
                    r = parse_response(d)
                    self.assertEqual(r.body, b"502 Bad Gateway\n", r.raw_head)
                wait_until(lambda: len(emfile.findall(u.log())) >= len(failed), timeout=3)
                self.assertGreaterEqual(len(emfile.findall(u.log())), len(failed),
                                        u.log()[-2000:])
                self.assertTrue(u.alive(), u.log())
            finally:
                for s in socks:
                    s.close()
            self.assertNotIn("skipped for", u.log())
            ok = wait_until(lambda: timed_get(u.port, "/after")[1][0].status == 200, timeout=3)
            self.assertTrue(ok, "still failing after the descriptors came back:\n" +
                            u.log()[-2000:])


class SlowReaderTest(unittest.TestCase):
    """Readers that stop reading, and origins that never stop sending."""

    @classmethod
    def setUpClass(cls):
        # Under ASan, freed blocks wait in a 256 MB quarantine that RSS counts: a small
        # one keeps the figures about umbra's buffers.
        if sanitizer_build() == "asan":
            env = mock.patch.dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                                  ":quarantine_size_mb=4")
            env.start()
            cls.addClassCleanup(env.stop)
        cls.origin = class_context(cls, Origin(record=False))
        cls.umbra = class_context(cls, Umbra("""
timeouts = { send = 1 }
cache = { memory = "32MB", max_object = "1MB" }
-- max_fails: the bad answers of one test must not take the server out for the next.
upstreams = { app = { servers = { "%s" }, timeout = 5, max_fails = 100 } }
routes = {
  { path = "/c/", upstream = "app", cache = true },
  { path = "/n/", upstream = "app", cache = false },
}
""" % cls.origin.url, workers=2))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def rss_mb(self):
        return vm_rss_kb(self.umbra.proc.pid) / 1024

    def test_reader_that_never_reads_is_dropped_after_send_timeout(self):
        for prefix in ROUTES:
            with self.subTest(route=prefix):
                aborted0 = self.origin.stats()["aborted"]
                s = connect(self.port)
                s.sendall(req("%sneverread-%d?endless=1&cc=max-age%%3D60"
                              % (prefix, time.monotonic_ns()), host="x", close=False))
                time.sleep(2.5)  # more than timeouts.send with nothing read
                # Now drain: what was buffered arrives, then the end the server chose.
                t0 = time.monotonic()
                got = 0
                closed = False
                s.settimeout(0.5)
                while time.monotonic() - t0 < 5:
                    try:
                        d = s.recv(1 << 20)
                    except socket.timeout:
                        break
                    except ConnectionResetError:
                        closed = True
                        break
                    if not d:
                        closed = True
                        break
                    got += len(d)
                s.close()
                self.assertTrue(closed, "still open after %d bytes" % got)
                self.assertLess(got, 32 << 20)
                # The origin transfer was given up too.
                self.assertTrue(wait_until(lambda: self.origin.stats()["aborted"] > aborted0,
                                           timeout=5))

    def test_endless_body_to_slow_reader_keeps_memory_bounded(self):
        for prefix in ROUTES:
            with self.subTest(route=prefix):
                base = self.rss_mb()
                s = connect(self.port)
                s.sendall(req("%sendless-%d?endless=1&cc=max-age%%3D60"
                              % (prefix, time.monotonic_ns()), host="x", close=False))
                # Read slowly (64 KiB every 20 ms) for 2 s: the origin is fast and endless.
                peak = base
                total = 0
                t_end = time.monotonic() + 2
                while time.monotonic() < t_end:
                    total += len(s.recv(65536))
                    time.sleep(0.02)
                    peak = max(peak, self.rss_mb())
                s.close()
                self.assertGreater(total, 100000)
                self.assertLess(peak - base, 48, "RSS grew from %.0f to %.0f MB" % (base, peak))

    def test_endless_body_to_fast_reader_keeps_memory_bounded(self):
        # A cacheable endless body passes max_object (1 MB) at once: it is streamed and
        # never stored, so memory stays flat however much the client reads.
        for prefix in ROUTES:
            with self.subTest(route=prefix):
                base = self.rss_mb()
                s = connect(self.port)
                s.sendall(req("%sfast-%d?endless=1&cc=max-age%%3D60"
                              % (prefix, time.monotonic_ns()), host="x", close=False))
                total = 0
                peak = base
                s.settimeout(5)
                t_end = time.monotonic() + 5
                while total < (200 << 20) and time.monotonic() < t_end:
                    total += len(s.recv(1 << 20))
                    if total % (8 << 20) < (1 << 20):
                        peak = max(peak, self.rss_mb())
                s.close()
                self.assertGreater(total, 20 << 20)
                self.assertLess(peak - base, 48, "RSS grew from %.0f to %.0f MB after %d MB"
                                % (base, peak, total >> 20))

    def test_bug_endless_fill_runs_on_after_its_client_left(self):
        # A cacheable endless body is over max_object, its client gone: the fill used to
        # drain the origin for ever ("discard"), a CPU and bandwidth sink per request. The
        # origin transfer must be given up, whenever the client leaves.
        for read_first in (0, 4 << 20):
            with self.subTest(read_first=read_first):
                aborted0 = self.origin.stats()["aborted"]
                s = connect(self.port)
                s.sendall(req("/c/gone-%d?endless=1&cc=max-age%%3D60" % time.monotonic_ns(),
                              host="x", close=False))
                got = 0
                while got < read_first:
                    got += len(s.recv(1 << 20))
                s.close()
                self.assertTrue(wait_until(lambda: self.origin.stats()["aborted"] > aborted0,
                                           timeout=5), "the origin is still sending")
                cpu0 = self.umbra.cpu_seconds()
                time.sleep(1)
                self.assertLess(self.umbra.cpu_seconds() - cpu0, 0.2)

    def test_origin_huge_head_gives_502_with_bounded_memory(self):
        for prefix in ROUTES:
            for q in ("bighead=2000000", "bighead=200000", "garbage=1"):
                with self.subTest(route=prefix, q=q):
                    base = self.rss_mb()
                    r = fetch_req(self.port, "%sbad-%d?%s" % (prefix, time.monotonic_ns(), q),
                                  host="x")
                    self.assertEqual(r.status, 502, r.raw_head)
                    self.assertLess(self.rss_mb() - base, 32)


if __name__ == "__main__":
    unittest.main()
