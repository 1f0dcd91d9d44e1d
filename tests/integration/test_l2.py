"""The second-level cache on Redis (issue #18) against the real binary and a real
redis-server: objects kept across restarts and shared by nodes, what is written and for
how long, purges carried to every node, and a Redis that is down, killed or silent never
holding a request up past cache.l2.timeout.

Each test class starts its own redis-server on a free 127.0.0.1 port (no persistence)
and stops it by PID; the Umbra nodes share it. The origin is the scripted test origin,
whose record file says what reached it.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, class_context, closed_port,  # noqa: E402
                           free_port, fetch_req, http_get, parse_metrics, scrape, wait_until)
from test_cache import (PyOrigin, cache_status, concurrent, config, cs_param,  # noqa: E402
                        is_hit, seen)

SANITIZED = bool(os.environ.get("UMBRA_SANITIZE"))
# What a request may take on top of cache.l2.timeout (0.05 s here) on a loaded machine,
# and under the sanitizers, which run everything several times slower.
SLACK = 0.75 if SANITIZED else 0.25
HOST = "umbra.test"


# -- a Redis of our own ----------------------------------------------------------------

def _resp_read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_read(f) for _ in range(n)]
    raise RuntimeError("unexpected reply %r" % line)


def rcmd(port, *args, timeout=5):
    """Sends one command to the Redis on port; returns its reply (bytes, int, str, list)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        with s.makefile("rb") as f:
            return _resp_read(f)


class Redis:
    """redis-server on a free 127.0.0.1 port, without persistence; stop() and start()
    again keep the port, kill() ends it with SIGKILL (a crash)."""

    def __init__(self, args=()):
        self.port = free_port()
        self.args = list(args)
        self.proc = None
        self.dir = None

    def start(self, timeout=10):
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="umbra-redis-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--bind", "127.0.0.1", "--dir", self.dir] + self.args,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def up():
            try:
                return rcmd(self.port, "PING", timeout=1) == "PONG"
            except OSError:
                return False
        if not wait_until(up, timeout):
            self.kill()
            raise RuntimeError("redis-server did not start on port %d" % self.port)
        return self

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, sig)
            self.proc.wait(10)
            self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill(signal.SIGTERM)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def cmd(self, *args):
        return rcmd(self.port, *args)

    def key(self, target, host=HOST):
        return "umbra:o:%s %s" % (host, target)

    def calls(self, command):
        """How many times command ran, from INFO commandstats."""
        info = self.cmd("INFO", "commandstats").decode()
        m = re.search(r"cmdstat_%s:calls=(\d+)" % command.lower(), info)
        return int(m.group(1)) if m else 0


class SilentRedis:
    """A server that accepts and reads, and never answers: a Redis that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
                c.setblocking(False)
                self.conns.append(c)
            except socket.timeout:
                pass
            for c in self.conns:
                try:
                    c.recv(65536)
                except OSError:
                    pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()
        return False


def l2_config(origin_url, redis_port, **l2):
    settings = {"redis": '"redis://127.0.0.1:%d"' % redis_port, "timeout": "0.05"}
    settings.update(l2)
    l2s = "{ %s }" % ", ".join("%s = %s" % kv for kv in settings.items())
    return config(origin_url, l2=l2s) + '\nadmin = { listen = "127.0.0.1:0" }\n'


def metric(umbra, name):
    return parse_metrics(scrape(umbra)).get((name, frozenset()), 0)


def l2_ready(umbra):
    """Every worker's Redis connection and the purge bus are up."""
    s = json.loads(scrape(umbra, "/status.json"))["l2"]
    return s["state"] == "up"


def get(umbra, target, headers=()):
    t0 = time.monotonic()
    r = fetch_req(umbra.port, target, headers=headers, host=HOST)
    return r, time.monotonic() - t0


def detail(resp):
    return cs_param(resp, "detail")


