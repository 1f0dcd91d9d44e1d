"""Rate limits and the shared dictionary (issue #29), against the real binary with two
workers and several connections: a token bucket's accuracy (a burst, then the steady
rate), 429 with Retry-After and nothing sent to the origin, keys from a header and from
Lua, limits and dictionaries kept across a reload; dictionary increments from both
workers adding up exactly, TTL expiry, eviction when full.

Every request opens a connection of its own (fetch_req closes it), so the kernel spreads
them over both workers; the tests that depend on it check that both answered."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import Origin, Umbra, admin_port, fetch_req, wait_until  # noqa: E402

SLOW = float(os.environ.get("UMBRA_TEST_SLOW") or 1)


def records(origin):
    with open(origin.record_path) as f:
        return [line for line in f if line.strip()]


def reload(u, config_body):
    """Rewrites the config (after the harness's own first lines) and sends SIGHUP; waits
    for the reload's log line."""
    with open(u.config_path) as f:
        text = f.read()
    head = text[:text.index("workers = 2\n") + len("workers = 2\n")]
    with open(u.config_path, "w") as f:
        f.write(head + config_body + "\n")
    before = u.log().count("SIGHUP: configuration reloaded")
    u.proc.send_signal(signal.SIGHUP)
    if not wait_until(lambda: u.log().count("SIGHUP: configuration reloaded") > before,
                      10 * SLOW):
        raise AssertionError("no reload:\n" + u.log())


def limited_config(url, limits, routes):
    return """
upstreams = { app = { servers = { "%s" } } }
rate_limits = { %s }
routes = { %s
  { path = "/", upstream = "app", cache = false } }
""" % (url, limits, routes)


class RateLimitTest(unittest.TestCase):
    def test_burst_then_steady_rate(self):
        # rate 4/s, burst 10: in T seconds of constant pressure from 6 connections at a
        # time, burst + rate * T requests pass (the bucket's arithmetic), within 2.
        rate, burst = 4.0, 10
        with Origin() as o, Umbra(limited_config(
                o.url, "api = { rate = %g, burst = %d, key = \"client\" }" % (rate, burst),
                '{ path = "/api/", upstream = "app", cache = false, rate_limit = "api" },'),
                workers=2) as u:
            stop = time.monotonic() + 3.0
            statuses = []

            def hammer(_):
                got = []
                while time.monotonic() < stop:
                    got.append((time.monotonic(), fetch_req(u.port, "/api/x").status))
                return got

            t0 = time.monotonic()
            with ThreadPoolExecutor(6) as ex:
                for got in ex.map(hammer, range(6)):
                    statuses += got
            t1 = max(t for t, _ in statuses)
            passed = sum(1 for _, s in statuses if s == 200)
            limited = sum(1 for _, s in statuses if s == 429)
            self.assertEqual(passed + limited, len(statuses), statuses)
            self.assertGreater(limited, 20, "the test did not press hard enough")
            expected = burst + rate * (t1 - t0)
            self.assertLessEqual(abs(passed - expected), 2,
                                 "passed %d, the bucket allows %.1f" % (passed, expected))
            # Nothing limited reached the origin.
            self.assertEqual(len([r for r in records(o) if "/api/x" in r]), passed)

    def test_429_with_retry_after(self):
        with Origin() as o, Umbra(limited_config(
                o.url, "slow = { rate = 0.2, burst = 1 }",
                '{ path = "/s/", upstream = "app", cache = false, rate_limit = "slow" },'),
                workers=2) as u:
            self.assertEqual(fetch_req(u.port, "/s/a").status, 200)
            r = fetch_req(u.port, "/s/a")
            self.assertEqual(r.status, 429)
            ra = r.header("Retry-After")
            self.assertRegex(ra, r"^\d+$")
            self.assertTrue(1 <= int(ra) <= 5, ra)
            # Another route is not limited.
            self.assertEqual(fetch_req(u.port, "/other").status, 200)
            self.assertEqual(len(records(o)), 2)

    def test_key_from_a_header(self):
        with Origin() as o, Umbra(limited_config(
                o.url, 'k = { rate = 0.01, burst = 2, key = "header:X-Api-Key" }',
                '{ path = "/k/", upstream = "app", cache = false, rate_limit = "k" },'),
                workers=2) as u:
            a, b = [("X-Api-Key", "a")], [("X-Api-Key", "b")]
            self.assertEqual([fetch_req(u.port, "/k/", headers=a).status for _ in range(3)],
                             [200, 200, 429])
            # Another key has its own bucket; no key at all is not limited.
            self.assertEqual(fetch_req(u.port, "/k/", headers=b).status, 200)
            self.assertEqual([fetch_req(u.port, "/k/").status for _ in range(4)], [200] * 4)

    def test_key_from_lua(self):
        body = """
rate_limits = { user = { rate = 0.01, burst = 3 } }
routes = { { path = "/", on_request = function(req)
  local ok, wait = umbra.limit("user", req:header("X-User") or "anon")
  if ok then return umbra.respond(200, "ok") end
  return umbra.respond(429, string.format("%.0f", wait),
                       { ["Retry-After"] = tostring(math.max(1, math.ceil(wait))) })
end } }
"""
        with Umbra(body, workers=2) as u:
            got = [fetch_req(u.port, "/", headers=[("X-User", "ann")]) for _ in range(4)]
            self.assertEqual([r.status for r in got], [200, 200, 200, 429])
            self.assertGreater(int(got[3].body), 50)  # about 100 s for a token at 0.01/s
            self.assertEqual(fetch_req(u.port, "/", headers=[("X-User", "bob")]).status, 200)

    def test_unknown_limit_is_a_config_error(self):
        with Umbra('routes = { { path = "/", root = ".", rate_limit = "nope" } }',
                   expect_fail=True) as u:
            self.assertNotEqual(u.returncode, 0)
            self.assertRegex(u.log(), r"config\.lua:\d+: routes\.1\.rate_limit: no rate limit 'nope'")
        with Umbra('rate_limits = { a = { rate = 0 } }', expect_fail=True) as u:
            self.assertRegex(u.log(), r"config\.lua:\d+: rate_limits\.a\.rate")
        with Umbra('rate_limits = { a = { rate = 1, key = "cookie" } }', expect_fail=True) as u:
            self.assertRegex(u.log(), r"config\.lua:\d+: rate_limits\.a\.key")

    def test_limit_kept_across_a_reload(self):
        limits = "r = { rate = 0.01, burst = %d }"
        routes = '{ path = "/r/", upstream = "app", cache = false, rate_limit = "r" },'
        with Origin() as o, Umbra(limited_config(o.url, limits % 2, routes), workers=2) as u:
            self.assertEqual([fetch_req(u.port, "/r/").status for _ in range(3)],
                             [200, 200, 429])
            # Unchanged (another setting changed): the bucket is the one it was.
            reload(u, limited_config(o.url, limits % 2, routes) + "\n-- again\n")
            self.assertEqual(fetch_req(u.port, "/r/").status, 429)
            # Changed: a new bucket, full.
            reload(u, limited_config(o.url, limits % 3, routes))
            self.assertEqual([fetch_req(u.port, "/r/").status for _ in range(4)],
                             [200, 200, 200, 429])

    def test_counted_in_the_metrics(self):
        with Origin() as o, Umbra(limited_config(
                o.url, "m = { rate = 0.01, burst = 1 }",
                '{ path = "/m/", upstream = "app", cache = false, rate_limit = "m" },')
                + '\nadmin = { listen = "127.0.0.1:0" }\n', workers=2) as u:
            for _ in range(3):
                fetch_req(u.port, "/m/")
            text = fetch_req(admin_port(u), "/metrics").body.decode()
            self.assertIn('umbra_rate_limit_requests_total{limit="m",result="passed"} 1\n', text)
            self.assertIn('umbra_rate_limit_requests_total{limit="m",result="limited"} 2\n', text)
            self.assertIn('umbra_rate_limit_entries{limit="m"} 1\n', text)
            promtool = shutil.which("promtool")
            if promtool:
                p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout.decode() + "\n" + text)


