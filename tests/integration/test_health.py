"""Active health checks (issue 29): upstreams.NAME.health = { path, interval, timeout,
fails, passes, status }.

Two origins behind one upstream and two workers. Origin B's /healthz answers 503 while
its --fail-file exists (tests/origin/README.md): the probes take B out and bring it back,
and the clients' requests, sent all along, never see a 5xx. The probes come from one
place for the whole process: B sees one per interval, not one per worker.
"""

import json
import os
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
from umbra_harness import (Client, Origin, Umbra, admin_port, fetch,  # noqa: E402
                           http_get, req, scrape, wait_until)

INTERVAL = 0.2
FAILS = 3
PASSES = 2


def server_up(u, url):
    """umbra_upstream_server_up{...server=url} from the admin's /metrics, or None."""
    for line in scrape(u).splitlines():
        if line.startswith("umbra_upstream_server_up{") and '"%s"' % url in line:
            return int(float(line.split()[-1]))
    return None


def status_up(u, url):
    status, _, body = http_get(admin_port(u), "/status.json")
    assert status == 200, (status, body)
    for s in json.loads(body)["upstreams"]:
        if s["server"] == url:
            return s["up"]
    return None


def healthz(origin):
    return len([r for r in origin.records() if r[1].startswith("/healthz")])


def traffic(origin):
    return len([r for r in origin.records() if r[1].startswith("/load")])


class Load:
    """Clients sending GETs in a loop from two threads (so both workers serve) until
    stopped; keeps every status seen."""

    def __init__(self, port):
        self.port = port
        self.statuses = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(k,)) for k in range(2)]

    def run(self, k):
        n = 0
        while not self.stopping.is_set() and n < 5000:
            n += 1
            try:
                status = fetch(self.port, req("/load%d-%d" % (k, n))).status
            except Exception as e:  # a failed exchange counts as a failure too
                status = repr(e)
            with self.lock:
                self.statuses.append(status)
            time.sleep(0.01)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for t in self.threads:
            t.join(30)
        return False

    def bad(self):
        with self.lock:
            return [s for s in self.statuses if s != 200]

    def count(self):
        with self.lock:
            return len(self.statuses)


def reload(u, body):
    """Rewrites u's config with body (the same listeners) and reloads; waits for the
    outcome."""
    with open(u.config_path) as f:
        head = f.read().split("\n", 2)[:2]
    with open(u.config_path + ".tmp", "w") as f:
        f.write("\n".join(head) + "\n" + body)
    os.rename(u.config_path + ".tmp", u.config_path)
    done = "SIGHUP: configuration reloaded"
    n = u.log().count(done)
    u.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: u.log().count(done) > n, 10), u.log()


class ActiveHealthTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-health-")
        self.fail_b = os.path.join(self.dir, "b-fails")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_failing_server_out_and_back_without_5xx(self):
        with Origin() as a, Origin(args=["--fail-file", self.fail_b]) as b, Umbra("""
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s", "%s" }, retries = 0,
                      health = { path = "/healthz?probe=1", interval = %g, timeout = 1,
                                 fails = %d, passes = %d, status = "200-299" } } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % (a.url, b.url, INTERVAL, FAILS, PASSES), workers=2) as u:
            down = "upstream app: server %s is down (probe: status 503)" % b.url
            back = "upstream app: server %s is up" % b.url
            self.assertTrue(wait_until(lambda: healthz(b) >= 2, timeout=10),
                            "B never probed:\n" + u.log())
            self.assertEqual(server_up(u, b.url), 1)

            with Load(u.port) as load:
                self.assertTrue(wait_until(lambda: traffic(b) >= 5, timeout=10),
                                "B gets no traffic while healthy")
                # B's health check starts failing: FAILS probes later it is out.
                open(self.fail_b, "w").close()
                t0 = time.monotonic()
                self.assertTrue(wait_until(lambda: server_up(u, b.url) == 0, timeout=10),
                                "B never taken out:\n" + u.log())
                took = time.monotonic() - t0
                self.assertLess(took, FAILS * INTERVAL + 3, "B taken out too late")
                self.assertIn(down, u.log())
                self.assertIs(status_up(u, b.url), False)
                self.assertEqual(server_up(u, a.url), 1)
                # Out: no request reaches B (one in flight when it went out may land).
                time.sleep(0.2)
                before = traffic(b)
                served = load.count()
                time.sleep(1.5)
                self.assertGreater(load.count(), served + 10, "the clients stalled")
                self.assertEqual(traffic(b), before, "B got requests while out")

                # B passes again: PASSES probes later it is back and gets traffic.
                os.unlink(self.fail_b)
                self.assertTrue(wait_until(lambda: server_up(u, b.url) == 1, timeout=10),
                                "B never back:\n" + u.log())
                self.assertIs(status_up(u, b.url), True)
                self.assertTrue(wait_until(lambda: traffic(b) >= before + 5, timeout=10),
                                "B back but given no requests")
            self.assertEqual(load.bad(), [], "clients saw failures during the change")
            self.assertGreater(load.count(), 50)

            # Only the changes are logged, once each, from one prober (not one a worker).
            log = u.log()
            self.assertEqual(log.count(down), 1, log)
            self.assertEqual(log.count(back), 1, log)
            self.assertNotIn("server %s is" % a.url, log)

    def test_one_probe_per_interval_whatever_the_workers(self):
        with Origin() as a, Umbra("""
upstreams = { app = { servers = { "%s" },
                      health = { path = "/healthz", interval = %g } } }
routes = { { path = "/", upstream = "app" } }
""" % (a.url, INTERVAL), workers=4) as u:
            self.assertTrue(wait_until(lambda: healthz(a) >= 1, timeout=10), u.log())
            first = healthz(a)
            span = 3.0
            time.sleep(span)
            n = healthz(a) - first
            expected = span / INTERVAL
            # One prober: about span/interval probes; one per worker would be 4 times that.
            self.assertGreaterEqual(n, expected * 0.5, "too few probes: %d" % n)
            self.assertLessEqual(n, expected * 1.5 + 1, "probed %d times in %gs" % (n, span))

    def test_silent_server_does_not_delay_the_others_probes(self):
        # C accepts connections (the kernel's backlog) and never answers: its probes last
        # their whole timeout, while A's still come every interval.
        with socket.socket() as c, Origin() as a:
            c.bind(("127.0.0.1", 0))
            c.listen(64)
            c_url = "http://127.0.0.1:%d" % c.getsockname()[1]
            with Umbra("""
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s", "%s" },
                      health = { path = "/healthz", interval = %g, timeout = 1.5, fails = 1 } } }