class SharedTest(unittest.TestCase):
    """Two nodes on one Redis: restarts, sharing, what is written, purges."""

    @classmethod
    def setUpClass(cls):
        cls.redis = class_context(cls, Redis())
        cls.origin = class_context(cls, Origin())
        cls.cfg = l2_config(cls.origin.url, cls.redis.port, max_object='"4KB"')
        cls.a = class_context(cls, Umbra(cls.cfg))
        cls.b = class_context(cls, Umbra(cls.cfg))
        for u in (cls.a, cls.b):
            assert wait_until(lambda: l2_ready(u), 10), u.log()

    def in_redis(self, target):
        return wait_until(lambda: self.redis.cmd("EXISTS", self.redis.key(target)) == 1, 5)

    def test_restarted_node_serves_from_l2(self):
        t = "/restart?cc=max-age%3D60"
        r1, _ = get(self.a, t)
        self.assertEqual(r1.status, 200)
        self.assertTrue(self.in_redis(t))
        with Umbra(self.cfg) as fresh:  # an empty memory cache
            self.assertTrue(wait_until(lambda: l2_ready(fresh), 10), fresh.log())
            r2, _ = get(fresh, t)
            self.assertEqual(r2.status, 200)
            self.assertTrue(is_hit(r2), cache_status(r2))
            self.assertEqual(detail(r2), "l2")
            self.assertEqual(r2.body, r1.body)
            self.assertEqual(r2.header("X-Origin-Count"), r1.header("X-Origin-Count"))
            # Kept in memory from then on.
            r3, _ = get(fresh, t)
            self.assertTrue(is_hit(r3))
            self.assertIsNone(detail(r3))
            m = parse_metrics(scrape(fresh))
            self.assertGreaterEqual(m[("umbra_l2_hits_total", frozenset())], 1)
            n = m[("umbra_l2_lookup_seconds_count", frozenset())]
            self.assertGreaterEqual(n, 1)
            self.assertEqual(m[("umbra_l2_lookup_seconds_bucket", frozenset({("le", "+Inf")}))], n)
            self.assertLess(m[("umbra_l2_lookup_seconds_sum", frozenset())], n * 0.05)
            self.assertEqual(m[("umbra_l2_connections_up", frozenset())], fresh.workers)
        self.assertEqual(seen(self.origin, t), 1)

    def test_other_node_serves_from_l2(self):
        t = "/shared?cc=max-age%3D60&size=3000"
        r1, _ = get(self.a, t)
        self.assertTrue(self.in_redis(t))
        r2, _ = get(self.b, t)
        self.assertEqual(detail(r2), "l2")
        self.assertEqual(r2.body, r1.body)
        self.assertEqual(seen(self.origin, t), 1)

    def test_coalesced_one_get_one_fetch(self):
        # Requests that arrive while the lookup is pending wait on the same fill: Redis
        # sees one GET and the origin one request.
        t = "/coalesce?cc=max-age%3D60&delay=200"
        gets = self.redis.calls("get")
        out = concurrent(self.b.port, [t] * 6)
        for r, _ in out:
            self.assertEqual(getattr(r, "status", r), 200)
        self.assertEqual(seen(self.origin, t), 1)
        self.assertEqual(self.redis.calls("get") - gets, 1)

    def test_stale_value_not_served(self):
        # Kept in Redis for its stale window, but no longer fresh: another node asks the
        # origin rather than serve it unchecked.
        t = "/stale-in-l2?cc=max-age%3D1%2C%20stale-while-revalidate%3D30"
        get(self.a, t)
        self.assertTrue(self.in_redis(t))
        time.sleep(2.2)
        r, _ = get(self.b, t)
        self.assertEqual(r.status, 200)
        self.assertNotEqual(detail(r), "l2")
        self.assertEqual(seen(self.origin, t), 2)

    def test_over_max_object_not_written(self):
        small, big = "/small?cc=max-age%3D60&size=100", "/big?cc=max-age%3D60&size=5000"
        get(self.a, big)
        get(self.a, small)
        self.assertTrue(self.in_redis(small))
        self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(big)), 0)

    def test_ttl_is_the_objects_lifetime(self):
        t1 = "/ttl1?cc=max-age%3D30"
        t2 = "/ttl2?cc=max-age%3D30%2C%20stale-while-revalidate%3D40"
        get(self.a, t1)
        get(self.a, t2)
        self.assertTrue(self.in_redis(t1) and self.in_redis(t2))
        p1 = self.redis.cmd("PTTL", self.redis.key(t1))
        p2 = self.redis.cmd("PTTL", self.redis.key(t2))
        self.assertTrue(25000 <= p1 <= 30000, p1)
        self.assertTrue(65000 <= p2 <= 70000, p2)  # the stale window counts
        # An uncacheable answer is not written at all.
        t3 = "/ttl3?cc=no-store"
        get(self.a, t3)
        time.sleep(0.1)
        self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(t3)), 0)

    def fill_both(self, t):
        get(self.a, t)
        self.assertTrue(self.in_redis(t))
        r, _ = get(self.b, t)
        self.assertTrue(is_hit(r))
        r, _ = get(self.b, t)
        self.assertTrue(is_hit(r))
        self.assertEqual(seen(self.origin, t), 1)

    def test_purge_url_everywhere(self):
        t = "/purge-url?cc=max-age%3D60"
        self.fill_both(t)
        r = fetch_req(self.a.port, t, method="PURGE", host=HOST)
        self.assertEqual(r.status, 200)
        time.sleep(0.1)
        self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(t)), 0)
        r, _ = get(self.b, t)
        self.assertFalse(is_hit(r), cache_status(r))
        self.assertEqual(seen(self.origin, t), 2)

    def test_purge_tag_everywhere(self):
        ts = ["/purge-tag%d?cc=max-age%%3D60&header=Surrogate-Key:grp%d%%20all" % (i, i)
              for i in range(3)]
        keep = "/purge-tag-keep?cc=max-age%3D60&header=Surrogate-Key:other"
        for t in ts + [keep]:
            self.fill_both(t)
        status, _, body = http_get(admin_port(self.a), "/purge", method="POST",
                                   headers={"Content-Type": "application/json"},
                                   body=b'{"tags": ["all"]}')
        self.assertEqual(status, 200, body)
        time.sleep(0.1)
        self.assertEqual(self.redis.cmd("EXISTS", "umbra:t:all"), 0)
        for t in ts:
            self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(t)), 0, t)
            r, _ = get(self.b, t)
            self.assertFalse(is_hit(r), t)
        self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(keep)), 1)
        r, _ = get(self.b, keep)
        self.assertTrue(is_hit(r))

    def test_purge_prefix_everywhere(self):
        ts = ["/pfx/x%d?cc=max-age%%3D60" % i for i in range(3)]
        for t in ts:
            self.fill_both(t)
        r = fetch_req(self.b.port, "/pfx/*", method="PURGE", host=HOST)
        self.assertEqual(r.status, 200)
        time.sleep(0.1)
        for t in ts:
            self.assertEqual(self.redis.cmd("EXISTS", self.redis.key(t)), 0, t)
            r, _ = get(self.a, t)
            self.assertFalse(is_hit(r), t)

    def test_soft_purge_everywhere(self):
        t = "/purge-soft?cc=max-age%3D60"
        self.fill_both(t)
        r = fetch_req(self.a.port, t, method="PURGE", host=HOST,
                      headers=[("Umbra-Purge", "soft")])
        self.assertEqual(r.status, 200)
        time.sleep(0.1)
        # B kept it but treats it as stale: it goes back to the origin.
        r, _ = get(self.b, t)
        self.assertEqual(cs_param(r, "fwd"), "stale", cache_status(r))
        self.assertEqual(seen(self.origin, t), 2)


