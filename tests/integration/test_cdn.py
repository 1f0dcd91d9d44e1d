"""CDN cache controls (issue #17) against the real binary: Age that is not a valid number,
targeted Cache-Control fields (RFC 9213), surrogate keys and purges (by tag, by prefix,
soft), coalesced revalidation of stale objects, interim (1xx) responses and Early Hints.

Like test_cache.py, every test drives the scripted test origin through its query string
and checks what the client got and what reached the origin.
"""

import json
import os
import socket
import sys
import threading
import time
import unittest
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, class_context, connect,  # noqa: E402
                           fetch_req, http_get, origin_body, parse_response, parse_responses,
                           req, request,
                           wait_until)
from test_cache import (CacheAssertions, EXPIRE, PyOrigin, concurrent, config,  # noqa: E402
                        cs_param, is_hit, seen)


def q(value):
    return quote(value, safe="")


class AgeTest(unittest.TestCase, CacheAssertions):
    """RFC 9111 5.1: an Age that is not a non-negative integer is ignored."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url)))

    def test_bug_invalid_age_made_response_unusable(self):
        # The bug: "Age: abc" (or -5, 1.5) made the stored response look 2^31 s old, so it
        # was never reused. Now it is ignored: stored, and served as if it had no Age.
        for i, bad in enumerate(("abc", "-5", "1.5", "")):
            with self.subTest(age=bad):
                t = "/age/bad%d?cc=max-age%%3D60&header=Age:%s" % (i, q(bad))
                r1 = fetch_req(self.umbra.port, t)
                self.assertEqual(r1.status, 200)
                r2 = fetch_req(self.umbra.port, t)
                self.assertHit(r2)
                self.assertIn(int(r2.header("Age")), (0, 1, 2))
                self.assertGreaterEqual(int(cs_param(r2, "ttl")), 57)
                self.assertEqual(seen(self.origin, t), 1)

    def test_valid_age_still_counts(self):
        t = "/age/good?cc=max-age%3D60&header=Age:30"
        fetch_req(self.umbra.port, t)
        r = fetch_req(self.umbra.port, t)
        self.assertHit(r)
        self.assertGreaterEqual(int(r.header("Age")), 30)
        self.assertLessEqual(int(cs_param(r, "ttl")), 30)


def hdrs(*pairs):
    """The origin query for response fields: hdrs(("CDN-Cache-Control", "max-age=600"))."""
    return "".join("&header=%s:%s" % (q(n), q(v)) for n, v in pairs)


class TargetedTest(unittest.TestCase, CacheAssertions):
    """RFC 9213: CDN-Cache-Control and Umbra-Cache-Control take precedence over
    Cache-Control (and Expires) for the cache, in the configured order; a targeted field
    that fails to parse is ignored as a whole; clients still get Cache-Control."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url)))

    def stored(self, name, fields, cc=None):
        """Fetches a fresh URL twice; returns (second response, origin requests)."""
        t = "/tgt/%s?x=1%s%s" % (name, "&cc=" + q(cc) if cc else "", hdrs(*fields))
        fetch_req(self.umbra.port, t)
        r = fetch_req(self.umbra.port, t)
        self.assertEqual(r.status, 200, r.raw_head)
        return r, seen(self.origin, t)

    def test_cdn_cache_control_overrides_no_store(self):
        r, n = self.stored("a", [("CDN-Cache-Control", "max-age=600")], cc="no-store")
        self.assertHit(r)
        self.assertEqual(n, 1)
        # Downstream clients still get the origin's Cache-Control.
        self.assertEqual(r.header("Cache-Control"), "no-store")
        self.assertGreaterEqual(int(cs_param(r, "ttl")), 590)

    def test_cdn_no_store_overrides_max_age(self):
        r, n = self.stored("b", [("CDN-Cache-Control", "no-store")], cc="max-age=600")
        self.assertNotHit(r)
        self.assertEqual(n, 2)
        self.assertEqual(r.header("Cache-Control"), "max-age=600")

    def test_umbra_cache_control_comes_first(self):
        r, n = self.stored("c", [("CDN-Cache-Control", "no-store"),
                                 ("Umbra-Cache-Control", "max-age=600")])
        self.assertHit(r)
        self.assertEqual(n, 1)
        r, n = self.stored("d", [("Umbra-Cache-Control", "no-store"),
                                 ("CDN-Cache-Control", "max-age=600")], cc="max-age=600")
        self.assertNotHit(r)
        self.assertEqual(n, 2)

    def test_invalid_targeted_field_is_ignored_whole(self):
        # Upper-case keys, a trailing comma, an unterminated string: each fails to parse,
        # so the next field in the list (or Cache-Control) decides.
        for i, bad in enumerate(("MAX-AGE=600", "max-age=600,", 'max-age=600, private="x',
                                 "max-age=600 no-store", "max-age=6 00", "max-age=?2")):
            with self.subTest(bad=bad):
                r, n = self.stored("inv%d" % i, [("Umbra-Cache-Control", bad),
                                                 ("CDN-Cache-Control", "no-store")],
                                   cc="max-age=600")
                self.assertNotHit(r)
                self.assertEqual(n, 2)
                r, n = self.stored("inv-cc%d" % i, [("CDN-Cache-Control", bad)], cc="no-store")
                self.assertNotHit(r)
                self.assertEqual(n, 2)

    def test_empty_targeted_field_is_ignored(self):
        r, n = self.stored("empty", [("CDN-Cache-Control", "")], cc="max-age=600")
        self.assertHit(r)
        self.assertEqual(n, 1)

    def test_parameters_are_ignored(self):
        r, n = self.stored("params", [("CDN-Cache-Control", "max-age=600;foo=bar, public")],
                           cc="no-store")
        self.assertHit(r)
        self.assertEqual(n, 1)

    def test_wrong_value_type_makes_directive_absent(self):
        # max-age as a decimal or a string counts as absent: nothing makes it fresh, and
        # with no validator it is not stored at all.
        for i, v in enumerate(('max-age=1.5', 'max-age="600"', "max-age=-1")):
            with self.subTest(v=v):
                r, n = self.stored("type%d" % i, [("CDN-Cache-Control", v)], cc="max-age=600")
                self.assertNotHit(r)
                self.assertEqual(n, 2)

    def test_expires_ignored_under_targeted_field(self):
        exp = email_date(time.time() + 3600)
        r, n = self.stored("exp", [("Expires", exp), ("CDN-Cache-Control", "must-revalidate"),
                                   ("ETag", '"e1"')])
        self.assertNotHit(r)
        self.assertEqual(n, 2)
        r, n = self.stored("exp2", [("Expires", exp), ("ETag", '"e2"')])
        self.assertHit(r)

    def test_targeted_lines_combine(self):
        r, n = self.stored("lines", [("CDN-Cache-Control", "public"),
                                     ("CDN-Cache-Control", "max-age=600")], cc="no-store")
        self.assertHit(r)
        self.assertEqual(n, 1)

    def test_targeted_setting_order(self):
        with Origin() as o, Umbra(config(o.url, targeted='{ "CDN-Cache-Control" }')) as u:
            t = "/tgt/setting?x=1" + hdrs(("Umbra-Cache-Control", "max-age=600"),
                                          ("CDN-Cache-Control", "no-store"))
            fetch_req(u.port, t)
            self.assertNotHit(fetch_req(u.port, t))
            self.assertEqual(seen(o, t), 2)
        with Origin() as o, Umbra(config(o.url, targeted="{}")) as u:
            t = "/tgt/none?cc=max-age%3D600" + hdrs(("CDN-Cache-Control", "no-store"))
            fetch_req(u.port, t)
            self.assertHit(fetch_req(u.port, t))
            self.assertEqual(seen(o, t), 1)

    def test_targeted_setting_errors_name_the_line(self):
        for bad in ('{ "Cache-Control" }', '{ "bad name" }', '"CDN-Cache-Control"',
                    '{ "A", "a" }'):
            with self.subTest(bad=bad):
                errors = config_errors('cache = {\n  targeted = %s,\n}\n' % bad)
                self.assertRegex(errors, r"config\.lua:4: cache\.targeted")
        errors = config_errors('cache = {\n  expose_tags = "yes",\n}\n')
        self.assertRegex(errors, r"config\.lua:4: cache\.expose_tags: expected true or false")