routes = { { path = "/", upstream = "app" } }
""" % (a.url, c_url, INTERVAL), workers=1) as u:
                self.assertTrue(wait_until(lambda: server_up(u, c_url) == 0, timeout=10),
                                u.log())
                self.assertIn("server %s is down (probe:" % c_url, u.log())
                first = healthz(a)
                time.sleep(3.0)
                n = healthz(a) - first
                # One after another, A would be probed once per C's timeout (2 in 3 s).
                self.assertGreaterEqual(n, 3.0 / INTERVAL * 0.5, "A probed %d times in 3s" % n)
                self.assertEqual(server_up(u, a.url), 1)

    def test_every_server_out_still_serves(self):
        # Both fail their probes: the panic rule still sends requests to one of them.
        with Origin(args=["--fail-file", self.fail_b]) as a, \
                Origin(args=["--fail-file", self.fail_b]) as b, Umbra("""
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s", "%s" },
                      health = { path = "/healthz", interval = %g, fails = 1 } } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % (a.url, b.url, INTERVAL), workers=2) as u:
            open(self.fail_b, "w").close()
            self.assertTrue(wait_until(lambda: server_up(u, a.url) == 0 and
                                       server_up(u, b.url) == 0, timeout=10), u.log())
            for i in range(4):
                r = fetch(u.port, req("/panic%d" % i))
                self.assertEqual(r.status, 200, "%r\n%s" % (r, u.log()))

    def test_reload_keeps_the_verdict_and_one_prober(self):
        with Origin() as a, Origin(args=["--fail-file", self.fail_b]) as b:
            config = """
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s", "%s" }, %%s } }
routes = { { path = "/", upstream = "app", cache = false } }
""" % (a.url, b.url)
            health = "health = { path = \"/healthz\", interval = %g, fails = 1, passes = 1 }" \
                % INTERVAL
            with Umbra(config % health, workers=2) as u:
                open(self.fail_b, "w").close()
                self.assertTrue(wait_until(lambda: server_up(u, b.url) == 0, timeout=10),
                                u.log())
                # A kept-alive client connection holds the old configuration's runtime
                # (and its prober) past the reload.
                with Client(u.port) as c:
                    c.send(req("/held", close=False))
                    self.assertEqual(c.read_response().status, 200)
                    reload(u, config % health)
                    # Still out: the new prober starts from the running verdict.
                    time.sleep(0.5)
                    self.assertEqual(server_up(u, b.url), 0, u.log())
                    self.assertNotIn("server %s is up" % b.url, u.log())
                    # One prober probes, though the old runtime is alive.
                    first = healthz(b)
                    time.sleep(2.0)
                    n = healthz(b) - first
                    self.assertLessEqual(n, 2.0 / INTERVAL * 1.5 + 1, "%d probes in 2s" % n)
                    self.assertGreaterEqual(n, 2.0 / INTERVAL * 0.5, "%d probes in 2s" % n)
                # health removed: the probes' verdict goes with it, and B serves again.
                reload(u, config % "retries = 1")
                self.assertTrue(wait_until(lambda: server_up(u, b.url) == 1, timeout=5),
                                u.log())
                before = traffic(b)
                for i in range(6):
                    self.assertEqual(fetch(u.port, req("/load-after%d" % i)).status, 200)
                self.assertGreater(traffic(b), before, "B given no requests after reload")

    def test_check_only_probes_nothing(self):
        # `umbra -t` makes every module's state as a start would, but serves nothing: it
        # must not start the prober: no server of the file is ever probed.
        with Origin() as a:
            path = os.path.join(self.dir, "check.lua")
            with open(path, "w") as f:
                f.write("""listen = { "127.0.0.1:9" }
upstreams = { app = { servers = { "%s" },
                      health = { path = "/healthz", interval = 0.05, timeout = 1 } } }
routes = { { path = "/", upstream = "app" } }
""" % a.url)
            for _ in range(5):
                p = subprocess.run([os.environ["UMBRA_BIN"], "-t", path], capture_output=True,
                                   text=True, timeout=30)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("configuration ok", p.stdout + p.stderr)
            time.sleep(0.3)
            self.assertEqual(healthz(a), 0, "umbra -t probed the servers")

    def test_config_error_names_the_line(self):
        cases = [
            ('health = { interval = 2 }', "upstreams.app.health.path: missing"),
            ('health = { path = "healthz" }', "upstreams.app.health.path: bad path"),
            ('health = { path = "/h", fails = 0 }', "upstreams.app.health.fails: expected"),
            ('health = { path = "/h", status = "200-99" }', "upstreams.app.health.status"),
            ('health = { path = "/h", every = 2 }', "upstreams.app.health: unknown key 'every'"),
            ('health = "/h"', "upstreams.app.health: expected a table"),
        ]
        for text, message in cases:
            with self.subTest(text=text), Umbra("""
upstreams = { app = { servers = { "http://127.0.0.1:9" },
  %s } }
routes = { { path = "/", upstream = "app" } }
""" % text, expect_fail=True) as u:
                self.assertNotEqual(u.returncode, 0)
                self.assertIn(message, u.log())
                # The health table is on the file's 5th line (listen, workers, a blank
                # line, then the upstream's two lines).
                self.assertIn("config.lua:5: " + message, u.log())

if __name__ == "__main__":
    unittest.main()