class RevalidatedTest(unittest.TestCase):
    """An object freshened by a 304 is written again, with its new lifetime."""

    def app(self, method, path, headers):
        if headers.get("if-none-match") == '"v1"':
            return 304, [("ETag", '"v1"'), ("Cache-Control", "max-age=2")], b""
        return 200, [("ETag", '"v1"'), ("Cache-Control", "max-age=2")], b"version one\n"

    def test_304_rewritten(self):
        with Redis() as redis, PyOrigin(self.app) as origin:
            cfg = l2_config(origin.url, redis.port)
            with Umbra(cfg) as a, Umbra(cfg) as b:
                for u in (a, b):
                    self.assertTrue(wait_until(lambda: l2_ready(u), 10), u.log())
                t = "/reval"
                get(a, t)
                key = redis.key(t)
                self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", key) == 1, 5))
                sets = redis.calls("set")
                time.sleep(2.3)  # stale in memory and in Redis
                r, _ = get(a, t)
                self.assertEqual(r.status, 200)
                self.assertEqual(cs_param(r, "fwd"), "stale", cache_status(r))
                self.assertTrue(wait_until(lambda: redis.calls("set") == sets + 1, 5))
                # The other node gets the freshened copy from Redis, not the origin.
                r, _ = get(b, t)
                self.assertEqual(detail(r), "l2", cache_status(r))
                self.assertEqual(r.body, b"version one\n")
                full = [h for m, p, h in origin.requests(t) if "if-none-match" not in h]
                self.assertEqual(len(full), 1)
                self.assertEqual(len(origin.requests(t)), 2)


