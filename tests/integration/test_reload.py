"""Configuration reload on SIGHUP, against the real binary: a valid file changes what new
connections get while open ones finish on the old configuration, no request fails during
reloads under a running (bounded) client loop, the cache keeps its contents, listeners
that did not change stay open; an invalid file is reported as FILE:LINE and the old
configuration keeps running."""

import json
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Client, Origin, TlsClient, Umbra, closed_port, free_port, http_get,  # noqa: E402
                           log_lines_with, make_cert, metric, parse_metrics, parse_response,
                           port_is_free, request, sanitizer_report, scrape, tls_context,
                           wait_until)

FILES = {"v1/a.txt": "one\n", "v2/a.txt": "two\n", "v1/big.bin": b"x" * (4 << 20)}
RELOADED = "SIGHUP: configuration reloaded"


def get(port, path="/a.txt", host="r.test"):
    return parse_response(request(port, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close"
                                         "\r\n\r\n" % (path, host)))


class ReloadBase(unittest.TestCase):
    def write_config(self, u, body, listen=None):
        """Rewrites u's config.lua (listen: a Lua list; default: u's first port)."""
        listen = listen or '{ "127.0.0.1:%d" }' % u.port
        with open(u.config_path + ".tmp", "w") as f:
            f.write("listen = %s\nworkers = %d\n%s\n" % (listen, u.workers, body))
        os.rename(u.config_path + ".tmp", u.config_path)

    def reload(self, u, expect_ok=True):
        """SIGHUP, then waits for the outcome's log line; returns that line."""
        needle = RELOADED if expect_ok else "configuration not reloaded"
        n = len(log_lines_with(u, needle))
        u.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: len(log_lines_with(u, needle)) > n, 5), u.log())
        self.assertTrue(u.alive(), u.log())
        return log_lines_with(u, needle)[-1]