class SurrogateKeyTest(unittest.TestCase, CacheAssertions):
    """Surrogate-Key, Cache-Tag and xkey tag stored objects; PURGE by tag, by prefix,
    softly; the tag fields are not sent to clients."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url)))

    def get(self, t, **kw):
        return fetch_req(self.umbra.port, t, **kw)

    def purge(self, t, headers=()):
        return fetch_req(self.umbra.port, t, method="PURGE", headers=headers)

    def stored(self, t):
        self.get(t)
        r = self.get(t)
        self.assertHit(r)
        return r

    def test_purge_by_several_tags(self):
        a = "/sk/a?cc=max-age%3D600" + hdrs(("Surrogate-Key", "p1 shared"))
        b = "/sk/b?cc=max-age%3D600" + hdrs(("Cache-Tag", "p2,shared2"))
        c = "/sk/c?cc=max-age%3D600" + hdrs(("xkey", "p3"))
        d = "/sk/d?cc=max-age%3D600" + hdrs(("Surrogate-Key", "other"))
        for t in (a, b, c, d):
            r = self.stored(t)
            for name in ("Surrogate-Key", "Cache-Tag", "xkey"):
                self.assertIsNone(r.header(name), "tag field sent to a client: %r" % r.raw_head)
        r = self.purge("/", headers=[("Surrogate-Key", "p1 p2  p3 nothing")])
        self.assertEqual(r.status, 200, r.raw_head)
        self.assertEqual(r.header("Umbra-Purged"), "3")
        for t in (a, b, c):
            self.assertNotHit(self.get(t))
            self.assertEqual(seen(self.origin, t), 2)
        self.assertHit(self.get(d))
        # An object with two purged tags counts once.
        e = "/sk/e?cc=max-age%3D600" + hdrs(("Surrogate-Key", "x1 x2"))
        self.stored(e)
        r = self.purge("/", headers=[("Surrogate-Key", "x1 x2")])
        self.assertEqual(r.header("Umbra-Purged"), "1")
        r = self.purge("/", headers=[("Surrogate-Key", "x1")])
        self.assertEqual((r.status, r.header("Umbra-Purged")), (200, "0"))

    def test_tags_not_sent_on_pass_either(self):
        t = "/sk/pass?cc=no-store" + hdrs(("Surrogate-Key", "np"))
        r = self.get(t)
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("Surrogate-Key"))

    def test_prefix_purge(self):
        ts = ["/pre/x/%d?cc=max-age%%3D600" % i for i in range(5)]
        keep = ["/pre/y/1?cc=max-age%3D600", "/pre/x?cc=max-age%3D600"]
        for t in ts + keep:
            self.stored(t)
        r = self.purge("/pre/x/*")
        self.assertEqual(r.status, 200, r.raw_head)
        self.assertEqual(r.header("Umbra-Purged"), "5")
        for t in ts:
            self.assertNotHit(self.get(t))
        for t in keep:
            self.assertHit(self.get(t))
        # Another Host's objects are not touched.
        t = "/pre/h/1?cc=max-age%3D600"
        fetch_req(self.umbra.port, t, host="other.test")
        self.assertHit(fetch_req(self.umbra.port, t, host="other.test"))
        r = self.purge("/pre/h/*")
        self.assertEqual(r.header("Umbra-Purged"), "0")
        self.assertHit(fetch_req(self.umbra.port, t, host="other.test"))

    def test_soft_purge_then_serve_stale(self):
        # stale-while-revalidate: after a soft purge the object is served stale at once,
        # and one refresh goes to the origin in the background.
        t = "/soft/a?cc=max-age%3D600%2C+stale-while-revalidate%3D60&delay=300" + \
            hdrs(("Surrogate-Key", "soft1"), ("ETag", '"s1"'))
        self.stored(t)
        r = self.purge("/", headers=[("Surrogate-Key", "soft1"), ("Umbra-Purge", "soft")])
        self.assertEqual((r.status, r.header("Umbra-Purged")), (200, "1"))
        t0 = time.monotonic()
        r = self.get(t)
        self.assertLess(time.monotonic() - t0, 0.25, "a soft-purged object waited for the origin")
        self.assertEqual(r.status, 200)
        self.assertTrue(wait_until(lambda: seen(self.origin, t) == 2, timeout=3))
        time.sleep(0.2)
        self.assertEqual(seen(self.origin, t), 2)
        self.assertTrue(wait_until(lambda: is_hit(self.get(t)), timeout=3))
        self.assertEqual(seen(self.origin, t), 2)

    def test_bug_soft_purged_copy_said_fresh(self):
        # The bug: after a soft purge, the copy served while it revalidates said
        # "umbra; hit; ttl=600", as if fresh. It is stale since the purge: a hit (it did
        # not go forward, RFC 9211 2.1) with a negative ttl counted from the purge (2.4),
        # while Age stays the response's real age.
        t = "/soft/cs?cc=max-age%3D600%2C+stale-while-revalidate%3D60&delay=300" + \
            hdrs(("Surrogate-Key", "softcs"), ("ETag", '"c1"'))
        r = self.stored(t)
        self.assertGreater(int(cs_param(r, "ttl")), 590)
        r = self.purge("/", headers=[("Surrogate-Key", "softcs"), ("Umbra-Purge", "soft")])
        self.assertEqual(r.header("Umbra-Purged"), "1")
        time.sleep(1.1)
        r = self.get(t)
        self.assertEqual(r.status, 200)
        self.assertHit(r)
        self.assertIsNone(cs_param(r, "fwd"), r.raw_head)
        self.assertIn(int(cs_param(r, "ttl")), range(-4, 0), r.raw_head)
        self.assertEqual(cs_param(r, "detail"), "stale-while-revalidate", r.raw_head)
        self.assertLess(int(r.header("Age")), 5)
        # The refresh replaces it: fresh again. (A request in the instant the refreshed copy
        # is linked but not yet finished joins it as a collapsed forward, without a ttl:
        # not yet.)
        self.assertTrue(wait_until(lambda: int(cs_param(self.get(t), "ttl") or 0) > 590,
                                   timeout=3))
        self.assertEqual(seen(self.origin, t), 2)

    def test_bug_soft_purged_copy_standing_in_had_no_ttl(self):
        # The bug's other face: a soft-purged copy standing in for a failing origin
        # (stale-if-error) said nothing of its staleness. It went forward to revalidate,
        # so: fwd=stale, the origin's status, and a negative ttl.
        state = {"fail": False}

        def app(method, path, headers):
            if state["fail"]:
                return 503, [], b"down"
            return 200, [("Cache-Control", "max-age=600, stale-if-error=600"),
                         ("xkey", "siecs")], b"the body"

        with PyOrigin(app) as o, Umbra(config(o.url)) as u:
            t = "/soft/siecs"
            fetch_req(u.port, t)
            r = fetch_req(u.port, "/", method="PURGE",
                          headers=[("xkey", "siecs"), ("Umbra-Purge", "soft")])
            self.assertEqual(r.header("Umbra-Purged"), "1")
            state["fail"] = True
            time.sleep(1.1)
            r = fetch_req(u.port, t)
            self.assertEqual((r.status, r.body), (200, b"the body"), r.raw_head)
            self.assertEqual(cs_param(r, "fwd"), "stale", r.raw_head)
            self.assertEqual(cs_param(r, "fwd-status"), "503", r.raw_head)
            self.assertEqual(cs_param(r, "detail"), "stale-if-error", r.raw_head)
            self.assertIsNotNone(cs_param(r, "ttl"), r.raw_head)
            self.assertIn(int(cs_param(r, "ttl")), range(-4, 0), r.raw_head)

    def test_soft_purge_without_stale_window_refetches(self):
        t = "/soft/b?cc=max-age%3D600" + hdrs(("Surrogate-Key", "soft2"))
        self.stored(t)
        r = self.purge("/", headers=[("Surrogate-Key", "soft2"), ("Umbra-Purge", "soft")])
        self.assertEqual(r.header("Umbra-Purged"), "1")
        r = self.get(t)
        self.assertNotHit(r)
        self.assertEqual(cs_param(r, "fwd"), "stale", r.raw_head)  # forwarded to revalidate
        self.assertEqual(seen(self.origin, t), 2)
        self.assertHit(self.get(t))

    def test_soft_purge_keeps_stale_if_error(self):
        # The origin fails after a soft purge: stale-if-error still serves the object.
        state = {"fail": False}

        def app(method, path, headers):
            if state["fail"]:
                return 503, [], b"down"
            return 200, [("Cache-Control", "max-age=600, stale-if-error=600"),
                         ("xkey", "sie")], b"the body"

        with PyOrigin(app) as o, Umbra(config(o.url)) as u:
            t = "/soft/sie"
            fetch_req(u.port, t)
            self.assertHit(fetch_req(u.port, t))
            r = fetch_req(u.port, "/", method="PURGE",
                          headers=[("xkey", "sie"), ("Umbra-Purge", "soft")])
            self.assertEqual(r.header("Umbra-Purged"), "1")
            state["fail"] = True
            r = fetch_req(u.port, t)
            self.assertEqual((r.status, r.body), (200, b"the body"), r.raw_head)
            self.assertEqual(cs_param(r, "detail"), "stale-if-error", r.raw_head)
            self.assertEqual(len(o.requests(t)), 2)
            # A hard purge leaves nothing to stand in.
            fetch_req(u.port, "/", method="PURGE", headers=[("xkey", "sie")])
            self.assertEqual(fetch_req(u.port, t).status, 503)

    def test_soft_purge_url(self):
        t = "/soft/url?cc=max-age%3D600"
        self.stored(t)
        r = self.purge(t, headers=[("Umbra-Purge", "soft")])
        self.assertEqual((r.status, r.header("Umbra-Purged")), (200, "1"))
        self.assertNotHit(self.get(t))

    def test_purge_forbidden(self):
        with Origin() as o, Umbra(config(o.url, purge='{ allow = { "10.9.8.7" } }')) as u:
            t = "/sk/403?cc=max-age%3D600" + hdrs(("Surrogate-Key", "f"))
            fetch_req(u.port, t)
            for hs, target in (([("Surrogate-Key", "f")], "/"), ([], "/sk/*"),
                               ([("Umbra-Purge", "soft")], t)):
                r = fetch_req(u.port, target, method="PURGE", headers=hs)
                self.assertEqual(r.status, 403)
            self.assertHit(fetch_req(u.port, t))
            self.assertEqual(seen(o, t), 1)

    def test_expose_tags(self):
        with Origin() as o, Umbra(config(o.url, expose_tags="true")) as u:
            t = "/sk/exp?cc=max-age%3D600" + hdrs(("Surrogate-Key", "e1 e2"))
            self.assertEqual(fetch_req(u.port, t).header("Surrogate-Key"), "e1 e2")
            r = fetch_req(u.port, t)
            self.assertHit(r)
            self.assertEqual(r.header("Surrogate-Key"), "e1 e2")
            r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "e2")])
            self.assertEqual(r.header("Umbra-Purged"), "1")


class AdminPurgeTest(unittest.TestCase, CacheAssertions):
    """POST /purge on the admin listener, with a JSON or a form body."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra(config(cls.origin.url) +
                                             'admin = { listen = "127.0.0.1:0" }\n'))
        cls.admin = admin_port(cls.umbra)

    def post(self, body, ctype="application/json"):
        status, _, out = http_get(self.admin, "/purge", method="POST",
                                  body=body.encode(), headers={"Content-Type": ctype})
        return status, json.loads(out)

    def put(self, t, host="umbra.test"):
        fetch_req(self.umbra.port, t, host=host)
        self.assertHit(fetch_req(self.umbra.port, t, host=host))

    def test_json_tags(self):
        a = "/adm/a?cc=max-age%3D600" + hdrs(("Surrogate-Key", "ja shared"))
        b = "/adm/b?cc=max-age%3D600" + hdrs(("Cache-Tag", "jb"))
        for t in (a, b):
            self.put(t)
        self.assertEqual(self.post('{"tags": ["ja", "jb"]}'), (200, {"purged": 2, "soft": False}))
        self.assertNotHit(fetch_req(self.umbra.port, a))
        self.assertNotHit(fetch_req(self.umbra.port, b))

    def test_form_soft_and_prefix(self):
        t = "/adm/f?cc=max-age%3D600" + hdrs(("xkey", "fa"))
        self.put(t)
        st, out = self.post("tag=fa&soft=1", "application/x-www-form-urlencoded")
        self.assertEqual((st, out["purged"], out["soft"]), (200, 1, True))
        self.assertNotHit(fetch_req(self.umbra.port, t))
        ts = ["/adm/p/%d?cc=max-age%%3D600" % i for i in range(3)]
        for x in ts:
            self.put(x, host="Site.test")
        self.put("/adm/p/0?cc=max-age%3D600", host="other.test")
        st, out = self.post('{"host": "site.test", "path": "/adm/p/*"}')
        self.assertEqual((st, out["purged"]), (200, 3))
        self.assertHit(fetch_req(self.umbra.port, "/adm/p/0?cc=max-age%3D600", host="other.test"))
        st, out = self.post("path=%2Fadm%2Fp%2F*", "application/x-www-form-urlencoded")
        self.assertEqual((st, out["purged"]), (200, 1))
        # One URL, by host and path.
        self.put("/adm/one?cc=max-age%3D600")
        self.assertEqual(self.post('{"host": "umbra.test", "path": "/adm/one?cc=max-age%3D600"}')[1]["purged"], 1)

    def test_bad_bodies(self):
        for body, ctype in (('{"tags": ', "application/json"), ('{"nope": 1}', "application/json"),
                            ("{}", "application/json"), ("tag=%zz", "text/plain"),
                            ('{"path": "/no-host"}', "application/json"),
                            ('{"color": "red"}', "application/json")):
            with self.subTest(body=body):
                st, out = self.post(body, ctype)
                self.assertEqual(st, 400)
                self.assertIn("error", out)
        status, _, _ = http_get(self.admin, "/purge", method="POST", body=b"x" * 8000)
        self.assertEqual(status, 413)
        self.assertTrue(self.umbra.alive())

    def test_bad_json_names_what_is_wrong(self):
        # The answer says what the reader expected, and where.
        for body, want in (('{"tags": ["a",]}', "malformed JSON at byte 14: expected a string"),
                           ('{"tags" ["a"]}', "malformed JSON at byte 8: expected ':'"),
                           ('{"soft": tru}', "malformed JSON at byte 9: expected true or false"),
                           ('{"tags": "a"} x', "malformed JSON at byte 14: expected the end"),
                           ('{"tags": "a\\q"}', "expected a valid escape")):
            with self.subTest(body=body):
                st, out = self.post(body, "application/json")
                self.assertEqual(st, 400)
                self.assertIn(want, out["error"])
        # A \u escape decodes (to a tag nothing has: nothing purged, no error).
        st, out = self.post('{"tags": ["caf\\u00e9-\\ud83d\\ude00"]}', "application/json")
        self.assertEqual((st, out["purged"]), (200, 0))

    def test_refused_outside_admin_allow(self):
        cfg = config(self.origin.url) + \
            'admin = { listen = "127.0.0.1:0", allow = { "10.9.8.7" } }\n'
        with Umbra(cfg) as u:
            t = "/adm/403?cc=max-age%3D600" + hdrs(("Surrogate-Key", "n"))
            fetch_req(u.port, t)
            raw = request(admin_port(u), b'POST /purge HTTP/1.1\r\nHost: a\r\n'
                          b'Content-Length: 15\r\n\r\n{"tags": ["n"]}')
            self.assertTrue(raw.startswith(b"HTTP/1.1 403"), raw)
            self.assertHit(fetch_req(u.port, t))


