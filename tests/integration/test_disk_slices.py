"""Large objects in slices (issue #28, cache.disk.slice), against the real binary.

The origin is umbra-test-origin with ranges=1 (it answers a Range with 206) and posbody=1:
the body is 16-byte records "<v><record number in 14 hex digits>\\n", so any byte served at
the wrong offset, or from another version (v: the ETag's first letter), shows. Its record
file says which Range each request carried, so the tests check which slices the origin was
asked for. The object is 64 MiB in 1 MiB slices (the issue names 1 GB: 64 slices exercise
the same paths and keep CI short).
"""

import hashlib
import os
import random
import re
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import Origin, Umbra, admin_port, fetch_req, sanitizer_build  # noqa: E402

MiB = 1 << 20
SLICE = MiB
SIZE = 64 * MiB


def records(off, n, version="a"):
    """posbody's bytes [off, off + n)."""
    first, last = off // 16, (off + n - 1) // 16
    out = "".join("%s%014x\n" % (version, r) for r in range(first, last + 1)).encode()
    return out[off - first * 16:off - first * 16 + n]


_full = {}


def full_sha(version="a", size=SIZE):
    if (version, size) not in _full:
        h = hashlib.sha256()
        step = 4 * MiB
        for off in range(0, size, step):
            h.update(records(off, min(step, size - off), version))
        _full[(version, size)] = h.hexdigest()
    return _full[(version, size)]


def vm_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s" % field)


class Reply:
    def __init__(self, status, headers, body, sha, length, complete):
        self.status, self.headers, self.body = status, headers, body
        self.sha, self.length, self.complete = sha, length, complete

    def header(self, name):
        return self.headers.get(name.lower())


def get(port, target, headers=(), keep=True, method="GET", timeout=30):
    """One request on a new connection. The body is hashed as it arrives (and kept when
    keep); complete says whether all of Content-Length came before the peer closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        raw = "%s %s HTTP/1.1\r\nHost: umbra.test\r\nConnection: close\r\n" % (method, target)
        for k, v in headers:
            raw += "%s: %s\r\n" % (k, v)
        s.sendall((raw + "\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                raise AssertionError("no head: %r" % buf)
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs.setdefault(k.strip().lower(), v.strip())
        length = int(hdrs.get("content-length", "0")) if method != "HEAD" else 0
        h = hashlib.sha256()
        kept = []
        got = 0
        chunk = rest
        while True:
            if chunk:
                chunk = chunk[:length - got]
                h.update(chunk)
                if keep:
                    kept.append(chunk)
                got += len(chunk)
            if got >= length:
                break
            chunk = s.recv(1 << 20)
            if not chunk:
                break
        return Reply(status, hdrs, b"".join(kept), h.hexdigest(), got, got == length)
    finally:
        s.close()


def config(origin_url, disk_dir, memory="16MB", slice_="1MB", store="256MB"):
    return """