class RedisDownTest(unittest.TestCase):
    """Redis killed mid-test, then back."""

    def test_killed_then_back(self):
        with Redis() as redis, Origin() as origin, \
                Umbra(l2_config(origin.url, redis.port)) as u:
            self.assertTrue(wait_until(lambda: l2_ready(u), 10), u.log())
            t0 = "/before?cc=max-age%3D60"
            get(u, t0)
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t0)) == 1, 5))
            redis.kill()
            for i in range(20):
                t = "/down%d?cc=max-age%%3D60" % i
                r, took = get(u, t)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, t.encode() + b"\n")
                self.assertLess(took, 0.05 + SLACK, t)
            r, _ = get(u, t0)  # still in memory
            self.assertTrue(is_hit(r))
            # The worker notices the closed connection on its own loop turn, not before the
            # requests above: wait for the one line, then check there is only one.
            down = "Redis at .* is unavailable"
            wait_until(lambda: re.search(down, u.log()) is not None, 5)
            self.assertEqual(len(re.findall(down, u.log())), 1, u.log())
            self.assertEqual(json.loads(scrape(u, "/status.json"))["l2"]["state"], "down")
            redis.start()
            self.assertTrue(wait_until(lambda: l2_ready(u), 10), u.log())
            self.assertIn("is back", u.log())
            t1 = "/after?cc=max-age%3D60"
            get(u, t1)
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t1)) == 1, 5))

    def test_never_up(self):
        with Origin() as origin, Umbra(l2_config(origin.url, closed_port())) as u:
            for i in range(5):
                t = "/nored%d?cc=max-age%%3D60" % i
                r, took = get(u, t)
                self.assertEqual(r.status, 200)
                self.assertLess(took, 0.05 + SLACK)
                r, _ = get(u, t)
                self.assertTrue(is_hit(r))
            self.assertGreater(metric(u, "umbra_l2_write_drops_total"), 0)