DICT = r"""
shared = { counters = "1MB", small = "16KB" }
routes = { { path = "/", on_request = function(req)
  local d = umbra.shared[req:header("X-Dict") or "counters"]
  local op, k = req.path:match("^/(%w+)/?(.*)$")
  local v = req:header("X-Value")
  local ttl = tonumber(req:header("X-Ttl") or "0")
  if op == "incr" then
    return umbra.respond(200, string.format("%d %d", d:incr(k, 1, 0), umbra.worker))
  elseif op == "get" then
    local got = d:get(k)
    return umbra.respond(200, type(got) .. " " .. tostring(got))
  elseif op == "set" then
    local val = v
    if req:header("X-Type") == "number" then val = tonumber(v) end
    if req:header("X-Type") == "boolean" then val = (v == "true") end
    return umbra.respond(200, tostring(d:set(k, val, ttl)))
  elseif op == "add" then
    local ok, err = d:add(k, v, ttl)
    return umbra.respond(200, tostring(ok) .. " " .. tostring(err))
  elseif op == "delete" then
    return umbra.respond(200, tostring(d:delete(k)))
  elseif op == "keys" then
    return umbra.respond(200, tostring(#d:keys(0)))
  elseif op == "fill" then
    for i = 1, tonumber(k) do d:set("key" .. i, string.rep("x", 20)) end
    return umbra.respond(200, "filled")
  end
  return umbra.respond(404, "no such op")
end } }
"""


class SharedDictTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.umbra = Umbra(DICT + '\nadmin = { listen = "127.0.0.1:0" }\n', workers=2).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)

    def get(self, path, *headers):
        r = fetch_req(self.umbra.port, path, headers=list(headers))
        self.assertEqual(r.status, 200, r.body)
        return r.body.decode()

    def test_increments_from_both_workers_add_up(self):
        n = 400
        with ThreadPoolExecutor(8) as ex:
            bodies = list(ex.map(lambda _: self.get("/incr/hits"), range(n)))
        values = sorted(int(b.split()[0]) for b in bodies)
        workers = {b.split()[1] for b in bodies}
        # Every increment seen once: each returned a distinct value, 1 to n.
        self.assertEqual(values, list(range(1, n + 1)))
        self.assertEqual(workers, {"0", "1"}, "both workers should have answered")
        self.assertEqual(self.get("/get/hits"), "number %d" % n)

    def test_values_add_and_delete(self):
        self.assertEqual(self.get("/set/s", ("X-Value", "text")), "true")
        self.assertEqual(self.get("/get/s"), "string text")
        self.assertEqual(self.get("/set/n", ("X-Value", "2.5"), ("X-Type", "number")), "true")
        self.assertEqual(self.get("/get/n"), "number 2.5")
        self.assertEqual(self.get("/set/b", ("X-Value", "false"), ("X-Type", "boolean")), "true")
        self.assertEqual(self.get("/get/b"), "boolean false")
        self.assertEqual(self.get("/add/s", ("X-Value", "other")), "false exists")
        self.assertEqual(self.get("/get/s"), "string text")
        self.assertEqual(self.get("/add/new", ("X-Value", "v")), "true nil")
        self.assertEqual(self.get("/delete/new"), "true")
        self.assertEqual(self.get("/get/new"), "nil nil")
        self.assertEqual(self.get("/delete/new"), "false")

    def test_ttl_expiry(self):
        self.assertEqual(self.get("/set/t", ("X-Value", "soon"), ("X-Ttl", "1")), "true")
        self.assertEqual(self.get("/get/t"), "string soon")
        time.sleep(1.3)
        self.assertEqual(self.get("/get/t"), "nil nil")
        # add succeeds once the old entry expired.
        self.assertEqual(self.get("/set/t2", ("X-Value", "a"), ("X-Ttl", "1")), "true")
        time.sleep(1.3)
        self.assertEqual(self.get("/add/t2", ("X-Value", "b")), "true nil")

    def test_eviction_when_full(self):
        # 16 KB hold far fewer than 2000 entries: the oldest go, counted.
        small = ("X-Dict", "small")
        self.assertEqual(self.get("/fill/2000", small), "filled")
        kept = int(self.get("/keys/", small))
        self.assertGreater(kept, 10)
        self.assertLess(kept, 400)
        self.assertEqual(self.get("/get/key2000", small), "string " + "x" * 20)
        self.assertEqual(self.get("/get/key1", small), "nil nil")
        text = fetch_req(admin_port(self.umbra), "/metrics").body.decode()
        m = re.search(r'^umbra_shared_evicted_total\{dict="small"\} (\d+)$', text, re.M)
        self.assertTrue(m, text)
        self.assertEqual(int(m.group(1)), 2000 - kept)


class SharedReloadTest(unittest.TestCase):
    def test_kept_across_a_reload_when_unchanged(self):
        with Umbra(DICT, workers=2) as u:
            for _ in range(5):
                fetch_req(u.port, "/incr/kept")
            reload(u, DICT + "\n-- the same dictionaries\n")
            self.assertEqual(fetch_req(u.port, "/get/kept").body.decode(), "number 5")
            # A new size: a new, empty dictionary.
            reload(u, DICT.replace('counters = "1MB"', 'counters = "2MB"'))
            self.assertEqual(fetch_req(u.port, "/get/kept").body.decode(), "nil nil")


if __name__ == "__main__":
    unittest.main()