class LuaTagsTest(unittest.TestCase, CacheAssertions):
    """on_response reads and sets res.tags; the cache tags the object with what it set."""

    def test_res_tags(self):
        hook = """
function on_response(req, res)
  if req.path == "/lua/add" then
    local t = res.tags
    t[#t + 1] = "added"
    res.tags = t
    res:set_header("X-Tags-Seen", table.concat(res.tags, "|"))
  elseif req.path == "/lua/none" then
    res.tags = nil
  elseif req.path == "/lua/bad" then
    res.tags = { "a\\1b" }
  end
end
"""
        with Origin() as o, Umbra(config(o.url) + hook) as u:
            add = "/lua/add?cc=max-age%3D600" + hdrs(("Cache-Tag", "o1, o2"))
            r = fetch_req(u.port, add)
            self.assertEqual(r.header("X-Tags-Seen"), "o1|o2|added")
            self.assertIsNone(r.header("Surrogate-Key"))
            self.assertIsNone(r.header("Cache-Tag"))
            self.assertHit(fetch_req(u.port, add))
            none = "/lua/none?cc=max-age%3D600" + hdrs(("Surrogate-Key", "added"))
            fetch_req(u.port, none)
            self.assertHit(fetch_req(u.port, none))
            r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "added")])
            self.assertEqual(r.header("Umbra-Purged"), "1")
            self.assertNotHit(fetch_req(u.port, add))
            self.assertHit(fetch_req(u.port, none))
            r = fetch_req(u.port, "/lua/bad?cc=max-age%3D600")
            self.assertEqual(r.status, 500)
            self.assertTrue(u.alive())