class SlowRedisTest(unittest.TestCase):
    """A Redis that stalls for a while (DEBUG SLEEP) and then answers: the lookups made
    meanwhile go on to the origin after the timeout, their late replies are dropped, and
    the same connection serves lookups again."""

    def test_stall(self):
        with Redis(["--enable-debug-command", "local"]) as redis, Origin() as origin, \
                Umbra(l2_config(origin.url, redis.port)) as u:
            self.assertTrue(wait_until(lambda: l2_ready(u), 10), u.log())
            t0 = "/slow-before?cc=max-age%3D60"
            get(u, t0)
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t0)) == 1, 5))
            stall = threading.Thread(target=rcmd, args=(redis.port, "DEBUG", "SLEEP", "1"),
                                     kwargs={"timeout": 10}, daemon=True)
            stall.start()
            time.sleep(0.1)
            for i in range(2):
                t = "/slow%d?cc=max-age%%3D60" % i
                r, took = get(u, t)
                self.assertEqual(r.status, 200)
                self.assertLess(took, 0.05 + SLACK, t)
                self.assertEqual(seen(origin, t), 1)
            stall.join(10)
            self.assertGreaterEqual(metric(u, "umbra_l2_timeouts_total"), 2)
            # Afterwards, a restarted node finds what was written meanwhile.
            t1 = "/slow0?cc=max-age%3D60"
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t1)) == 1, 5))
            with Umbra(l2_config(origin.url, redis.port)) as fresh:
                self.assertTrue(wait_until(lambda: l2_ready(fresh), 10), fresh.log())
                r, _ = get(fresh, t1)
                self.assertEqual(detail(r), "l2")
            self.assertEqual(seen(origin, t1), 1)


class SilentRedisTest(unittest.TestCase):
    """A Redis that accepts and never answers costs each miss at most the timeout."""

    def test_silent(self):
        with SilentRedis() as silent, Origin() as origin, \
                Umbra(l2_config(origin.url, silent.port)) as u:
            for i in range(8):
                t = "/silent%d?cc=max-age%%3D60" % i
                r, took = get(u, t)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, t.encode() + b"\n")
                self.assertLess(took, 0.05 + SLACK, t)
                self.assertEqual(seen(origin, t), 1)
            self.assertGreater(metric(u, "umbra_l2_timeouts_total"), 0)
            self.assertEqual(len(re.findall("is unavailable", u.log())), 1, u.log())


class ConfigTest(unittest.TestCase):
    def test_errors(self):
        cases = [
            ('{ redis = "http://127.0.0.1:6379" }', "cache.l2.redis: 'http://127.0.0.1:6379'"),
            ('{ redis = "redis://redis.example:6379" }', "is not redis://ADDRESS[:PORT]"),
            ('{ redis = "redis://127.0.0.1:70000" }', "is not redis://ADDRESS[:PORT]"),
            ('{ redis = "redis://127.0.0.1:6379", timeout = 0 }', "cache.l2.timeout"),
            ('{ redis = "redis://127.0.0.1:6379", max_object = "1GB" }',
             "cache.l2.max_object"),
            ('{ redis = "redis://127.0.0.1:6379", tiemout = 1 }', "tiemout"),
            ('{ timeout = 1 }', "cache.l2: redis is required"),
            ('"redis://127.0.0.1"', "cache.l2: expected a table"),
        ]
        for l2, needle in cases:
            with self.subTest(l2=l2):
                body = ('upstreams = { app = { servers = { "http://127.0.0.1:9" } } }\n'
                        'routes = { { path = "/", upstream = "app" } }\n'
                        'cache = {\n  memory = "64MB",\n  l2 = %s }\n' % l2)
                with Umbra(body, expect_fail=True) as u:
                    self.assertEqual(u.returncode, 1)
                    with open(u.config_path) as f:
                        lines = f.read().splitlines()
                    line = next(i + 1 for i, s in enumerate(lines) if "l2 =" in s)
                    self.assertIn("config.lua:%d: " % line, u.log())
                    self.assertIn(needle, u.log())


