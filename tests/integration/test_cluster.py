"""The cluster's peer ring (issue #18) against the real binary: three Umbra nodes on
127.0.0.1 in front of one scripted test origin that records every request.

- a Zipf-like stream of requests spread over the nodes reaches the origin about once per
  URL (each key has one owner; the others fill from it);
- a purge (URL, tag, soft) made on one node reaches the other two over signed HTTP;
- with one node killed, the others answer every request, correctly, and a purge made
  meanwhile waits for it and reaches it once it is back;
- an Umbra-Peer field that is forged, stale or signed with another secret makes an
  ordinary client's request (stripped, never reaching the origin), while a valid one is
  served as a peer's;
- configuration errors name the file and line.
"""

import hashlib
import hmac
import json
import os
import random
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Client, Origin, Umbra, UmbraCluster, admin_port,  # noqa: E402
                           class_context, fetch_req, req, sanitizer_build, wait_until)

SECRET = "integration-secret-0123456789"
HOST = "umbra.test"
# Purges must be seen within 100 ms; sanitizer builds run several times slower.
SLOW = 5 if sanitizer_build() else 1


def node_body(origin_url, cache_extra=""):
    def body(i, ports):
        return """
upstreams = { app = { servers = { "%s" } } }
routes = { { path = "/", upstream = "app" } }
cache = { memory = "64MB", purge = { allow = { "127.0.0.1" } }%s }
admin = { listen = "127.0.0.1:0" }
""" % (origin_url, cache_extra)
    return body


def admin_get(node, path):
    r = fetch_req(admin_port(node), path, host="127.0.0.1")
    return r


def status_json(node):
    return json.loads(admin_get(node, "/status.json").body)


def metric(node, name, labels=None):
    """The sum of the samples of metric name (with labels, a dict, all matching)."""
    total = 0
    for line in admin_get(node, "/metrics").body.decode().splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head != name and not head.startswith(name + "{"):
            continue
        if labels and not all('%s="%s"' % kv in head for kv in labels.items()):
            continue
        total += float(value)
    return total


def sign(method, target, key, ts, secret=SECRET):
    msg = ("%s %s\n" % (method, target)).encode() + key + ("\n%d" % ts).encode()
    sig = hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()
    return "ts=%d, key=%s, sig=%s" % (ts, key.hex(), sig)


def owner_index(ports, target):
    """The index of the node that owns target's cache key (rendezvous, as
    src/cluster/ring.c computes it: FNV-1a and splitmix64's finaliser)."""
    def fnv(b):
        h = 0xcbf29ce484222325
        for c in b:
            h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        return h

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    hk = fnv(("%s %s" % (HOST, target)).encode())
    ids = ["http://127.0.0.1:%d" % p for p in ports]
    return max(range(len(ids)), key=lambda i: mix(hk ^ mix(fnv(ids[i].encode()))))


def only_if_cached(port, target):
    """Whether the node holds target (a fresh copy): only-if-cached gets 504 otherwise."""
    r = fetch_req(port, target, headers=[("Cache-Control", "only-if-cached")])
    return r.status == 200


def origin_count(origin, prefix):
    return sum(1 for m, t, _ in origin.records() if m == "GET" and t.startswith(prefix))


class RingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin(threads=4))
        cls.ring = class_context(cls, UmbraCluster(3, node_body(cls.origin.url)))
        cls.ports = cls.ring.ports

    def test_zipf_stream_reaches_origin_about_once_per_url(self):
        urls = ["/z/%d?cc=max-age%%3D600" % i for i in range(500)]
        rng = random.Random(18)
        weights = [1.0 / (i + 1) for i in range(len(urls))]
        stream = rng.choices(range(len(urls)), weights, k=5000)
        # Every URL at least once, so that the bound below is about all of them.
        stream += list(range(len(urls)))
        rng.shuffle(stream)
        nthreads = 6
        errors = []

        def run(k):
            clients = {}
            try:
                for j, u in enumerate(stream[k::nthreads]):
                    port = self.ports[(j + k) % 3]
                    c = clients.get(port)
                    if c is None:
                        c = clients[port] = Client(port, timeout=30)
                    c.send(req(urls[u], close=False))
                    r = c.read_response(timeout=30)
                    if r.status != 200 or r.body != (urls[u] + "\n").encode():
                        errors.append((urls[u], port, r.status, r.body[:80]))
            except Exception as e:  # reported below, with the thread's request
                errors.append(repr(e))
            finally:
                for c in clients.values():
                    c.close()

        threads = [threading.Thread(target=run, args=(k,)) for k in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors[:5], [])
        n = origin_count(self.origin, "/z/")
        self.assertGreaterEqual(n, 500)
        self.assertLessEqual(n, 1.05 * 500, "the origin saw %d requests for 500 URLs" % n)
        # The nodes filled from each other, and say so.
        fetched = sum(metric(node, "umbra_cluster_peer_fetches_total") for node in self.ring.nodes)
        served = sum(metric(node, "umbra_cluster_peer_requests_served_total")
                     for node in self.ring.nodes)
        self.assertGreater(fetched, 300)
        self.assertGreaterEqual(served, fetched)
        st = status_json(self.ring.nodes[0])
        peers = {p["peer"]: p for p in st["cluster"]["peers"]}
        self.assertEqual(set(peers), {"http://127.0.0.1:%d" % p for p in self.ports})
        self.assertTrue(all(p["up"] for p in peers.values()))
        self.assertTrue(peers["http://127.0.0.1:%d" % self.ports[0]]["self"])

    def warm(self, target):
        """target fetched through every node, so that each holds a copy."""
        for port in self.ports:
            r = fetch_req(port, target)
            self.assertEqual(r.status, 200, r.body)
        for port in self.ports:
            self.assertTrue(only_if_cached(port, target))

    def assertGoneEverywhere(self, target, since):
        for port in self.ports:
            self.assertTrue(wait_until(lambda: not only_if_cached(port, target),
                                       timeout=0.1 * SLOW + 0.05),
                            "node %d still holds %s" % (port, target))
        self.assertLess(time.monotonic() - since, 0.1 * SLOW + 0.2)

    def test_purge_url_reaches_every_node(self):
        target = "/p/url?cc=max-age%3D600"
        self.warm(target)
        t0 = time.monotonic()
        r = fetch_req(self.ports[1], target, method="PURGE")
        self.assertEqual(r.status, 200, r.body)
        self.assertGoneEverywhere(target, t0)

    def test_purge_tag_reaches_every_node(self):
        targets = ["/p/tag%d?cc=max-age%%3D600&header=Surrogate-Key:%%20ring-tag" % i
                   for i in range(3)]
        for t in targets:
            self.warm(t)
        t0 = time.monotonic()
        r = fetch_req(self.ports[2], "/", method="PURGE", headers=[("Surrogate-Key", "ring-tag")])
        self.assertEqual(r.status, 200, r.body)
        for t in targets:
            self.assertGoneEverywhere(t, t0)

    def test_soft_purge_marks_stale_on_every_node(self):
        target = "/p/soft?cc=max-age%3D600"
        self.warm(target)
        t0 = time.monotonic()
        r = fetch_req(self.ports[0], target, method="PURGE", headers=[("Umbra-Purge", "soft")])
        self.assertEqual(r.status, 200, r.body)
        # Stale everywhere (only-if-cached wants a fresh copy), yet kept (max-stale takes it).
        self.assertGoneEverywhere(target, t0)
        for port in self.ports:
            r = fetch_req(port, target, headers=[("Cache-Control", "only-if-cached, max-stale=9999")])
            self.assertEqual((r.status, r.body), (200, (target + "\n").encode()))

    def test_admin_purge_reaches_every_node(self):
        target = "/p/admin?cc=max-age%3D600"
        self.warm(target)
        node = self.ring.nodes[2]
        body = json.dumps({"host": HOST, "path": target}).encode()
        r = fetch_req(admin_port(node), "/purge", method="POST", host="127.0.0.1",
                      headers=[("Content-Type", "application/json")], body=body)
        self.assertEqual(r.status, 200, r.body)
        self.assertGoneEverywhere(target, time.monotonic() - 0.01)

    def test_copies_keep_the_owners_age(self):
        # The origin says the object is 500 s old already, of 600: every node's copy (the
        # owner's, and the others' filled from it) has about 100 s left, not 600.
        target = "/a/aged?cc=max-age%3D600&header=Age:%20500"
        for port in self.ports:
            self.assertEqual(fetch_req(port, target).status, 200)
        for port in self.ports:
            r = fetch_req(port, target)
            cs = r.header("Cache-Status") or ""
            self.assertIn("hit", cs)
            ttl = int(cs.split("ttl=")[1].split(";")[0])
            self.assertGreaterEqual(int(r.header("Age")), 500)
            self.assertLessEqual(ttl, 100, cs)
        self.assertEqual(origin_count(self.origin, "/a/aged"), 1)

    def test_forged_peer_field_is_an_ordinary_client(self):
        port = self.ports[0]
        node = self.ring.nodes[0]
        rejected0 = metric(node, "umbra_cluster_peer_requests_rejected_total")
        served0 = metric(node, "umbra_cluster_peer_requests_served_total")
        now = int(time.time())
        # A stored secret object under another key: a forged key must not reach it.
        fetch_req(port, "/f/secret?cc=max-age%3D600")
        secret_key = ("%s /f/secret?cc=max-age%%3D600" % HOST).encode()
        cases = [
            "ts=%d, key=%s, sig=%s" % (now, secret_key.hex(), "0" * 64),       # forged
            sign("GET", "/echo/f1", secret_key, now - 3600),                     # stale
            sign("GET", "/echo/f1", secret_key, now, secret="another-secret-123456"),
            sign("GET", "/echo/other", secret_key, now),                         # other target
        ]
        for v in cases:
            r = fetch_req(port, "/echo/f1", headers=[("Umbra-Peer", v)])
            self.assertEqual(r.status, 200)
            # The origin's echo of the request head: no Umbra-Peer reached it, and the
            # answer is this request's, not the object the forged key names.
            self.assertNotIn(b"umbra-peer", r.body.lower())
            self.assertIn(b"GET /echo/f1", r.body)
        self.assertEqual(metric(node, "umbra_cluster_peer_requests_rejected_total"),
                         rejected0 + len(cases))
        self.assertEqual(metric(node, "umbra_cluster_peer_requests_served_total"), served0)
        # A valid signature is a peer's request: served here from the key it carries.
        r = fetch_req(port, "/echo/f1", headers=[("Umbra-Peer",
                                                  sign("GET", "/echo/f1", secret_key, now))])
        self.assertEqual(r.body, b"/f/secret?cc=max-age%3D600\n")
        self.assertEqual(metric(node, "umbra_cluster_peer_requests_served_total"), served0 + 1)
        # And a forged PURGE is an ordinary client's PURGE (of its own URL), not a peer's.
        r = fetch_req(port, "/", method="PURGE",
                      headers=[("Umbra-Peer", "ts=%d, key=%s, sig=%s"
                                % (now, b"hard key x".hex(), "1" * 64))])
        self.assertEqual(r.status, 404)  # the cache's "not in the cache" for "/"
        self.assertTrue(only_if_cached(port, "/f/secret?cc=max-age%3D600"))