class ReloadTest(ReloadBase):
    def test_reload_under_load_changes_behaviour(self):
        route = 'routes = { { path = "/", root = "%s" } }'
        with Umbra(route % "v1", files=FILES, workers=2) as u:
            stop = threading.Event()
            results, errors = [], []
            deadline = time.monotonic() + 20

            def load(keepalive):
                n = 0
                c = None
                while not stop.is_set() and n < 3000 and time.monotonic() < deadline:
                    n += 1
                    try:
                        if keepalive:
                            if c is None:
                                c = Client(u.port)
                            c.send("GET /a.txt HTTP/1.1\r\nHost: r.test\r\n\r\n")
                            r = c.read_response()
                            if n % 20 == 0:  # new connections now and then
                                c.close()
                                c = None
                        else:
                            r = get(u.port)
                        results.append((r.status, r.body))
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(repr(e))
                        c = None
                if c:
                    c.close()

            threads = [threading.Thread(target=load, args=(k,)) for k in (False, False, True)]
            for t in threads:
                t.start()
            try:
                for i in range(6):
                    time.sleep(0.3)
                    root = "v2" if i % 2 == 0 else "v1"
                    self.write_config(u, route % root)
                    self.reload(u)
                    want = b"two\n" if root == "v2" else b"one\n"
                    self.assertEqual(get(u.port).body, want)
                time.sleep(0.3)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)
            self.assertEqual(errors, [])
            self.assertGreater(len(results), 50)
            self.assertEqual({s for s, _ in results}, {200})
            self.assertEqual({b for _, b in results}, {b"one\n", b"two\n"})
            self.assertFalse(log_lines_with(u, "[error]"), u.log())
            # A clean stop (under the sanitizer builds: no report, no leak).
            self.assertEqual(u.stop(signal.SIGTERM, 20), 0, u.log())
            self.assertEqual(sanitizer_report(u.log()), "")

    def test_open_connection_finishes_on_old_config(self):
        route = 'routes = { { path = "/", root = "%s" } }'
        with Umbra(route % "v1", files=FILES) as u:
            with Client(u.port) as old:
                old.send("GET /a.txt HTTP/1.1\r\nHost: r.test\r\n\r\n")
                self.assertEqual(old.read_response().body, b"one\n")
                # A large download in flight on the old connection, too.
                old.send("GET /big.bin HTTP/1.1\r\nHost: r.test\r\n\r\n")
                time.sleep(0.1)
                self.write_config(u, route % "v2")
                self.reload(u)
                self.assertEqual(get(u.port).body, b"two\n")
                r = old.read_response(timeout=10)
                self.assertEqual(len(r.body), 4 << 20)
                old.send("GET /a.txt HTTP/1.1\r\nHost: r.test\r\n\r\n")
                self.assertEqual(old.read_response().body, b"one\n")

    def test_invalid_config_keeps_old(self):
        route = 'routes = { { path = "/", root = "v1" } }\nadmin = { listen = "127.0.0.1:0" }'
        with Umbra(route, files=FILES) as u:
            # A Lua syntax error, then a bad setting: both named by file and line.
            self.write_config(u, route + "\nroutes = {\n")
            line = self.reload(u, expect_ok=False)
            errs = log_lines_with(u, "config.lua:")
            self.assertTrue(any(re.search(r"config\.lua:7: .*near", l) for l in errs), u.log())
            self.assertEqual(get(u.port).body, b"one\n")
            self.write_config(u, route + '\ntimeouts = { idle = -1 }')
            self.reload(u, expect_ok=False)
            self.assertTrue(log_lines_with(u, "config.lua:5: timeouts.idle"), u.log())
            self.write_config(u, route.replace('"v1"', '"missing"'))
            self.reload(u, expect_ok=False)
            self.assertTrue(log_lines_with(u, "config.lua:3: "), u.log())
            self.assertIn("previous one", line)
            self.assertEqual(get(u.port).body, b"one\n")
            self.assertTrue(u.alive())
            m = re.findall(r"status on 127\.0\.0\.1:(\d+)", u.log())
            metrics = http_get(int(m[-1]), "/metrics")[2].decode()
            self.assertIn("umbra_config_reloads_total 3\n", metrics)
            self.assertIn("umbra_config_reload_failures_total 3\n", metrics)
            # And a good one still goes through afterwards.
            self.write_config(u, route.replace('"v1"', '"v2"'))
            self.reload(u)
            self.assertEqual(get(u.port).body, b"two\n")

    def test_admin_listener_moves_with_admin_listen(self):
        """The admin listener is one of the listener thread's: a reload that changes
        admin.listen closes the old socket and serves on the new one; an admin connection
        open across the reload keeps being served."""
        route = 'routes = { { path = "/", root = "v1" } }\n'
        with Umbra(route + 'admin = { listen = "127.0.0.1:0" }', files=FILES) as u:
            old = int(re.findall(r"status on 127\.0\.0\.1:(\d+)", u.log())[-1])
            with Client(old) as kept:
                kept.send("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
                self.assertEqual(kept.read_response().status, 200)
                new = free_port()
                self.write_config(u, route + 'admin = { listen = "127.0.0.1:%d" }' % new)
                self.reload(u)
                self.assertEqual(int(re.findall(r"status on 127\.0\.0\.1:(\d+)", u.log())[-1]),
                                 new)
                self.assertEqual(http_get(new, "/metrics")[0], 200)
                with self.assertRaises(OSError):
                    socket.create_connection(("127.0.0.1", old), timeout=2).close()
                kept.send("GET /status.json HTTP/1.1\r\nHost: a\r\n\r\n")
                self.assertEqual(kept.read_response().status, 200)
            # Without admin, no admin listener.
            self.write_config(u, route)
            self.reload(u)
            self.assertIn("admin: listener closed", u.log())
            with self.assertRaises(OSError):
                socket.create_connection(("127.0.0.1", new), timeout=2).close()

    def test_listeners_added_kept_and_removed(self):
        route = 'routes = { { path = "/", root = "v1" } }'
        with Umbra(route, files=FILES) as u:
            first = u.port
            with Client(first) as kept:
                kept.send("GET /a.txt HTTP/1.1\r\nHost: r.test\r\n\r\n")
                self.assertEqual(kept.read_response().body, b"one\n")
                self.write_config(u, route, listen='{ "127.0.0.1:%d", "127.0.0.1:0" }' % first)
                line = self.reload(u)
                ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", line)]
                self.assertEqual(ports[0], first)
                second = ports[1]
                self.assertEqual(get(second).body, b"one\n")
                self.assertEqual(get(first).body, b"one\n")
                # Now without the first: it closes, the second stays; the open
                # connection that came through the first goes on.
                self.write_config(u, route, listen='{ "127.0.0.1:%d" }' % second)
                self.reload(u)
                self.assertTrue(wait_until(lambda: port_is_free(first), 3))
                self.assertEqual(get(second).body, b"one\n")
                kept.send("GET /a.txt HTTP/1.1\r\nHost: r.test\r\n\r\n")
                self.assertEqual(kept.read_response().body, b"one\n")

    def test_port_zero_written_out_keeps_the_socket(self):
        with Umbra('routes = { { path = "/", root = "v1" } }', files=FILES) as u:
            # Nothing about listen changed: the same socket, no "address in use".
            self.write_config(u, 'routes = { { path = "/", root = "v2" } }')
            line = self.reload(u)
            self.assertIn("127.0.0.1:%d" % u.port, line)
            self.assertEqual(get(u.port).body, b"two\n")

    def test_tls_added_then_certificate_changed(self):
        def certs(d):
            for name in ("one", "two"):
                os.makedirs(os.path.join(d, name))
                make_cert(os.path.join(d, name), cn="localhost", san="DNS:localhost")
                os.rename(os.path.join(d, name, "cert.pem"), os.path.join(d, name + ".crt"))
                os.rename(os.path.join(d, name, "key.pem"), os.path.join(d, name + ".key"))
        route = 'routes = { { path = "/", root = "v1" } }\n'
        tls = 'tls = { { hosts = { "localhost" }, cert = "%s.crt", key = "%s.key" } }\n'
        with Umbra(route, files=FILES, setup=certs, workers=2) as u:
            listen = '{ "127.0.0.1:%d", { "127.0.0.1:0", tls = true } }' % u.port

            def served_cert(port):
                with TlsClient(port, tls_context(), "localhost") as c:
                    self.assertEqual(c.get("/a.txt", host="localhost").body, b"one\n")
                    return c.sock.getpeercert(binary_form=True)

            def cert_der(name):
                with open(u.path(name + ".crt")) as f:
                    return ssl.PEM_cert_to_DER_cert(f.read())

            self.write_config(u, route + tls % ("one", "one"), listen=listen)
            line = self.reload(u)
            tls_port = int(re.findall(r"127\.0\.0\.1:(\d+)", line)[1])
            self.assertEqual(served_cert(tls_port), cert_der("one"))
            with TlsClient(tls_port, tls_context(), "localhost") as old:
                self.assertEqual(old.get("/a.txt", host="localhost").body, b"one\n")
                listen2 = '{ "127.0.0.1:%d", { "127.0.0.1:%d", tls = true } }' % (u.port, tls_port)
                self.write_config(u, route + tls % ("two", "two"), listen=listen2)
                self.reload(u)
                for _ in range(4):  # both workers
                    self.assertEqual(served_cert(tls_port), cert_der("two"))
                self.assertEqual(old.get("/a.txt", host="localhost").body, b"one\n")
            self.assertEqual(get(u.port).body, b"one\n")


class ReloadUpstreamTest(ReloadBase):
    def test_cache_survives_and_upstream_changes(self):
        with Origin() as a, Origin() as b:
            cfg = ('upstreams = { app = { servers = { "%s" } } }\n'
                   'routes = { { path = "/", upstream = "app" } }')
            with Umbra(cfg % a.url, workers=2) as u:
                r = get(u.port, "/k?cc=max-age%3D60")
                self.assertIn("fwd=uri-miss", r.header("Cache-Status"))
                self.write_config(u, cfg % b.url)
                self.reload(u)
                r = get(u.port, "/k?cc=max-age%3D60")
                self.assertIn("hit", r.header("Cache-Status"))  # the cache kept it
                r = get(u.port, "/other?cc=no-store")
                self.assertEqual(r.header("X-Origin-Port"), str(b.port))  # the new upstream
                self.assertEqual(a.count(), 1)
                self.assertEqual(b.count(), 1)

    def test_fill_outlives_its_client_across_reload(self):
        # A fill goes on after its client left; the reload retires the snapshot its origins
        # belong to meanwhile. It must finish on them (and store the object) safely.
        with Origin() as o:
            cfg = ('upstreams = { app = { servers = { "%s" } } }\n'
                   'routes = { { path = "/", upstream = "app" } }\n-- %s')
            with Umbra(cfg % (o.url, "one"), workers=2) as u:
                s = socket.create_connection(("127.0.0.1", u.port), timeout=5)
                s.sendall(b"GET /slow?delay=1200&cc=max-age%3D60 HTTP/1.1\r\nHost: r.test\r\n\r\n")
                self.assertTrue(wait_until(lambda: o.stats()["active"] == 1, 3))
                s.close()
                self.write_config(u, cfg % (o.url, "two"))
                self.reload(u)
                self.assertTrue(wait_until(lambda: o.stats()["active"] == 0, 5))
                time.sleep(0.2)
                r = get(u.port, "/slow?delay=1200&cc=max-age%3D60")
                self.assertIn("hit", r.header("Cache-Status"))
                self.assertEqual(o.count(), 1)
                # The old snapshot is freed once unused (checked every second); nothing breaks.
                time.sleep(1.5)
                self.write_config(u, cfg % (o.url, "three"))
                self.reload(u)
                self.assertIn("hit", get(u.port, "/slow?delay=1200&cc=max-age%3D60")
                              .header("Cache-Status"))
                self.assertEqual(u.stop(signal.SIGTERM, 10), 0, u.log())


class ReloadKeepsTest(ReloadBase):
    """What a reload keeps: the metrics count on from where they were; workers, the
    cache's size and its L2 stay as they are (a warning says that they take a restart)."""

    CONFIG = """
admin = { listen = "127.0.0.1:0" }
access_log = { path = "access.log", format = "json" }
upstreams = { app = { servers = { "%(origin)s" } } }
routes = {
  { path = "/static/", root = "%(root)s" },
  { path = "/", upstream = "app" },
}
"""

    def settled(self, u):
        """u's metrics once no client connection is open (so that every request's counts
        are in)."""
        def read():
            s = parse_metrics(scrape(u))
            return s if metric(s, "umbra_connections_active") == 0 else None
        s = wait_until(read, 5)
        self.assertTrue(s, scrape(u))
        return s

    def test_metrics_survive_a_reload(self):
        with Origin() as o:
            cfg = dict(origin=o.url, root="v1")
            with Umbra(self.CONFIG % cfg, files=FILES) as u:
                for target, want in ([("/static/a.txt", 200)] * 3 + [("/static/none", 404)] +
                                     [("/up?cc=no-store", 200)] * 2):
                    self.assertEqual(get(u.port, target).status, want, target)
                before = self.settled(u)
                srv = dict(upstream="app", server=o.url)
                self.assertEqual(metric(before, "umbra_requests_total", route="/static/",
                                        code="2xx"), 3)
                self.assertEqual(metric(before, "umbra_upstream_requests_total", **srv), 2)
                self.write_config(u, self.CONFIG % dict(cfg, root="v2"))
                self.reload(u)
                self.assertEqual(get(u.port, "/static/a.txt").body, b"two\n")  # the new root
                after = self.settled(u)
                # Every counter goes on from where it was (nothing starts again from 0); the
                # request since the reload is counted on top.
                for key, value in before.items():
                    if key[0].endswith("_total"):
                        self.assertGreaterEqual(after.get(key, -1), value, key)
                self.assertEqual(metric(after, "umbra_requests_total", route="/static/",
                                        code="2xx"), 4)
                self.assertEqual(metric(after, "umbra_requests_total", route="/static/",
                                        code="4xx"), 1)
                self.assertEqual(metric(after, "umbra_requests_total", route="/", code="2xx"), 2)
                self.assertEqual(metric(after, "umbra_connections_total"), 7)
                self.assertGreater(metric(after, "umbra_received_bytes_total"),
                                   metric(before, "umbra_received_bytes_total"))
                self.assertEqual(metric(after, "umbra_upstream_requests_total", **srv), 2)
                self.assertEqual(metric(after, "umbra_upstream_response_seconds_count", **srv), 2)
                self.assertEqual(metric(after, "umbra_config_reloads_total"), 1)
                self.assertEqual(metric(after, "umbra_start_time_seconds"),
                                 metric(before, "umbra_start_time_seconds"))

    def test_workers_and_cache_size_take_a_restart(self):
        with Origin() as o:
            cfg = self.CONFIG % dict(origin=o.url, root="v1")
            with Umbra(cfg + 'cache = { memory = "64MB", max_object = "4MB" }', files=FILES,
                       workers=2) as u:
                self.write_config(u, cfg + 'workers = 3\n'
                                  'cache = { memory = "32MB", max_object = "1MB",\n'
                                  '  l2 = { redis = "redis://127.0.0.1:%d" } }' % closed_port())
                self.reload(u)
                self.assertTrue(log_lines_with(u, "SIGHUP: cache.l2 takes a restart; keeping "
                                                  "the running L2 (none)"), u.log())
                self.assertTrue(log_lines_with(u, "SIGHUP: workers = 3 takes a restart; "
                                                  "keeping 2"), u.log())
                self.assertTrue(log_lines_with(u, "SIGHUP: cache.memory and cache.max_object "
                                                  "take a restart; keeping the running cache"),
                                u.log())
                s = parse_metrics(scrape(u))
                self.assertEqual(metric(s, "umbra_workers"), 2)
                self.assertEqual(metric(s, "umbra_cache_memory_limit_bytes"), 64 << 20)
                # Still two workers: six new connections, dealt out in turn, reach two.
                for i in range(6):
                    self.assertEqual(get(u.port, "/static/a.txt?w%d" % i).status, 200)
                # The running cache still stores what its max_object (4 MB) allows.
                t = "/big?cc=max-age%3D60&size=2000000"
                self.assertEqual(len(get(u.port, t).body), 2000000)
                r = get(u.port, t)
                self.assertIn("hit", r.header("Cache-Status"))
                self.assertEqual(len(r.body), 2000000)
                self.assertEqual([rec[1] for rec in o.records()], [t])

                def workers():
                    try:
                        with open(u.path("access.log")) as f:
                            recs = [json.loads(line) for line in f]
                    except FileNotFoundError:
                        return None
                    ws = {rec["worker"] for rec in recs if "?w" in rec["target"]}
                    return ws if len(recs) >= 8 else None
                ws = wait_until(workers, 5)
                self.assertEqual(len(ws or ()), 2, ws)


if __name__ == "__main__":
    unittest.main()