class CoalescedRevalidationTest(unittest.TestCase, CacheAssertions):
    """Many requests for one stale object: the origin sees one conditional request; the
    others wait for it (or, under stale-while-revalidate, get the stale object)."""

    def origin(self, cc, delay=0.4, status=None):
        def app(method, path, headers):
            time.sleep(delay)
            if status is not None and headers.get("if-none-match"):
                return status, [], b"down"
            if headers.get("if-none-match") == '"v1"':
                # The 304 freshens it for longer: the check after the herd is a hit.
                return 304, [("ETag", '"v1"'),
                             ("Cache-Control", cc.replace("max-age=1", "max-age=60"))], b""
            return 200, [("ETag", '"v1"'), ("Cache-Control", cc)], b"x" * 5000
        return app

    def herd(self, cc, workers, n=200):
        with PyOrigin(self.origin(cc)) as o, Umbra(config(o.url), workers=workers) as u:
            t = "/reval/herd"
            fetch_req(u.port, t)
            time.sleep(EXPIRE)
            n0 = len(o.requests(t))
            t0 = time.monotonic()
            results = concurrent(u.port, [t] * n)
            took = time.monotonic() - t0
            for i, (r, _) in enumerate(results):
                self.assertNotIsInstance(r, Exception, "request %d: %r" % (i, r))
                self.assertEqual((r.status, r.body), (200, b"x" * 5000), "request %d" % i)
            # (Under stale-while-revalidate the refresh may still be on its way.)
            wait_until(lambda: len(o.requests(t)) > n0, timeout=3)
            time.sleep(0.3)
            reqs = o.requests(t)[n0:]
            conditional = [h for _, _, h in reqs if h.get("if-none-match")]
            self.assertEqual(len(conditional), 1, "%d conditional requests" % len(conditional))
            self.assertEqual(len(reqs), 1, [h.get("if-none-match") for _, _, h in reqs])
            # Freshened: the next request is a hit.
            self.assertTrue(wait_until(lambda: is_hit(fetch_req(u.port, t)), timeout=3))
            self.assertEqual(len(o.requests(t)), n0 + 1)
            return results, took

    def test_200_requests_for_a_stale_object(self):
        results, took = self.herd("max-age=1", workers=1)
        self.assertLess(took, 10)

    def test_200_requests_for_a_stale_object_two_workers(self):
        self.herd("max-age=1", workers=2)

    def test_stale_while_revalidate_herd_gets_stale(self):
        results, took = self.herd("max-age=1, stale-while-revalidate=60", workers=2)
        # Nobody waited for the origin's 400 ms.
        slow = [d for r, d in results if d > 0.35]
        self.assertLessEqual(len(slow), len(results) // 10, "waited: %r" % slow[:10])

    def test_failing_revalidation_gives_every_waiter_stale_if_error(self):
        cc = "max-age=1, stale-if-error=60"
        with PyOrigin(self.origin(cc, status=503)) as o, Umbra(config(o.url)) as u:
            t = "/reval/sie"
            fetch_req(u.port, t)
            time.sleep(EXPIRE)
            results = concurrent(u.port, [t] * 50)
            for r, _ in results:
                self.assertNotIsInstance(r, Exception)
                self.assertEqual((r.status, r.body), (200, b"x" * 5000), r.raw_head)
            self.assertEqual(len(o.requests(t)), 2)


def responses(port, target, version="1.1", headers=()):
    """The responses (interim ones first) that one request on its own connection gets."""
    raw = ("GET %s HTTP/%s\r\nHost: umbra.test\r\nConnection: close\r\n" % (target, version) +
           "".join("%s: %s\r\n" % h for h in headers) + "\r\n").encode()
    return parse_responses(request(port, raw))


LINK = "</a.css>; rel=preload; as=style"


class InterimTest(unittest.TestCase, CacheAssertions):
    """1xx from the origin reach HTTP/1.1 clients (both transports), never the cache;
    umbra.early_hints sends a 103 from a hook."""

    HOOK = """
function on_request(req)
  if req.path:find("^/hint/") then
    umbra.early_hints({ link = { "</h.css>; rel=preload", "</h.js>; rel=preload" } })
    if req.path == "/hint/answer" then umbra.respond(200, "from the hook") end
  elseif req.path == "/hint-bad" then
    umbra.early_hints({ link = "a\\r\\nx: y" })
  end
end
function on_response(req, res)
  if req.path == "/hint-late" then umbra.early_hints({ link = "</x>" }) end
end
"""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        url = cls.origin.url
        cfg = """
upstreams = { app = { servers = { "%s" } }, viacurl = { servers = { "%s" }, client = "curl" } }
routes = { { path = "/curl/", upstream = "viacurl" }, { path = "/", upstream = "app" } }
""" % (url, url)
        cls.umbra = class_context(cls, Umbra(cfg + cls.HOOK))

    def info_target(self, path, extra=""):
        return path + "?info=103&infoh=" + q("Link: " + LINK) + extra

    def test_103_passed_to_http11_clients(self):
        for path in ("/i/h1", "/curl/i"):
            with self.subTest(path=path):
                rs = responses(self.umbra.port, self.info_target(path, "&cc=no-store"))
                self.assertEqual([r.status for r in rs], [103, 200])
                self.assertEqual(rs[0].header("Link"), LINK)
                self.assertIsNone(rs[1].header("Link"))
                self.assertEqual(rs[1].body, (self.info_target(path, "&cc=no-store") + "\n").encode())

    def test_100_102_103_in_order_others_dropped(self):
        for path in ("/i/many", "/curl/many"):
            with self.subTest(path=path):
                t = path + "?info=100&info=102&info=199&info=103&infoh=" + q("Link: " + LINK)
                rs = responses(self.umbra.port, t)
                self.assertEqual([r.status for r in rs], [100, 102, 103, 200])

    def test_interim_never_stored(self):
        t = self.info_target("/i/stored", "&cc=max-age%3D600")
        rs = responses(self.umbra.port, t)
        self.assertEqual([r.status for r in rs], [103, 200])
        rs = responses(self.umbra.port, t)
        self.assertEqual([r.status for r in rs], [200])
        self.assertHit(rs[0])
        self.assertIsNone(rs[0].header("Link"))

    def test_endless_interim_responses_are_bounded(self):
        # A hostile origin's many 1xx: at most 8 reach the client, then the answer.
        for path in ("/i/flood", "/curl/flood"):
            with self.subTest(path=path):
                t = path + "?cc=no-store" + "&info=102" * 8 + "&info=103" * 8
                rs = responses(self.umbra.port, t)
                self.assertEqual([r.status for r in rs], [102] * 8 + [200])
                self.assertTrue(self.umbra.alive())

    def test_http10_client_gets_no_interim(self):
        rs = responses(self.umbra.port, self.info_target("/i/h10", "&cc=no-store"), version="1.0")
        self.assertEqual([r.status for r in rs], [200])

    def test_early_hints_from_a_hook(self):
        rs = responses(self.umbra.port, "/hint/x?cc=no-store")
        self.assertEqual([r.status for r in rs], [103, 200])
        self.assertEqual(rs[0].header_all("Link"), ["</h.css>; rel=preload", "</h.js>; rel=preload"])
        rs = responses(self.umbra.port, "/hint/answer")
        self.assertEqual([r.status for r in rs], [103, 200])
        self.assertEqual(rs[1].body, b"from the hook")
        rs = responses(self.umbra.port, "/hint/x?cc=no-store", version="1.0")
        self.assertEqual([r.status for r in rs], [200])

    def test_early_hints_refused_where_wrong(self):
        rs = responses(self.umbra.port, "/hint-bad")
        self.assertEqual([r.status for r in rs], [500])
        rs = responses(self.umbra.port, "/hint-late?cc=no-store")
        self.assertEqual([r.status for r in rs], [500])
        self.assertTrue(self.umbra.alive())


def pipeline_fill(port, targets, conns=4, batch=250, timeout=120):
    """GETs every target over conns keep-alive connections, batch requests pipelined at a
    time; returns the statuses. Bounded: raises after timeout seconds."""
    deadline = time.monotonic() + timeout
    parts = [targets[i::conns] for i in range(conns)]
    statuses = [[] for _ in range(conns)]
    errors = []

    def run(i):
        try:
            with connect(port, 30) as s:
                todo = parts[i]
                for b in range(0, len(todo), batch):
                    chunk = todo[b:b + batch]
                    s.sendall(b"".join(req(t, close=False) for t in chunk))
                    data = b""
                    got = 0
                    pos = 0
                    while got < len(chunk):
                        if time.monotonic() > deadline:
                            raise AssertionError("fill took too long")
                        d = s.recv(1 << 20)
                        if not d:
                            raise AssertionError("connection closed")
                        data += d
                        while True:
                            end = data.find(b"\r\n\r\n", pos)
                            if end < 0:
                                break
                            head = data[pos:end].decode("latin-1")
                            cl = 0
                            for line in head.split("\r\n")[1:]:
                                k, _, v = line.partition(":")
                                if k.strip().lower() == "content-length":
                                    cl = int(v)
                            if len(data) < end + 4 + cl:
                                break
                            statuses[i].append(int(head.split(" ", 2)[1]))
                            pos = end + 4 + cl
                            got += 1
                    data = data[pos:]
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if errors:
        raise errors[0]
    return [x for st in statuses for x in st]


class BigPurgeTest(unittest.TestCase, CacheAssertions):
    """A tag on 100,000 objects is purged in bounded time, and other requests keep being
    served while it runs."""

    N = 100000

    def test_purge_tag_of_100000_objects(self):
        with Origin() as o, Umbra(config(o.url, memory='"1GB"', max_object='"1MB"'),
                                  workers=2) as u:
            targets = ["/big/%d?cc=max-age%%3D600&body=x&header=Surrogate-Key:big+k%d" % (i, i % 10)
                       for i in range(self.N)]
            t0 = time.monotonic()
            st = pipeline_fill(u.port, targets)
            fill = time.monotonic() - t0
            self.assertEqual(len(st), self.N)
            self.assertEqual(set(st), {200})
            other = "/big/other?cc=max-age%3D600"
            fetch_req(u.port, other)
            self.assertHit(fetch_req(u.port, other))
            # Hits on other connections while the purge runs.
            stop = threading.Event()
            lat = []

            def hits():
                while not stop.is_set() and len(lat) < 100000:
                    t1 = time.monotonic()
                    r = fetch_req(u.port, other)
                    lat.append((time.monotonic() - t1, r.status, is_hit(r)))

            hitters = [threading.Thread(target=hits, daemon=True) for _ in range(2)]
            for h in hitters:
                h.start()
            time.sleep(0.2)
            before = len(lat)
            t0 = time.monotonic()
            r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "big")],
                          timeout=60)
            took = time.monotonic() - t0
            time.sleep(0.2)
            stop.set()
            for h in hitters:
                h.join(10)
            self.assertEqual(r.status, 200, r.raw_head)
            self.assertEqual(r.header("Umbra-Purged"), str(self.N))
            if os.environ.get("UMBRA_TEST_VERBOSE"):
                print("\nfill %.2f s, purge of %d objects %.3f s, %d hits during it, worst %.3f s"
                      % (fill, self.N, took, len(lat) - before, max(x[0] for x in lat)))
            self.assertLess(took, 10 if os.environ.get("UMBRA_SANITIZE") else 3)
            self.assertGreater(len(lat) - before, 10, "no hits were served during the purge")
            self.assertTrue(all(s == 200 and h for _, s, h in lat))
            self.assertLess(max(x[0] for x in lat), 5)
            # All gone; the other object stays; the tag index is empty again.
            self.assertNotHit(fetch_req(u.port, targets[7]))
            self.assertHit(fetch_req(u.port, other))
            r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "k3")])
            self.assertEqual(r.header("Umbra-Purged"), "0")


def email_date(t):
    import email.utils
    return email.utils.formatdate(t, usegmt=True)


def config_errors(cfg):
    """Runs umbra -t on a config with one upstream route plus cfg; returns its output."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.lua")
        with open(path, "w") as f:
            f.write('upstreams = { app = { servers = { "http://127.0.0.1:9" } } }\n'
                    'routes = { { path = "/", upstream = "app" } }\n' + cfg)
        p = subprocess.run([os.environ["UMBRA_BIN"], "-t", path], capture_output=True,
                           text=True, timeout=20)
        return p.stdout + p.stderr


if __name__ == "__main__":
    unittest.main()