class DeadPeerTest(unittest.TestCase):
    def test_killed_node_costs_hit_ratio_not_answers(self):
        with Origin(threads=2) as origin, \
                UmbraCluster(3, node_body(origin.url)) as ring:
            ports = ring.ports
            for i in range(30):
                t = "/d/warm%d?cc=max-age%%3D600" % i
                self.assertEqual(fetch_req(ports[i % 3], t).status, 200)
            dead = ring.nodes[2]
            os.kill(dead.proc.pid, signal.SIGKILL)
            dead.proc.wait(10)
            for i in range(90):
                t = "/d/after%d?cc=max-age%%3D600" % i
                r = fetch_req(ports[i % 2], t, timeout=20)
                self.assertEqual((r.status, r.body), (200, (t + "\n").encode()))
            for i in range(30):
                t = "/d/warm%d?cc=max-age%%3D600" % i
                r = fetch_req(ports[i % 2], t, timeout=20)
                self.assertEqual((r.status, r.body), (200, (t + "\n").encode()))
            # The survivors took it out, and say so.
            dead_id = "http://127.0.0.1:%d" % ports[2]
            for node in ring.nodes[:2]:
                peers = {p["peer"]: p for p in status_json(node)["cluster"]["peers"]}
                self.assertFalse(peers[dead_id]["up"])
                self.assertEqual(metric(node, "umbra_cluster_peer_up", {"peer": dead_id}), 0)
            # A purge on a survivor still reaches the other survivor.
            t = "/d/after0?cc=max-age%3D600"
            fetch_req(ports[1], t)
            self.assertTrue(only_if_cached(ports[1], t))
            self.assertEqual(fetch_req(ports[0], t, method="PURGE").status, 200)
            self.assertTrue(wait_until(lambda: not only_if_cached(ports[1], t),
                                       timeout=1.0 * SLOW))
            ring.nodes = ring.nodes[:2]
            dead._cleanup()