class HoldingRedis:
    """A Redis that answers PING, SUBSCRIBE and GET (always a miss) until a connection
    sends its first SET, and from then on reads that connection and never answers it: the
    writes pile up unanswered. It records each SET's key and value length."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.sets = []  # (key, value length), in order
        self.lock = threading.Lock()
        self.conns = []
        self.stop = threading.Event()

    def _accept(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        holding = False
        try:
            while not self.stop.is_set():
                cmd = _resp_read(f)
                if not isinstance(cmd, list) or not cmd:
                    return
                name = cmd[0].upper()
                if name == b"SET":
                    with self.lock:
                        self.sets.append((cmd[1].decode(), len(cmd[2])))
                    holding = True
                if holding:
                    continue
                if name == b"PING":
                    c.sendall(b"+PONG\r\n")
                elif name == b"GET":
                    c.sendall(b"$-1\r\n")
                elif name == b"SUBSCRIBE":
                    c.sendall(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(cmd[1]), cmd[1]))
                else:
                    c.sendall(b"+OK\r\n")
        except (OSError, ConnectionError, ValueError):
            pass

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.sock.close()
        return False

    def got(self):
        with self.lock:
            return list(self.sets)


class PromisesTest(unittest.TestCase):
    """Issue #26: the README's numbers for the L2, at their boundaries (the reconnect
    backoff is tests/unit/test_redis_loop.c)."""

    def test_lookup_histogram_buckets(self):
        # README: "the histogram `umbra_l2_lookup_seconds` (buckets of 0.25, 0.5, 1, 2, 5,
        # 10, 25 and 50 ms)".
        with Origin() as origin, Umbra(l2_config(origin.url, closed_port())) as u:
            text = scrape(u)
        les = re.findall(r'^umbra_l2_lookup_seconds_bucket\{le="([^"]+)"\}', text, re.M)
        self.assertEqual(les, ["0.00025", "0.0005", "0.001", "0.002", "0.005", "0.01",
                               "0.025", "0.05", "+Inf"])

    def test_writes_past_8MB_unanswered_are_dropped(self):
        # README: writes are dropped "when one would leave more than 8 MiB of writes
        # unanswered on it (a write counts its value, its key and 64 bytes)". Once the
        # first write is unanswered, one that would take the total one byte past 8 MiB is
        # dropped, and one that takes it exactly to 8 MiB is sent.
        limit = 8 << 20
        with HoldingRedis() as redis, Origin() as origin, \
                Umbra(l2_config(origin.url, redis.port, max_object='"8MB"'), workers=1) as u:
            self.assertTrue(wait_until(lambda: metric(u, "umbra_l2_connections_up") == 1, 10),
                            u.log())
            target = "/hold%d?cc=max-age%%3D600&size=%d"
            b1 = 4000000
            r, _ = get(u, target % (1, b1))
            self.assertEqual((r.status, len(r.body)), (200, b1))
            self.assertTrue(wait_until(lambda: len(redis.got()) == 1, 5))
            key1, v1 = redis.got()[0]
            overhead = v1 - b1
            cost1 = v1 + len(key1) - len("umbra:o:") + 64
            # Same key length, same digits in Content-Length: the same overhead.
            b2 = limit - cost1 + 1 - (len(key1) - len("umbra:o:")) - 64 - overhead
            self.assertEqual(len(str(b2)), len(str(b1)))
            drops = metric(u, "umbra_l2_write_drops_total")
            r, _ = get(u, target % (2, b2))
            self.assertEqual((r.status, len(r.body)), (200, b2))
            self.assertTrue(wait_until(
                lambda: metric(u, "umbra_l2_write_drops_total") == drops + 1, 5))
            r, _ = get(u, target % (3, b2 - 1))
            self.assertEqual((r.status, len(r.body)), (200, b2 - 1))
            self.assertTrue(wait_until(lambda: len(redis.got()) == 2, 5), redis.got())
            key3, v3 = redis.got()[1]
            self.assertIn("/hold3?", key3)
            self.assertEqual(cost1 + v3 + len(key3) - len("umbra:o:") + 64, limit)
            self.assertEqual(metric(u, "umbra_l2_write_drops_total"), drops + 1)


if __name__ == "__main__":
    unittest.main()