cache = { memory = "%s", disk = { path = "%s", size = "%s", sync = 0.2, slice = "%s" } }
upstreams = { app = { servers = { "%s" } } }
routes = { { path = "/", upstream = "app" } }
""" % (memory, disk_dir, store, slice_, origin_url)


def slice_range(k):
    return "bytes=%d-%d" % (k * SLICE, (k + 1) * SLICE - 1)


class SliceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-slices-")
        self.etag = os.path.join(self.dir, "etag")
        with open(self.etag, "w") as f:
            f.write("a1\n")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def target(self, name, size=SIZE, ranges=True):
        return "/%s?size=%d&posbody=1&cc=max-age%%3D600&etagfile=%s%s" % (
            name, size, self.etag, "&ranges=1" if ranges else "")

    def asked(self, o, name, since=0):
        """The Range values of the origin's requests for /name after the first since."""
        recs = o.records()
        ranges = o.ranges()
        return [ranges[i] for i in range(since, len(recs))
                if recs[i][1].split("?")[0] == "/" + name]

    def test_full_get_streams_slices_and_is_served_again_without_the_origin(self):
        admin = '\nadmin = { listen = "127.0.0.1:0" }\n'
        with Origin() as o, Umbra(config(o.url, self.dir) + admin) as u:
            t = self.target("video")
            r = get(u.port, t, keep=False)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("content-length"), str(SIZE))
            self.assertTrue(r.complete)
            self.assertEqual(r.sha, full_sha())
            self.assertEqual(r.header("etag"), '"a1"')
            self.assertIsNone(r.header("umbra-slice-range"))
            self.assertIsNone(r.header("surrogate-key"))
            # Preconditions are answered from the first slice's validator.
            since = len(o.records())
            r = get(u.port, t, headers=[("If-None-Match", '"a1"')])
            self.assertEqual(r.status, 304)
            r = get(u.port, t, headers=[("Range", "bytes=0-9"), ("If-Range", '"zz"')], keep=False)
            self.assertEqual((r.status, r.length), (200, SIZE), "If-Range that does not match")
            self.assertEqual(len(o.records()), since)
            asked = self.asked(o, "video")
            self.assertEqual(sorted(asked), sorted(slice_range(k) for k in range(SIZE // SLICE)),
                             "the origin is asked for each slice once, and only for slices")
            n = len(o.records())
            r = get(u.port, t, keep=False)
            self.assertEqual((r.status, r.sha), (200, full_sha()))
            self.assertEqual(len(o.records()), n, "the second GET went to the origin")
            m = fetch_req(admin_port(u), "/metrics").body.decode()
            self.assertIn("umbra_slice_origin_ranges_total %d\n" % (SIZE // SLICE), m)
            self.assertRegex(m, r"umbra_slice_fetches_total \d+")
            self.assertIn("umbra_slice_restarts_total 0\n", m)

    def test_random_ranges_of_a_cold_object_fetch_only_the_slices_covered(self):
        rnd = random.Random(28)
        ranges = []
        for i in range(20):
            kind = i % 5
            if kind == 0:  # across a slice border
                b = rnd.randrange(1, SIZE // SLICE) * SLICE
                a, z = b - rnd.randrange(1, 5000), b + rnd.randrange(0, 5000)
                ranges.append(("bytes=%d-%d" % (a, z), a, z))
            elif kind == 1:  # suffix
                n = rnd.randrange(1, 3 * SLICE)
                ranges.append(("bytes=-%d" % n, SIZE - n, SIZE - 1))
            elif kind == 2:  # open
                a = rnd.randrange(SIZE - 2 * SLICE, SIZE)
                ranges.append(("bytes=%d-" % a, a, SIZE - 1))
            elif kind == 3:  # several slices
                a = rnd.randrange(0, SIZE - 4 * SLICE)
                z = a + rnd.randrange(SLICE, 3 * SLICE)
                ranges.append(("bytes=%d-%d" % (a, z), a, z))
            else:  # inside one slice, its last byte past the end of the object
                a = rnd.randrange(0, SIZE)
                ranges.append(("bytes=%d-%d" % (a, a + rnd.randrange(0, 1000)), a,
                               min(SIZE - 1, a + 999)))
        with Origin() as o, Umbra(config(o.url, self.dir)) as u:
            t = self.target("cold")
            fetched = set()
            for value, a, z in ranges:
                since = len(o.records())
                r = get(u.port, t, headers=[("Range", value)])
                z = min(z, SIZE - 1)
                if value.endswith("-") or value.startswith("bytes=-"):
                    pass
                else:
                    z = min(int(value.split("-")[1]), SIZE - 1)
                self.assertEqual(r.status, 206, value)
                self.assertEqual(r.header("content-range"), "bytes %d-%d/%d" % (a, z, SIZE), value)
                self.assertEqual(r.body, records(a, z - a + 1), value)
                covered = set(range(a // SLICE, z // SLICE + 1))
                allowed = covered | ({0} if value.startswith("bytes=-") else set())
                asked = self.asked(o, "cold", since)
                for v in asked:
                    m = re.fullmatch(r"bytes=(\d+)-(\d+)", v)
                    self.assertIsNotNone(m, v)
                    k = int(m.group(1)) // SLICE
                    self.assertEqual(v, slice_range(k))
                    self.assertIn(k, allowed, "%s asked the origin for slice %d" % (value, k))
                    self.assertNotIn(k, fetched, "slice %d asked for twice" % k)
                    fetched.add(k)
                self.assertTrue(covered - {0} <= fetched, value)
            # Past the end: 416 with the length.
            r = get(u.port, t, headers=[("Range", "bytes=%d-" % SIZE)])
            self.assertEqual(r.status, 416)
            self.assertEqual(r.header("content-range"), "bytes */%d" % SIZE)

    def test_an_etag_change_between_slices_never_mixes_versions(self):
        with Origin() as o, Umbra(config(o.url, self.dir)) as u:
            t = self.target("changing")
            r = get(u.port, t, headers=[("Range", "bytes=0-99")])
            self.assertEqual((r.status, r.body), (206, records(0, 100, "a")))
            with open(self.etag, "w") as f:
                f.write("b2\n")
            # Slice 0 is version a (stored), slice 1 comes as b: the answer is cut.
            r = get(u.port, t)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("etag"), '"a1"')
            self.assertFalse(r.complete, "a body of two versions was sent whole")
            self.assertLessEqual(r.length, SLICE)
            self.assertEqual(r.body, records(0, r.length, "a"))
            # The object starts again: every slice of version b.
            since = len(o.records())
            r = get(u.port, t, keep=False)
            self.assertEqual((r.status, r.header("etag")), (200, '"b2"'))
            self.assertTrue(r.complete)
            self.assertEqual(r.sha, full_sha("b"))
            self.assertIn(slice_range(0), self.asked(o, "changing", since))

    def test_a_purge_of_the_url_reaches_the_slices(self):
        with Origin() as o, Umbra(config(o.url, self.dir)) as u:
            t = self.target("purged")
            r = get(u.port, t, headers=[("Range", "bytes=%d-%d" % (5 * SLICE, 5 * SLICE + 9))])
            self.assertEqual(r.status, 206)
            since = len(o.records())
            r = get(u.port, t, headers=[("Range", "bytes=%d-%d" % (5 * SLICE, 5 * SLICE + 9))])
            self.assertEqual(self.asked(o, "purged", since), [], "a stored slice was fetched")
            p = get(u.port, t, method="PURGE")
            self.assertEqual(p.status, 200)
            r = get(u.port, t, headers=[("Range", "bytes=%d-%d" % (5 * SLICE, 5 * SLICE + 9))])
            self.assertEqual(r.body, records(5 * SLICE, 10))
            self.assertEqual(self.asked(o, "purged", since), [slice_range(5)])

    def test_small_objects_and_origins_without_ranges_are_served_whole(self):
        with Origin() as o, Umbra(config(o.url, self.dir)) as u:
            small = self.target("small", size=1000)
            r = get(u.port, small)
            self.assertEqual((r.status, r.body), (200, records(0, 1000)))
            r = get(u.port, small, headers=[("Range", "bytes=10-19")])
            self.assertEqual((r.status, r.body), (206, records(10, 10)))
            self.assertEqual(r.header("content-range"), "bytes 10-19/1000")
            self.assertEqual(self.asked(o, "small"), [slice_range(0)])
            plain = self.target("plain", size=3 * SLICE + 5, ranges=False)
            r = get(u.port, plain, keep=False)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.sha, hashlib.sha256(records(0, 3 * SLICE + 5)).hexdigest())
            # A Range and a precondition on an origin that ignores ranges: answered from
            # the whole object.
            r = get(u.port, plain, headers=[("Range", "bytes=%d-%d" % (2 * SLICE - 5, 2 * SLICE + 4))])
            self.assertEqual((r.status, r.body), (206, records(2 * SLICE - 5, 10)))
            r = get(u.port, plain, headers=[("If-None-Match", '"a1"')])
            self.assertEqual(r.status, 304)
            empty = self.target("empty", size=0)
            r = get(u.port, empty)
            self.assertEqual((r.status, r.body), (200, b""))
            r = get(u.port, self.target("head"), method="HEAD")
            self.assertEqual(r.status, 200)

    @unittest.skipIf(sanitizer_build(), "a sanitizer's quarantine keeps freed memory")
    def test_memory_stays_far_below_the_object(self):
        # What may be held: the memory cache (4 MB), the disk's write queue (a quarter of
        # the 64 MB store, as the records' buffers) and a slice or two on their way:
        # bounded whatever the object's size, here half of a 128 MB object.
        size = 128 * MiB
        with Origin() as o, Umbra(config(o.url, self.dir, memory="4MB", store="64MB")) as u:
            rss0 = vm_kb(u.proc.pid, "VmRSS")
            r = get(u.port, self.target("big", size=size), keep=False)
            self.assertEqual((r.status, r.sha), (200, full_sha(size=size)))
            grown = vm_kb(u.proc.pid, "VmHWM") - rss0
            self.assertLess(grown * 1024, size // 2, "peak RSS grew by %d kB" % grown)

    def test_a_bad_slice_size_is_refused_with_its_line(self):
        for value in ('"1KB"', '"2GB"', '"big"'):
            conf = config("http://127.0.0.1:9", self.dir).replace('slice = "1MB"', "slice = " + value)
            with Umbra(conf, expect_fail=True) as u:
                self.assertNotEqual(u.returncode, 0)
                self.assertRegex(u.log(), r"config\.lua:\d+: cache\.disk\.slice", value)
        conf = config("http://127.0.0.1:9", self.dir).replace('slice = "1MB"', "slice = 0")
        with Umbra(conf, args=["-t"], expect_fail=True) as u:
            self.assertEqual(u.returncode, 0, u.log())

    def test_slices_are_served_from_disk_after_a_restart(self):
        admin = '\nadmin = { listen = "127.0.0.1:0" }\n'
        size = 16 * MiB
        with Origin() as o:
            t = self.target("kept", size=size)
            with Umbra(config(o.url, self.dir) + admin) as u:
                r = get(u.port, t, keep=False)
                self.assertEqual((r.status, r.sha), (200, full_sha(size=size)))
                deadline = time.time() + 20
                while time.time() < deadline:
                    m = fetch_req(admin_port(u), "/metrics").body.decode()
                    n = re.search(r"^umbra_disk_objects (\d+)", m, re.M)
                    if n and int(n.group(1)) >= size // SLICE:
                        break
                    time.sleep(0.1)
                else:
                    self.fail("the slices were not written to disk")
                self.assertEqual(u.stop(), 0)
            since = len(o.records())
            with Umbra(config(o.url, self.dir)) as u:  # memory empty: only the disk has them
                r = get(u.port, t, keep=False)
                self.assertEqual((r.status, r.sha), (200, full_sha(size=size)))
                r = get(u.port, t, headers=[("Range", "bytes=%d-%d" % (3 * SLICE - 7, 3 * SLICE + 7))])
                self.assertEqual((r.status, r.body), (206, records(3 * SLICE - 7, 15)))
            self.assertEqual(self.asked(o, "kept", since), [], "the origin was asked again")

if __name__ == "__main__":
    unittest.main()