class PurgeBacklogTest(unittest.TestCase):
    def test_purge_made_while_a_peer_is_down_reaches_it_when_back(self):
        with Origin(threads=2) as origin, \
                UmbraCluster(3, node_body(origin.url)) as ring:
            ports = ring.ports
            node0 = ring.nodes[0]
            peer2 = "http://127.0.0.1:%d" % ports[2]
            target = "/b/purged?cc=max-age%3D600"
            for port in ports[:2]:
                self.assertEqual(fetch_req(port, target).status, 200)
            # Node 2 goes away; node 0 learns it from a fill of a key node 2 owns.
            dead = ring.nodes[2]
            os.kill(dead.proc.pid, signal.SIGKILL)
            dead.proc.wait(10)
            owned = next(t for t in ("/b/own%d?cc=max-age%%3D600" % i for i in range(500))
                         if owner_index(ports, t) == 2)
            self.assertEqual(fetch_req(ports[0], owned, timeout=20).status, 200)
            self.assertEqual(metric(node0, "umbra_cluster_peer_up", {"peer": peer2}), 0)
            # A purge now: node 1 has it at once; node 2's waits in node 0's backlog.
            self.assertEqual(fetch_req(ports[0], target, method="PURGE").status, 200)
            self.assertTrue(wait_until(lambda: not only_if_cached(ports[1], target),
                                       timeout=1.0 * SLOW))
            self.assertEqual(metric(node0, "umbra_cluster_purges_pending", {"peer": peer2}), 1)
            sent0 = metric(node0, "umbra_cluster_purges_sent_total", {"peer": peer2})
            # Node 2 is back on its port and holds the object before node 0 sees it is back
            # (a node that failed is skipped for 5 s).
            back = Umbra(ring.config(2), workers=ring.workers)
            back.__enter__()
            ring.nodes[2] = back
            dead._cleanup()
            self.assertEqual(fetch_req(ports[2], target).status, 200)
            self.assertTrue(only_if_cached(ports[2], target))
            # The backlog reaches it, and the object is gone there too.
            self.assertTrue(wait_until(lambda: not only_if_cached(ports[2], target),
                                       timeout=10.0 * SLOW), "node 2 never got the purge")
            self.assertTrue(wait_until(lambda: metric(node0, "umbra_cluster_purges_pending",
                                                      {"peer": peer2}) == 0, timeout=2.0 * SLOW))
            self.assertEqual(metric(node0, "umbra_cluster_purges_sent_total", {"peer": peer2}),
                             sent0 + 1)
            peers = {p["peer"]: p for p in status_json(node0)["cluster"]["peers"]}
            self.assertEqual(peers[peer2]["purges_pending"], 0)


