"""The disk tier (issue #28): cache.disk beneath the memory cache, against the real binary.

The origin here makes every object's body from its own path (SHA-256 blocks of the path
and the block number), so a body served for the wrong object, or with any byte changed,
never equals the one expected. It counts the requests per path.
"""

import hashlib
import http.server
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import Umbra, admin_port, fetch_req, sanitizer_build  # noqa: E402


def body_of(path, size):
    out = []
    for k in range(size // 32 + 1):
        out.append(hashlib.sha256(("%s:%d" % (path, k)).encode()).digest())
    return b"".join(out)[:size]


class PathOrigin:
    """Answers GET /PATH?size=N[&tags=T] with body_of(/PATH, N), max-age=600 (or max_age,
    and cc_extra's directives), ETag "v1"; a request with If-None-Match: "v1" gets a 304.
    conditionals: the If-None-Match of each request (None: unconditional). While failing
    is set, every request gets a 503."""

    def __init__(self, max_age=600, cc_extra=""):
        self.max_age = max_age
        self.cc_extra = cc_extra
        self.failing = False

    def __enter__(self):
        counts = self.counts = {}
        conditionals = self.conditionals = []
        max_age = self.max_age
        cc = "max-age=%d%s" % (max_age, self.cc_extra)
        origin = self
        lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                path, _, query = self.path.partition("?")
                q = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                inm = self.headers.get("If-None-Match")
                with lock:
                    counts[path] = counts.get(path, 0) + 1
                    conditionals.append(inm)
                if origin.failing:
                    self.send_response(503)
                    self.send_header("Content-Length", "5")
                    self.end_headers()
                    self.wfile.write(b"down\n")
                    return
                if inm == '"v1"':
                    self.send_response(304)
                    self.send_header("ETag", '"v1"')
                    self.send_header("Cache-Control", cc)
                    self.end_headers()
                    return
                name = path
                if "vary" in q:  # the body differs by the X-Lang the request sent
                    name = "%s:%s" % (path, self.headers.get("X-Lang"))
                body = body_of(name, int(q.get("size", "1000")))
                self.send_response(200)
                if "vary" in q:
                    self.send_header("Vary", "X-Lang, Accept-Encoding")
                self.send_header("ETag", '"v1"')
                self.send_header("Cache-Control", cc)
                self.send_header("Content-Type", "application/octet-stream")
                if "tags" in q:
                    self.send_header("Surrogate-Key", q["tags"].replace("+", " "))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        return self

    def total(self):
        return sum(self.counts.values())

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False


def vm_kb(pid, field):
    """A field of /proc/PID/status in kB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for %d" % (field, pid))


def config(origin_url, disk_dir, memory="2MB", size="64MB", extra=""):
    return """
cache = { memory = "%s", disk = { path = "%s", size = "%s", sync = 0.2 %s } }
upstreams = { app = { servers = { "%s" } } }
routes = { { path = "/", upstream = "app" } }
""" % (memory, disk_dir, size, extra, origin_url)


def get(u, path, size):
    return fetch_req(u.port, "%s?size=%d" % (path, size))


class DiskTierTest(unittest.TestCase):
    N = 240          # objects of SIZE bytes: 12 x the 2 MB memory cap
    SIZE = 100 * 1024

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-disk-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def fill(self, u, o, n=None):
        n = n or self.N
        for i in range(n):
            r = get(u, "/o/%d" % i, self.SIZE)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE))
        self.assertEqual(o.total(), n)

    def wait_written(self, u, n):
        """Until the disk holds n objects (its index, as /metrics says)."""
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.disk_metric(u, "umbra_disk_objects") >= n:
                return
            time.sleep(0.1)
        self.fail("the disk did not get %d objects" % n)

    def disk_metric(self, u, name):
        r = fetch_req(admin_port(u), "/metrics")
        m = re.search(r"^%s (\d+)" % name, r.body.decode(), re.M)
        return int(m.group(1)) if m else -1

    def serve_all_again(self, u, o, before, n=None):
        n = n or self.N
        disk_hits = 0
        for i in range(n):
            r = get(u, "/o/%d" % i, self.SIZE)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE), "object %d" % i)
            if "detail=disk" in (r.header("Cache-Status") or ""):
                disk_hits += 1
        self.assertEqual(o.total(), before, "the origin was asked again")
        return disk_hits

    def umbra(self, o, env=None, **kw):
        return Umbra(config(o.url, self.dir, **kw) + '\nadmin = { listen = "127.0.0.1:0" }\n',
                     env=env)

    def test_working_set_twelve_times_memory_served_without_the_origin(self):
        with PathOrigin() as o, self.umbra(o) as u:
            rss0 = vm_kb(u.proc.pid, "VmRSS")
            self.fill(u, o)
            self.wait_written(u, self.N)
            hits = self.serve_all_again(u, o, self.N)
            # Most of it was evicted from the 2 MB of memory: the disk answered.
            self.assertGreater(hits, self.N // 2)
            self.assertGreater(self.disk_metric(u, "umbra_disk_hits_total"), self.N // 2)
            status = json.loads(fetch_req(admin_port(u), "/status.json").body)
            self.assertEqual(status["disk"]["stores"], 1)
            self.assertEqual(status["disk"]["size"], 64 << 20)
            self.assertEqual(status["disk"]["objects"], self.N)
            self.assertGreater(status["disk"]["used"], self.N * self.SIZE)
            page = fetch_req(admin_port(u), "/status").body.decode()
            self.assertIn("disk-state", page)
            if sanitizer_build() is None:  # a sanitizer's shadow memory counts in RSS
                # The 24 MB went through 2 MB of memory: the peak grew by the cap and the
                # index, buffers and allocator slack, far from what the objects hold.
                grew = vm_kb(u.proc.pid, "VmHWM") - rss0
                self.assertLess(grew, 14 * 1024, "peak RSS grew by %d kB" % grew)

    def test_a_disk_hit_goes_into_memory_when_asked_again(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 3)
                self.wait_written(u, 3)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # memory empty, the disk holds the three
                details = []
                for _ in range(3):
                    r = get(u, "/o/1", self.SIZE)
                    self.assertEqual(r.body, body_of("/o/1", self.SIZE))
                    details.append(r.header("Cache-Status") or "")
                    if len(details) == 1:  # the first read is served, not kept
                        self.assertEqual(self.disk_metric(u, "umbra_disk_promotions_total"), 0)
                self.assertIn("hit", details[0])
                self.assertIn("detail=disk", details[0])
                self.assertIn("detail=disk", details[1], "not kept in memory at the first read")
                self.assertIn("hit", details[2])
                self.assertNotIn("detail=disk", details[2], "kept in memory at the second")
                self.assertEqual(self.disk_metric(u, "umbra_disk_hits_total"), 2)
                self.assertEqual(self.disk_metric(u, "umbra_disk_promotions_total"), 1)
                # The two reads in the read latency histogram.
                page = fetch_req(admin_port(u), "/metrics").body.decode()
                self.assertIn("# TYPE umbra_disk_read_seconds histogram", page)
                self.assertEqual(self.disk_metric(u, "umbra_disk_read_seconds_count"), 2)
                self.assertRegex(page, r'umbra_disk_read_seconds_bucket\{le="\+Inf"\} 2\n')
                total = float(re.search(r"^umbra_disk_read_seconds_sum (\S+)", page, re.M).group(1))
                self.assertGreater(total, 0)
                self.assertLess(total, 10)
                # Asked once each, beyond the memory's reach: read from disk, none kept.
                for i in (0, 2):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertIn("detail=disk", r.header("Cache-Status") or "")
                self.assertEqual(self.disk_metric(u, "umbra_disk_promotions_total"), 1)
                self.assertEqual(o.total(), 3)

    def test_requests_that_wait_on_a_disk_read_not_kept_get_it_from_disk(self):
        # Requests coalesced on one fill that the disk answers without promoting it (its
        # first read): each gets the object from disk, none from the origin.
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 2)
                self.wait_written(u, 2)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o, env={"UMBRA_TEST_DISK_DELAY_MS": "300"}) as u:
                got = []

                def one():
                    r = get(u, "/o/1", self.SIZE)
                    got.append((r.status, r.body == body_of("/o/1", self.SIZE)))

                threads = [threading.Thread(target=one) for _ in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                self.assertEqual(got, [(200, True)] * 8)
                self.assertEqual(o.total(), 2, "a waiter went to the origin")

    def test_several_stores(self):
        dirs = [os.path.join(self.dir, d) for d in ("a", "b", "c")]
        for d in dirs:
            os.mkdir(d)
        stores = ", ".join('{ path = "%s", size = "16MB" }' % d for d in dirs)
        conf = """
cache = { memory = "2MB", disk = { %s, sync = 0.2 } }
upstreams = { app = { servers = { "%%s" } } }
routes = { { path = "/", upstream = "app" } }
admin = { listen = "127.0.0.1:0" }
""" % stores
        with PathOrigin() as o:
            with Umbra(conf % o.url) as u:
                self.fill(u, o, 90)
                self.wait_written(u, 90)
                self.assertEqual(u.stop(), 0)
            # Every store got some of the keys: its index snapshot (written at the stop,
            # 32 bytes an object after its header) holds more than ten of them.
            sizes = [os.path.getsize(os.path.join(d, "umbra.store.index")) for d in dirs]
            for sz in sizes:
                self.assertGreater(sz, 32 * 10, sizes)
            with Umbra(conf % o.url) as u:
                self.assertEqual(self.serve_all_again(u, o, 90, 90), 90)

    def test_restart_keeps_the_cache(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 60)
                self.wait_written(u, 60)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:
                hits = self.serve_all_again(u, o, 60, 60)
                self.assertEqual(hits, 60)  # memory was empty: every one from the disk

    def test_kill_9_serves_what_was_synced(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 60)
                self.wait_written(u, 60)
                time.sleep(1.0)  # past the sync interval (0.2 s)
                u.stop(signal.SIGKILL)
            with self.umbra(o) as u:
                self.serve_all_again(u, o, 60, 60)

    def test_corrupt_store_never_serves_a_wrong_body(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 60)
                self.wait_written(u, 60)
                self.assertEqual(u.stop(), 0)
            store = os.path.join(self.dir, "umbra.store")
            rnd = random.Random(28)
            size = os.path.getsize(store)
            with open(store, "r+b") as f:
                for _ in range(400):  # bytes all over the written records
                    f.seek(rnd.randrange(4096, min(size, 60 * (self.SIZE + 8192))))
                    f.write(bytes([rnd.randrange(256)]))
            with self.umbra(o) as u:
                for i in range(60):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE), "object %d" % i)
                self.assertGreater(o.total(), 60)  # the damaged ones were fetched again
                self.assertGreater(self.disk_metric(u, "umbra_disk_checksum_failures_total"), 0)

    def test_store_overflowing_stays_within_its_size(self):
        with PathOrigin() as o, self.umbra(o, size="4MB") as u:
            self.fill(u, o)  # 24 MB through a 4 MB store
            self.wait_written(u, 1)
            self.assertEqual(os.path.getsize(os.path.join(self.dir, "umbra.store")), 4 << 20)
            self.assertGreater(self.disk_metric(u, "umbra_disk_evictions_total"), 0)
            self.assertLess(self.disk_metric(u, "umbra_disk_objects"), 40)

    def test_an_object_asked_for_survives_the_cursor(self):
        # A 4 MB store laps about every 39 objects of 100 KiB (and the 2 MB of memory hold
        # about 20): an object asked for every 33 objects comes from the disk, near the
        # cursor, and is written again ahead of it; it never goes back to the origin.
        with PathOrigin() as o, self.umbra(o, size="4MB") as u:
            hot = "/hot/1"
            self.assertEqual(get(u, hot, self.SIZE).status, 200)
            for i in range(264):  # about seven laps
                self.assertEqual(get(u, "/o/%d" % i, self.SIZE).status, 200)
                if i % 33 == 32:
                    self.wait_written(u, 1)
                    r = get(u, hot, self.SIZE)
                    self.assertEqual(r.body, body_of(hot, self.SIZE))
            self.assertEqual(o.counts[hot], 1, "the hot object went back to the origin")
            self.assertGreater(self.disk_metric(u, "umbra_disk_rewrites_total"), 0)
            self.assertGreater(self.disk_metric(u, "umbra_disk_evictions_total"), 0)

    def test_a_stale_record_is_revalidated_and_freshened(self):
        with PathOrigin(max_age=5) as o:
            with self.umbra(o) as u:
                self.fill(u, o, 5)
                self.wait_written(u, 5)
                self.assertEqual(u.stop(), 0)
            time.sleep(5.5)  # stale on disk
            with self.umbra(o) as u:  # memory empty: the disk's stale records
                for i in range(5):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE))
                # One conditional request each, answered 304: the record's body served.
                self.assertEqual(o.conditionals[5:], ['"v1"'] * 5)
                self.assertEqual(self.disk_metric(u, "umbra_disk_revalidations_total"), 5)
                time.sleep(0.5)  # the freshened records written
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # fresh again on disk: no origin request
                for i in range(5):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE))
                    self.assertIn("detail=disk", r.header("Cache-Status") or "")
                self.assertEqual(o.total(), 10)

    def stale_on_disk(self, o, n):
        """n objects written to disk, then stale there (the origin's max-age is short)."""
        with self.umbra(o) as u:
            self.fill(u, o, n)
            self.wait_written(u, n)
            self.assertEqual(u.stop(), 0)
        time.sleep(o.max_age + 1.5)

    def test_stale_while_revalidate_serves_the_disk_record(self):
        with PathOrigin(max_age=2, cc_extra=", stale-while-revalidate=600") as o:
            self.stale_on_disk(o, 3)
            with self.umbra(o) as u:  # memory empty: the disk's stale records
                for i in range(3):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE))
                    cs = r.header("Cache-Status") or ""
                    self.assertIn("hit", cs)
                    self.assertIn("detail=disk", cs)
                    self.assertRegex(cs, r"ttl=-\d+", "a stale copy says so (RFC 9211)")
                # Answered from disk without waiting for the origin.
                self.assertEqual(o.total(), 3)

    def test_stale_if_error_serves_the_disk_record(self):
        with PathOrigin(max_age=2, cc_extra=", stale-if-error=600") as o:
            self.stale_on_disk(o, 3)
            o.failing = True
            with self.umbra(o) as u:
                for i in range(3):
                    r = get(u, "/o/%d" % i, self.SIZE)
                    self.assertEqual(r.status, 200, "the origin's 503 instead of the stale copy")
                    self.assertEqual(r.body, body_of("/o/%d" % i, self.SIZE))
                    self.assertRegex(r.header("Cache-Status") or "", r"ttl=-\d+")
                self.assertEqual(o.total(), 6)  # each was asked (and failed)
        # Without stale-if-error the failure is the answer.
        with PathOrigin(max_age=2) as o:
            self.stale_on_disk(o, 1)
            o.failing = True
            with self.umbra(o) as u:
                self.assertEqual(get(u, "/o/0", self.SIZE).status, 503)

    def test_a_request_no_cache_goes_past_a_fresh_record(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 1)
                self.wait_written(u, 1)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # memory empty, the record fresh on disk
                r = fetch_req(u.port, "/o/0?size=%d" % self.SIZE,
                              headers=[("Cache-Control", "no-cache")])
                self.assertEqual(r.body, body_of("/o/0", self.SIZE))
                self.assertEqual(o.total(), 2, "the client asked for validation (RFC 9111 5.2.1.4)")

    def test_stale_if_error_when_the_origin_is_gone(self):
        with PathOrigin(max_age=2, cc_extra=", stale-if-error=600") as o:
            self.stale_on_disk(o, 1)
        # The origin is shut: its port refuses.
        with self.umbra(o) as u:
            r = get(u, "/o/0", self.SIZE)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, body_of("/o/0", self.SIZE))

    def test_a_slow_disk_never_delays_a_memory_hit_or_a_miss(self):
        delay = 0.4  # every read and write of the store waits this long first
        with PathOrigin() as o:
            with self.umbra(o) as u:
                self.fill(u, o, 8)
                self.wait_written(u, 8)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o, env={"UMBRA_TEST_DISK_DELAY_MS": str(int(delay * 1000))}) as u:
                t0 = time.monotonic()
                self.assertEqual(get(u, "/o/0", self.SIZE).body, body_of("/o/0", self.SIZE))
                self.assertGreaterEqual(time.monotonic() - t0, delay, "the disk was not slow")
                # Asked again: read once more, and kept in memory this time.
                self.assertEqual(get(u, "/o/0", self.SIZE).body, body_of("/o/0", self.SIZE))
                took = {}

                def disk_hit(i):
                    t = time.monotonic()
                    r = get(u, "/o/%d" % i, self.SIZE)
                    took[i] = (time.monotonic() - t, r.body == body_of("/o/%d" % i, self.SIZE))

                readers = [threading.Thread(target=disk_hit, args=(i,)) for i in range(1, 8)]
                for t in readers:
                    t.start()
                time.sleep(0.05)
                # While seven slow disk reads run: memory hits and misses (whose writes
                # queue for the slow writer) answer at once.
                slowest = 0.0
                for k in range(10):
                    t = time.monotonic()
                    r = get(u, "/o/0", self.SIZE)
                    self.assertEqual(r.body, body_of("/o/0", self.SIZE))
                    self.assertNotIn("detail=disk", r.header("Cache-Status") or "")
                    r = get(u, "/new/%d" % k, 5000)
                    self.assertEqual(r.body, body_of("/new/%d" % k, 5000))
                    slowest = max(slowest, time.monotonic() - t)
                readers_running = any(t.is_alive() for t in readers)
                for t in readers:
                    t.join(30)
                self.assertTrue(readers_running, "the disk reads ended before the checks")
                self.assertLess(slowest, delay / 2, "a memory hit or a miss waited for the disk")
                self.assertEqual(sorted(took), list(range(1, 8)))
                self.assertTrue(all(ok for _, ok in took.values()), took)
                self.assertTrue(all(s >= delay for s, _ in took.values()), took)

    def test_variants_on_disk(self):
        langs = ["fr", "de", None]
        t = "/v/page?size=20000&vary=1"

        def ask(u, lang):
            h = [("X-Lang", lang)] if lang else []
            return fetch_req(u.port, t, headers=h)

        with PathOrigin() as o:
            with self.umbra(o) as u:
                for lang in langs:
                    self.assertEqual(ask(u, lang).body, body_of("/v/page:%s" % lang, 20000))
                self.wait_written(u, 4)  # three variants and their marker
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # memory empty: each variant from the disk
                for lang in langs + ["fr"]:
                    r = ask(u, lang)
                    self.assertEqual(r.body, body_of("/v/page:%s" % lang, 20000), lang)
                self.assertEqual(o.total(), 3, (o.counts, o.conditionals, u.log()[-3000:]))
                r = ask(u, "it")  # a variant never asked: to the origin
                self.assertEqual(r.body, body_of("/v/page:it", 20000))
                self.assertEqual(o.total(), 4)
                self.assertEqual(fetch_req(u.port, t, method="PURGE").status, 200)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # the purge of the URL took every variant
                for lang in langs:
                    self.assertEqual(ask(u, lang).body, body_of("/v/page:%s" % lang, 20000))
                self.assertEqual(o.total(), 7)

    def test_purges_reach_the_disk(self):
        with PathOrigin() as o:
            with self.umbra(o) as u:
                paths = ["/p/url", "/p/pre/a", "/p/tag"]
                for p in paths:
                    r = fetch_req(u.port, p + "?size=5000&tags=t1+t2")
                    self.assertEqual(r.status, 200)
                self.wait_written(u, 3)
                self.assertEqual(fetch_req(u.port, "/p/url?size=5000&tags=t1+t2",
                                           method="PURGE").status, 200)
                r = fetch_req(u.port, "/", method="PURGE", headers=[("Surrogate-Key", "t2")])
                self.assertEqual(r.status, 200)
                self.assertEqual(u.stop(), 0)
            with self.umbra(o) as u:  # memory empty: only the disk could answer
                for p in paths:
                    r = fetch_req(u.port, p + "?size=5000&tags=t1+t2")
                    self.assertEqual(r.body, body_of(p, 5000))
                    self.assertNotIn("hit", r.header("Cache-Status") or "", p)
                self.assertEqual(o.total(), 6)

    def test_check_names_the_file_line_and_directory(self):
        missing = os.path.join(self.dir, "nope")
        with Umbra(config("http://127.0.0.1:9", missing), args=["-t"],
                   expect_fail=True) as u:
            self.assertNotEqual(u.returncode, 0)
            self.assertRegex(u.log(), r"config\.lua:\d+: cache\.disk: %s" % re.escape(missing))
        with Umbra(config("http://127.0.0.1:9", self.dir, size="100000GB"), args=["-t"],
                   expect_fail=True) as u:
            self.assertNotEqual(u.returncode, 0)
            self.assertIn("free", u.log())
        with Umbra(config("http://127.0.0.1:9", self.dir, extra=", bogus = 1"),
                   expect_fail=True) as u:
            self.assertRegex(u.log(), r"config\.lua:\d+: cache\.disk: unknown setting")


if __name__ == "__main__":
    unittest.main()
