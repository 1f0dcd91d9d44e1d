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
from umbra_harness import (Origin, Umbra, class_context, connect, fetch_req,  # noqa: E402
                           origin_body, parse_response, req, wait_until)
from test_cache import (CacheAssertions, EXPIRE, concurrent, config, cs_param,  # noqa: E402
                        is_hit, seen)


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


if __name__ == "__main__":
    unittest.main()