class PurgeGuardTest(unittest.TestCase):
    def test_just_purged_key_is_not_refilled_from_an_owner_without_the_purge(self):
        # Node 1 has another secret: it serves node 0's fills as an ordinary client's (from
        # its cache, by URL), and refuses node 0's purges, so it keeps the old copy as a
        # node that has not got a purge yet does. Right after a purge, node 0 must fill
        # from the origin, not from that copy; a moment later, from the owner again.
        # (expose_tags: node 1 answers node 0 as an ordinary client, and so shows it the
        # tags only when clients see them.)
        with Origin() as origin, UmbraCluster(
                2, node_body(origin.url, ", expose_tags = true"),
                secret=[SECRET, "another-secret-9876543210"]) as ring:
            ports = ring.ports
            i = 0
            while owner_index(ports, "/g/%d?cc=max-age%%3D600" % i) != 1:
                i += 1
            t = "/g/%d?cc=max-age%%3D600" % i
            first = fetch_req(ports[1], t).header("X-Origin-Count")
            self.assertEqual(fetch_req(ports[0], t).header("X-Origin-Count"), first)
            self.assertEqual(origin_count(origin, t), 1)
            self.assertEqual(fetch_req(ports[0], t, method="PURGE").status, 200)
            r = fetch_req(ports[0], t)
            self.assertEqual(origin_count(origin, t), 2)
            self.assertNotEqual(r.header("X-Origin-Count"), first)
            # A tag purge: an owner's copy with the tag is not taken either.
            tt = "/g/tag?cc=max-age%3D600&header=Surrogate-Key:%20guard-tag"
            while owner_index(ports, tt) != 1:
                tt += "&x=1"
            first_t = fetch_req(ports[1], tt).header("X-Origin-Count")
            self.assertEqual(fetch_req(ports[0], tt).header("X-Origin-Count"), first_t)
            self.assertEqual(fetch_req(ports[0], "/", method="PURGE",
                                       headers=[("Surrogate-Key", "guard-tag")]).status, 200)
            self.assertNotEqual(fetch_req(ports[0], tt).header("X-Origin-Count"), first_t)
            self.assertEqual(origin_count(origin, "/g/tag"), 2)
            # Past the guard, fills go to the owner (which still has the first copy).
            time.sleep(0.25)
            self.assertEqual(fetch_req(ports[0], t, method="PURGE").status, 200)
            time.sleep(0.25)
            r = fetch_req(ports[0], t)
            self.assertEqual(r.header("X-Origin-Count"), first)
            self.assertEqual(origin_count(origin, t), 2)
            # Node 1 took node 0's three purges as an ordinary client's, and did not send
            # them back (two nodes with different secrets would bounce them for ever).
            time.sleep(0.2)
            self.assertEqual(metric(ring.nodes[0], "umbra_cluster_purge_failures_total"), 3)
            self.assertEqual(metric(ring.nodes[1], "umbra_cluster_purges_sent_total") +
                             metric(ring.nodes[1], "umbra_cluster_purge_failures_total"), 0)


class ReloadTest(unittest.TestCase):
    def test_reload_keeps_the_ring(self):
        with Origin() as origin, UmbraCluster(2, node_body(origin.url)) as ring:
            ports = ring.ports
            node = ring.nodes[0]
            t = "/r/0?cc=max-age%3D600"
            for i in range(40):
                self.assertEqual(fetch_req(ports[i % 2], "/r/%d?cc=max-age%%3D600" % i).status,
                                 200)
            fetched = metric(node, "umbra_cluster_peer_fetches_total")
            node.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(
                lambda: "SIGHUP: configuration reloaded" in node.log(), 5 * SLOW), node.log())
            # The new runtime's ring fills from the peer, and purges still go out.
            for i in range(40, 80):
                self.assertEqual(fetch_req(ports[0], "/r/%d?cc=max-age%%3D600" % i).status, 200)
            self.assertGreater(metric(node, "umbra_cluster_peer_fetches_total"), fetched)
            fetch_req(ports[1], t)
            self.assertTrue(only_if_cached(ports[1], t))
            self.assertEqual(fetch_req(ports[0], t, method="PURGE").status, 200)
            self.assertTrue(wait_until(lambda: not only_if_cached(ports[1], t), 1.0 * SLOW))
            self.assertEqual(origin_count(origin, "/r/"), 80)


class ConfigTest(unittest.TestCase):
    def check(self, cluster, want):
        body = ('routes = { { path = "/", root = "." } }\n'
                '\n'
                'cluster = %s\n' % cluster)
        with Umbra(body, expect_fail=True) as u:
            self.assertNotEqual(u.returncode, 0)
            self.assertRegex(u.log(), r"config\.lua:\d+: " + want)

    def test_self_not_in_peers(self):
        self.check('{ self = "127.0.0.1:9009", peers = { "127.0.0.1:9001", "127.0.0.1:9002" },'
                   ' secret = "0123456789abcdef" }',
                   r"cluster\.self: '127\.0\.0\.1:9009' is not one of cluster\.peers")

    def test_bad_address(self):
        self.check('{ self = "127.0.0.1:9001", peers = { "127.0.0.1:9001", "peer-two:9002" },'
                   ' secret = "0123456789abcdef" }',
                   r"cluster\.peers\.2: bad peer address 'peer-two:9002'")
        self.check('{ self = "127.0.0.1:9001", peers = { "127.0.0.1:9001", "127.0.0.1:99999" },'
                   ' secret = "0123456789abcdef" }',
                   r"cluster\.peers\.2: bad peer address")

    def test_missing_or_short_secret(self):
        self.check('{ self = "127.0.0.1:9001", peers = { "127.0.0.1:9001" } }',
                   r"cluster\.secret: missing")
        self.check('{ self = "127.0.0.1:9001", peers = { "127.0.0.1:9001" }, secret = "short" }',
                   r"cluster\.secret: too short")

    def test_unknown_key(self):
        self.check('{ self = "127.0.0.1:9001", peers = { "127.0.0.1:9001" },'
                   ' secret = "0123456789abcdef", vnodes = 3 }', r"cluster")


class RingWithL2Test(unittest.TestCase):
    """A ring whose nodes also share a Redis second level (README "Second-level cache on
    Redis" and "Cluster"): a non-owner's miss asks Redis, then the owner, and the origin
    is asked once; a purge goes through Redis and to the peers over HTTP both, so it
    reaches every node and the Redis copy, and still reaches the peers with Redis dead."""

    def test_miss_then_purge_with_and_without_redis(self):
        from test_l2 import Redis  # noqa: E402 (starts its own redis-server)

        def body(i, ports):
            return node_body(origin.url)(i, ports) + (
                'cache.l2 = { redis = "redis://127.0.0.1:%d", timeout = 0.2 }\n' % redis.port)

        with Redis() as redis, Origin() as origin, UmbraCluster(2, body) as ring:
            ports = ring.ports
            for node in ring.nodes:
                self.assertTrue(wait_until(
                    lambda: json.loads(admin_get(node, "/status.json").body)["l2"]["state"] == "up",
                    10 * SLOW))
            i = 0
            while owner_index(ports, "/rl/%d?cc=max-age%%3D600" % i) != 1:
                i += 1
            t = "/rl/%d?cc=max-age%%3D600" % i
            # Node 0 misses, Redis misses, the owner fills from the origin once.
            self.assertEqual(fetch_req(ports[0], t).status, 200)
            self.assertEqual(fetch_req(ports[1], t).status, 200)
            self.assertEqual(origin_count(origin, t), 1)
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t)) == 1, 5))
            # A purge on node 0: gone from both memories and from Redis.
            t0 = time.monotonic()
            self.assertEqual(fetch_req(ports[0], t, method="PURGE").status, 200)
            for port in ports:
                self.assertTrue(wait_until(lambda: not only_if_cached(port, t),
                                           timeout=0.1 * SLOW + 0.05), port)
            self.assertLess(time.monotonic() - t0, 0.1 * SLOW + 0.2)
            self.assertTrue(wait_until(lambda: redis.cmd("EXISTS", redis.key(t)) == 0, 5))
            self.assertEqual(fetch_req(ports[0], t).status, 200)
            self.assertEqual(origin_count(origin, t), 2)
            # Redis dies: the peers still get purges over HTTP, and every answer is right.
            u = "/rl/dead?cc=max-age%3D600"
            for port in ports:
                self.assertEqual(fetch_req(port, u).status, 200)
            redis.kill()
            t0 = time.monotonic()
            self.assertEqual(fetch_req(ports[1], u, method="PURGE").status, 200)
            for port in ports:
                self.assertTrue(wait_until(lambda: not only_if_cached(port, u),
                                           timeout=0.1 * SLOW + 0.05), port)
            for port in ports:
                r = fetch_req(port, u)
                self.assertEqual((r.status, r.body), (200, (u + "\n").encode()))


if __name__ == "__main__":
    unittest.main()
