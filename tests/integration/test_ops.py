"""Operations against the real binary: the admin listener (/metrics checked by promtool and
against the requests sent, /status in headless Chromium), the access log in both formats
and across SIGUSR1, worker and connection context in the error log, SIGQUIT.

promtool (Debian's prometheus) and chromium come from third_party/install.sh; a test that
needs one is skipped only when it is not installed.
"""

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Client, Origin, Umbra, admin_port, class_context, closed_port,  # noqa: E402
                           connect, http_get, log_lines_with, make_cert, metric, parse_metrics,
                           parse_response, req, request, sanitizer_report, scrape, tls_connect,
                           tls_context, tls_recv_all, umbra_bin, wait_until)

FILES = {"www/a.txt": "static a\n", "www/b.txt": "static b, a little longer\n"}


def raw_get(port, target, headers=()):
    """One request on its own connection (Connection: close); returns (request bytes,
    response bytes)."""
    lines = ["GET %s HTTP/1.1" % target, "Host: ops.test", "Connection: close"]
    lines += ["%s: %s" % h for h in headers]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return raw, request(port, raw)


def config(origin_url, extra=""):
    return """
admin = { listen = "127.0.0.1:0" }
upstreams = { app = { servers = { "%s" } } }
routes = {
  { path = "/static/", root = "www" },
  { path = "/", upstream = "app" },
}
%s
""" % (origin_url, extra)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())

    def test_counters_match_requests(self):
        with Umbra(config(self.origin.url), files=FILES, workers=2) as u:
            sent = received = 0
            cache_statuses = []
            plan = ([("/static/a.txt", 200)] * 4 + [("/static/b.txt", 200)] +
                    [("/static/missing", 404)] * 2 +
                    [("/m/c?cc=max-age%3D60", 200)] * 3 +
                    [("/m/e?status=503&cc=no-store", 503)] +
                    [("/m/u?cc=no-store", 200)] * 2)
            for target, want in plan:
                raw, resp = raw_get(u.port, target)
                r = parse_response(resp)
                self.assertEqual(r.status, want, target)
                sent += len(raw)
                received += len(resp)
                if target.startswith("/m/"):
                    cache_statuses.append(r.header("Cache-Status"))

            def settled():
                s = parse_metrics(scrape(u))
                return s if metric(s, "umbra_connections_active") == 0 else None
            s = wait_until(settled, 5)
            self.assertTrue(s, scrape(u))
            self.assertEqual(metric(s, "umbra_requests_total", route="/static/", code="2xx"), 5)
            self.assertEqual(metric(s, "umbra_requests_total", route="/static/", code="4xx"), 2)
            self.assertEqual(metric(s, "umbra_requests_total", route="/", code="2xx"), 5)
            self.assertEqual(metric(s, "umbra_requests_total", route="/", code="5xx"), 1)
            self.assertEqual(metric(s, "umbra_requests_total", route="none", code="2xx"), 0)
            self.assertEqual(metric(s, "umbra_connections_total"), len(plan))
            self.assertEqual(metric(s, "umbra_received_bytes_total"), sent)
            self.assertEqual(metric(s, "umbra_sent_bytes_total"), received)
            hits = sum(1 for c in cache_statuses if "; hit" in c)
            misses = sum(1 for c in cache_statuses if "fwd=uri-miss" in c and "collapsed" not in c)
            self.assertEqual(hits, 2, cache_statuses)
            self.assertEqual(metric(s, "umbra_cache_hits_total"), hits)
            self.assertEqual(metric(s, "umbra_cache_misses_total"), misses)
            self.assertGreaterEqual(metric(s, "umbra_cache_objects"), 1)
            self.assertGreater(metric(s, "umbra_cache_memory_bytes"), 0)
            self.assertEqual(metric(s, "umbra_cache_memory_limit_bytes"), 256 << 20)
            srv = dict(upstream="app", server=self.origin.url)
            reached = len([r for r in self.origin.records() if r[1].startswith("/m/")])
            self.assertEqual(metric(s, "umbra_upstream_requests_total", **srv), reached)
            self.assertEqual(metric(s, "umbra_upstream_errors_total", **srv), 0)
            self.assertEqual(metric(s, "umbra_upstream_response_seconds_count", **srv), reached)
            self.assertEqual(metric(s, "umbra_upstream_response_seconds_bucket", le="+Inf", **srv),
                             reached)
            self.assertEqual(metric(s, "umbra_upstream_server_up", **srv), 1)
            self.assertEqual(metric(s, "umbra_workers"), 2)
            self.assertEqual(metric(s, "umbra_lua_errors_total"), 0)
            self.assertEqual(metric(s, "umbra_config_reloads_total"), 0)
            self.assertEqual(u.stop(signal.SIGTERM, 20), 0, u.log())
            self.assertEqual(sanitizer_report(u.log()), "")

    def test_sent_bytes_at_every_output_buffer_level(self):
        # Answers of many sizes on one keep-alive connection, each read to its end before
        # the next request, bring the output buffer to many fill levels: the bytes counted
        # as sent must be the bytes the client got, to the byte.
        with Umbra(config(self.origin.url), files=FILES) as u:
            received = 0
            with Client(u.port) as c:
                for i, size in enumerate(range(3000, 70000, 997)):
                    c.send(req("/m/fill%d?cc=no-store&size=%d" % (i, size), close=False))
                    r = c.read_response()
                    self.assertEqual((r.status, len(r.body)), (200, size))
                    received += len(r.raw_head) + len(r.body)
            self.assertTrue(wait_until(lambda: metric(parse_metrics(scrape(u)),
                                                      "umbra_sent_bytes_total") == received, 5),
                            "sent %r, received %d" % (metric(parse_metrics(scrape(u)),
                                                             "umbra_sent_bytes_total"), received))

    def test_promtool_accepts_the_output(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool is not installed (third_party/install.sh installs prometheus)")
        with Umbra(config(self.origin.url), files=FILES, workers=2) as u:
            http_get(u.port, "/static/a.txt")
            http_get(u.port, "/m/p?cc=max-age%3D60")
            http_get(u.port, "/m/p?cc=max-age%3D60")
            text = scrape(u)
            p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout.decode() + "\n" + text)
            self.assertEqual(p.stdout.decode().strip(), "")

    def test_upstream_errors_and_health(self):
        # Two servers: the only server of an upstream is never taken out (issue #26).
        dead = ["http://127.0.0.1:%d" % closed_port() for _ in range(2)]
        cfg = """
admin = { listen = "127.0.0.1:0" }
upstreams = { gone = { servers = { "%s", "%s" }, retries = 0, max_fails = 2, fail_timeout = 30 } }
routes = { { path = "/", upstream = "gone", cache = false } }
""" % tuple(dead)
        with Umbra(cfg) as u:
            for _ in range(4):
                self.assertEqual(http_get(u.port, "/x")[0], 502)
            s = parse_metrics(scrape(u))
            for d in dead:
                srv = dict(upstream="gone", server=d)
                self.assertEqual(metric(s, "umbra_upstream_requests_total", **srv), 2)
                self.assertEqual(metric(s, "umbra_upstream_errors_total", **srv), 2)
                self.assertEqual(metric(s, "umbra_upstream_server_up", **srv), 0)
            self.assertEqual(metric(s, "umbra_requests_total", route="/", code="5xx"), 4)
            # Error log lines say which worker (and connection, where one is at work). The
            # harness reads the log in a thread of its own: wait for the line to arrive.
            self.assertTrue(wait_until(lambda: log_lines_with(u, "upstream gone: server"), 5),
                            u.log())
            lines = log_lines_with(u, "upstream gone: server")
            for line in lines:
                self.assertRegex(line, r"\[(error|warn)\] \[w\d+ c\d+\] upstream gone")

    def test_tls_handshakes(self):
        def certs(d):
            make_cert(d, cn="localhost", san="DNS:localhost")
        cfg = """
listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }
admin = { listen = "127.0.0.1:0" }
tls = { { hosts = { "localhost" }, cert = "cert.pem", key = "key.pem" } }
routes = { { path = "/", root = "www" } }
"""
        with Umbra(cfg, files=FILES, setup=certs) as u:
            tls_port = u.ports[1]
            for _ in range(2):
                with tls_connect(tls_port, tls_context(), "localhost") as s:
                    s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    data, how = tls_recv_all(s)
                    self.assertIn(how, ("close_notify", "eof"), data)
                    self.assertEqual(parse_response(data).body, b"static a\n")
            request(tls_port, b"\x16\x03\x01\x00\x05hello")  # not a ClientHello
            s = parse_metrics(scrape(u))
            self.assertEqual(metric(s, "umbra_tls_handshakes_total"), 2)
            self.assertTrue(wait_until(lambda: metric(parse_metrics(scrape(u)),
                                                      "umbra_tls_handshake_failures_total") == 1, 3))
            self.assertEqual(metric(s, "umbra_requests_total", route="/", code="2xx"), 2)

    def test_admin_refuses_other_clients(self):
        cfg = config(self.origin.url).replace(
            'admin = { listen = "127.0.0.1:0" }',
            'admin = { listen = "127.0.0.1:0", allow = { "10.9.8.7", "fd00::/8" } }')
        with Umbra(cfg, files=FILES) as u:
            for path in ("/metrics", "/status", "/status.json"):
                status, _, body = http_get(admin_port(u), path)
                self.assertEqual(status, 403, path)
                self.assertNotIn(b"umbra_", body)

    def test_admin_paths(self):
        with Umbra(config(self.origin.url), files=FILES) as u:
            port = admin_port(u)
            self.assertEqual(http_get(port, "/nope")[0], 404)
            self.assertEqual(http_get(port, "/metrics", method="POST", body=b"")[0], 405)
            status, headers, body = http_get(port, "/status.json")
            self.assertEqual(status, 200)
            self.assertEqual(headers["Content-Type"], "application/json")
            js = json.loads(body)
            self.assertEqual(len(js["workers"]), u.workers)
            self.assertTrue(js["cache"]["enabled"])
            status, headers, body = http_get(port, "/status")
            self.assertEqual(status, 200)
            self.assertTrue(headers["Content-Type"].startswith("text/html"))
            # Self-contained: nothing loaded from elsewhere.
            self.assertNotRegex(body.decode(), r"(src|href)=['\"]?(https?:)?//")
            self.assertNotIn(b"<link", body)
            # The admin port is not the site, and the site has no /metrics.
            self.assertNotIn(b"umbra_requests_total", http_get(u.port, "/metrics")[2])

    def test_admin_malformed_requests_get_the_strict_parsers_errors(self):
        """The admin listener's requests go through the strict HTTP/1.1 parser: what any
        listener refuses, it refuses the same way."""
        with Umbra(config(self.origin.url), files=FILES) as u:
            port = admin_port(u)

            def status_of(raw):
                return parse_response(request(port, raw)).status
            # A bad request line (a control byte in the target), a field line without a colon, no Host.
            self.assertEqual(status_of(b"GET /met\x01rics HTTP/1.1\r\nHost: a\r\n\r\n"), 400)
            self.assertEqual(status_of(b"GET /metrics HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n"),
                             400)
            self.assertEqual(status_of(b"GET /metrics HTTP/1.1\r\n\r\n"), 400)
            # A head larger than the admin's buffer.
            self.assertEqual(status_of(b"GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " +
                                       b"x" * 6000 + b"\r\n\r\n"), 431)
            # What the parser accepts still answers.
            self.assertEqual(status_of(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"), 200)

    def test_config_errors_name_the_line(self):
        cases = [
            ('admin = { listen = "127.0.0.1" }\n', 4, "admin.listen"),
            ('admin = { listen = "127.0.0.1:0", allow = { "10.0.0.1/8" } }\n', 4, "admin.allow.1"),
            ('admin = { port = 9 }\n', 4, "unknown key 'port'"),
            ('access_log = { path = "nodir/access.log" }\n', 4, "access_log.path"),
            ('access_log = { path = "a.log", format = "xml" }\n', 4, "access_log.format"),
            ('access_log = "yes"\n', 4, "access_log"),
        ]
        for body, line, needle in cases:
            with Umbra('routes = { { path = "/", root = "www" } }\n' + body, files=FILES,
                       expect_fail=True) as u:
                self.assertEqual(u.returncode, 1, body)
                self.assertIn("config.lua:%d: " % line, u.log(), body)
                self.assertIn(needle, u.log(), body)


class AccessLogTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())

    def lines(self, u, name="logs/access.log", n=1, timeout=4):
        """The lines of the log file once it has at least n (flushed within a second)."""
        def read():
            try:
                with open(u.path(name)) as f:
                    got = f.read().splitlines()
            except FileNotFoundError:
                return None
            return got if len(got) >= n else None
        got = wait_until(read, timeout, 0.05)
        self.assertTrue(got, "fewer than %d lines in %s" % (n, name))
        return got

    def test_combined(self):
        cfg = config(self.origin.url, 'access_log = { path = "logs/access.log" }')
        files = dict(FILES, **{"logs/.keep": ""})
        with Umbra(cfg, files=files, workers=2) as u:
            hdrs = [("User-Agent", "ops-test/1.0"), ("Referer", "http://ref.test/\"q\"")]
            for _ in range(2):
                raw_get(u.port, "/log/c?cc=max-age%3D60&delay=30", hdrs)
            raw_get(u.port, "/static/a.txt")
            # Buffered per worker, written within a second (lines() waits up to 4 s).
            lines = self.lines(u, n=3)
        rx = re.compile(r'^127\.0\.0\.1 - - \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000\] '
                        r'"([^"]*)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" "([^"]*)" (\S+)$')
        parsed = [rx.match(l) for l in lines]
        self.assertTrue(all(parsed), lines)
        by_target = {}
        for m in parsed:
            by_target.setdefault(m.group(1), []).append(m)
        # Workers flush their own buffers: lines of two workers need not be in order.
        miss, hit = sorted(by_target["GET /log/c?cc=max-age%3D60&delay=30 HTTP/1.1"],
                           key=lambda m: "hit" in m.group(6))
        self.assertEqual(miss.group(2), "200")
        self.assertEqual(miss.group(4), r"http://ref.test/\x22q\x22")
        self.assertEqual(miss.group(5), "ops-test/1.0")
        self.assertIn("fwd=uri-miss", miss.group(6))
        self.assertGreaterEqual(float(miss.group(7)), 0.025)  # the origin's 30 ms
        self.assertIn("hit", hit.group(6))
        self.assertEqual(hit.group(7), "-")
        static, = by_target["GET /static/a.txt HTTP/1.1"]
        self.assertEqual(static.group(3), str(len(FILES["www/a.txt"])))
        self.assertEqual(static.group(4), "-")
        self.assertEqual(static.group(6), "-")
        self.assertEqual(static.group(7), "-")

    def test_json_lines_and_reopen(self):
        cfg = config(self.origin.url,
                     'access_log = { path = "logs/access.log", format = "json" }')
        files = dict(FILES, **{"logs/.keep": ""})
        with Umbra(cfg, files=files) as u:
            raw_get(u.port, "/j/one?cc=max-age%3D60", [("User-Agent", "caf\xe9 \"x\"")])
            raw_get(u.port, "/static/missing")
            before = self.lines(u, n=2)
            # Workers flush their own buffers: with two, the lines may come in either order.
            recs = sorted((json.loads(l) for l in before),
                          key=lambda r: r["target"] != "/j/one?cc=max-age%3D60")
            self.assertEqual(recs[0]["method"], "GET")
            self.assertEqual(recs[0]["target"], "/j/one?cc=max-age%3D60")
            self.assertEqual(recs[1]["target"], "/static/missing")
            self.assertEqual(recs[0]["protocol"], "HTTP/1.1")
            self.assertEqual(recs[0]["status"], 200)
            # Bytes past ASCII are written as code points U+0080..U+00FF (valid JSON
            # whatever a client sends): UTF-8 "\xc3\xa9" comes back as two of them.
            self.assertEqual(recs[0]["user_agent"], "caf\xc3\xa9 \"x\"")
            self.assertIn("fwd=uri-miss", recs[0]["cache_status"])
            self.assertIsInstance(recs[0]["upstream_time"], float)
            self.assertEqual(recs[0]["host"], "ops.test")
            self.assertEqual(recs[1]["status"], 404)
            self.assertIsNone(recs[1]["upstream_time"])
            self.assertEqual(recs[1]["cache_status"], "")
            # logrotate: rename, then SIGUSR1; new lines go to a new file of the old name.
            os.rename(u.path("logs/access.log"), u.path("logs/access.log.1"))
            u.proc.send_signal(signal.SIGUSR1)
            self.assertTrue(wait_until(lambda: log_lines_with(u, "SIGUSR1: log files reopened"), 5))
            raw_get(u.port, "/static/a.txt")
            after = self.lines(u, n=1)
            self.assertEqual(len(after), 1)
            self.assertEqual(json.loads(after[0])["target"], "/static/a.txt")
            with open(u.path("logs/access.log.1")) as f:
                self.assertEqual(f.read().splitlines(), before)

    def test_stderr_and_bad_request(self):
        cfg = config(self.origin.url, 'access_log = { path = "stderr" }')
        with Umbra(cfg, files=FILES) as u:
            raw_get(u.port, "/static/b.txt")
            request(u.port, b"BLAH\r\n\r\n")
            self.assertTrue(wait_until(lambda: len(log_lines_with(u, '" 400 ')) == 1, 4), u.log())
            self.assertTrue(log_lines_with(u, '"GET /static/b.txt HTTP/1.1" 200 '), u.log())
            self.assertTrue(log_lines_with(u, '"-" 400 '), u.log())

    def test_off_by_default(self):
        with Umbra(config(self.origin.url), files=FILES) as u:
            raw_get(u.port, "/static/a.txt")
            time.sleep(1.3)
            self.assertFalse(log_lines_with(u, "GET /static/a.txt"), u.log())


class StatusPageTest(unittest.TestCase):
    """The status page in a real browser: Chromium loads it from a running Umbra, runs its
    script (which fetches /status.json), and the rendered DOM holds the live numbers."""

    def chromium(self):
        for name in ("chromium", "chromium-browser", "google-chrome"):
            path = shutil.which(name)
            if path:
                return path
        self.skipTest("chromium is not installed (third_party/install.sh installs it)")

    def run_chromium(self, args, url, profile):
        cmd = [self.chromium(), "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + profile,
               "--virtual-time-budget=4000"] + args + [url]
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=90, env=dict(os.environ, HOME=profile))

    def test_status_page_renders_live_numbers(self):
        with Origin() as o, Umbra(config(o.url), files=FILES, workers=2) as u, \
                tempfile.TemporaryDirectory(prefix="umbra-chromium-") as profile:
            # Spread over a few seconds of one-second samples: the charts have points.
            for i in range(7):
                http_get(u.port, "/static/a.txt")
                if i < 3:
                    http_get(u.port, "/s/x?cc=max-age%3D60")
                time.sleep(0.6)
            time.sleep(1.2)
            url = "http://127.0.0.1:%d/status" % admin_port(u)
            p = self.run_chromium(["--dump-dom"], url, profile)
            dom = p.stdout.decode("utf-8", "replace")
            self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
            self.assertRegex(dom, r'<body data-loaded="[1-9]')
            self.assertRegex(dom, r'<tr data-route="/static/"><td>/static/</td><td>0</td>'
                                  r'<td>7</td><td>0</td><td>0</td><td>0</td>'
                                  r'<td class="total">7</td></tr>')
            self.assertRegex(dom, r'<tr data-route="/"><td>/</td>.*?<td class="total">3</td>')
            self.assertRegex(dom, r'<tr data-server="%s"><td>app</td><td>%s</td>'
                                  r'<td class="up">up</td><td class="requests">1</td>'
                                  r'<td class="errors">0</td>' % (re.escape(o.url),
                                                                   re.escape(o.url)))
            self.assertIn('<b id="requests">10</b>', dom)
            self.assertIn('<b id="hits">2</b>', dom)
            self.assertIn('<b id="hit-ratio">66.7%</b>', dom)
            self.assertIn('<b id="mem-cap">256.0 MiB</b>', dom)
            self.assertIn('<b id="workers-count">2</b>', dom)
            self.assertEqual(len(re.findall(r"<td>worker \d</td>", dom)), 2)
            self.assertRegex(dom, r'<svg id="chart-rps"[^>]*data-points="([2-9]|\d\d+)"')
            pts = re.search(r'<svg id="chart-rps".*?<polyline points="([^"]*)"', dom).group(1)
            ys = [float(p.split(",")[1]) for p in pts.split()]
            self.assertGreaterEqual(len(ys), 2)
            self.assertLess(min(ys), 110, pts)  # some second had requests: above the baseline
            self.assertRegex(dom, r'<svg id="chart-hit"[^>]*data-points="\d+"')
            self.assertIn('<span id="error"></span>', dom)
            # A screenshot, kept as an artifact of the test run.
            outdir = os.path.join(os.path.dirname(os.path.abspath(umbra_bin())), "test-artifacts")
            os.makedirs(outdir, exist_ok=True)
            shot = os.path.join(outdir, "status-page.png")
            if os.path.exists(shot):
                os.unlink(shot)
            p = self.run_chromium(["--screenshot=" + shot, "--window-size=1280,1100",
                                   "--hide-scrollbars"], url, profile)
            self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
            with open(shot, "rb") as f:
                png = f.read()
            self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
            self.assertGreater(len(png), 20000)


class AdminListenerTest(unittest.TestCase):
    """The admin listener is an ordinary listener (issue #27): its connections are served by
    the workers through the strict HTTP/1.1 parser and the exchange, so keep-alive and
    pipelining work there, its refusals are the other listeners' byte for byte, a chunked
    body is read, and a large POST /purge (on the admin thread) holds up no worker."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())

    def test_keep_alive_and_pipelining(self):
        with Umbra(config(self.origin.url), files=FILES, workers=1) as u:
            with Client(admin_port(u)) as c:
                for path in ("/metrics", "/status.json", "/nope", "/status"):
                    c.send("GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % path)
                    r = c.read_response()
                    self.assertEqual(r.status, 404 if path == "/nope" else 200, path)
                    self.assertEqual(r.header("Cache-Control"), "no-store", path)
                    self.assertIsNone(r.header("Connection"), path)
                # Three at once, answered in order on the same connection.
                c.send(b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
                       b"GET /status.json HTTP/1.1\r\nHost: a\r\n\r\n"
                       b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
                r = c.read_response(head=True)
                self.assertEqual(r.status, 200)
                self.assertGreater(int(r.header("Content-Length")), 1000)
                self.assertEqual(json.loads(c.read_response().body)["workers"][0]["id"], 0)
                self.assertEqual(c.read_response().status, 405)
            # The admin's requests are not the site's: nothing counted, nothing logged.
            s = parse_metrics(scrape(u))
            self.assertEqual(metric(s, "umbra_connections_total"), 0)
            self.assertEqual(metric(s, "umbra_received_bytes_total"), 0)

    def test_http2_prior_knowledge(self):
        curl = shutil.which("curl")
        if curl is None:
            self.skipTest("curl is not installed")
        with Umbra(config(self.origin.url), files=FILES) as u:
            port = admin_port(u)
            for args, want in (([], "2 200"), (["-d", "x=1"], "2 405"),
                               (["-d", "tag=t"], "2 200")):
                path = "/purge" if "tag=" in "".join(args) else "/metrics"
                p = subprocess.run([curl, "-s", "--http2-prior-knowledge", "-o", "/dev/null",
                                    "-w", "%{http_version} %{http_code}"] + args +
                                   ["http://127.0.0.1:%d%s" % (port, path)],
                                   stdout=subprocess.PIPE, timeout=30)
                self.assertEqual(p.stdout.decode(), want, (path, args))

    def test_refusals_are_the_other_listeners(self):
        bad = [b"GET /metrics HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n",  # obs-fold
               b"GET /metrics HTTP/1.1\nHost: a\n\n",                               # bare LF
               b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",             # two Hosts
               b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"]                     # smuggling
        with Umbra(config(self.origin.url), files=FILES) as u:
            for raw in bad:
                with self.subTest(raw=raw):
                    mine = parse_response(request(admin_port(u), raw))
                    site = parse_response(request(u.port, raw))
                    self.assertEqual(mine.status, 400)
                    self.assertEqual((mine.status, mine.header("Content-Type"), mine.body,
                                      mine.header("Connection")),
                                     (site.status, site.header("Content-Type"), site.body,
                                      site.header("Connection")))

    def test_large_purge_with_a_chunked_body_while_the_one_worker_serves(self):
        from test_cdn import pipeline_fill  # noqa: E402
        n = 40000
        with Umbra(config(self.origin.url), files=FILES, workers=1) as u:
            targets = ["/big/%d?cc=max-age%%3D600&body=x&header=Surrogate-Key:bigtag" % i
                       for i in range(n)]
            self.assertEqual(set(pipeline_fill(u.port, targets)), {200})
            other = "/big/other?cc=max-age%3D600"
            http_get(u.port, other)
            # A client that leaves while its purge runs: the purge is done, its answer
            # dropped (a soft one: the objects stay, stale, for the purge below).
            with connect(admin_port(u)) as s:
                s.sendall(req("/purge", "POST", body=b'{"tags": ["bigtag"], "soft": true}',
                              headers=[("Content-Type", "application/json")]))
            # The purge's body comes in chunks, on a keep-alive connection.
            body = b'{"tags": ["bigtag"]}'
            with Client(admin_port(u)) as c:
                c.send(b"POST /purge HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                       % (len(body), body))
                # The only worker answers the site meanwhile: the purge runs elsewhere.
                t0 = time.monotonic()
                status, headers, _ = http_get(u.port, other)
                t1 = time.monotonic()
                # Answered before the purge was: a purge on the worker would have come first.
                early = select.select([c.sock], [], [], 0)[0]
                self.assertEqual(status, 200)
                self.assertIn("hit", headers.get("Cache-Status", ""))
                r = c.read_response(timeout=60)
                t2 = time.monotonic()
                if os.environ.get("UMBRA_TEST_VERBOSE"):
                    print("\nhit %.3f s, purge answered after %.3f s" % (t1 - t0, t2 - t0))
                self.assertEqual(r.status, 200, r.body)
                self.assertEqual(json.loads(r.body), {"purged": n, "soft": False})
                self.assertFalse(early, "the purge held up the only worker (%.3f s)" % (t1 - t0))
                c.send("GET /status.json HTTP/1.1\r\nHost: a\r\n\r\n")
                self.assertEqual(c.read_response().status, 200)
            status, headers, _ = http_get(u.port, targets[7])
            self.assertNotIn("hit", headers.get("Cache-Status", ""))
            self.assertTrue(u.alive())


class PidFileTest(unittest.TestCase):
    """pid = "FILE" (issue #26): logrotate's USR1 reaches Umbra however it was started."""

    ROUTES = 'routes = { { path = "/", root = "www" } }\n'

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-pid-")
        self.pidfile = os.path.join(self.dir, "umbra.pid")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def cfg(self, extra=""):
        return self.ROUTES + 'pid = "%s"\n' % self.pidfile + extra

    def read_pid(self):
        with open(self.pidfile) as f:
            return f.read()

    def test_written_at_start_kept_across_reload_removed_at_exit(self):
        with Umbra(self.cfg(), files=FILES) as u:
            self.assertEqual(self.read_pid(), "%d\n" % u.proc.pid)
            # A reload keeps the file it started with and says a change takes a restart.
            other = os.path.join(self.dir, "other.pid")
            with open(u.config_path, "a") as f:
                f.write('pid = "%s"\n' % other)
            u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: "takes a restart; keeping %s" % self.pidfile
                                       in u.log(), 5), u.log())
            self.assertEqual(self.read_pid(), "%d\n" % u.proc.pid)
            self.assertFalse(os.path.exists(other))
            self.assertEqual(u.stop(signal.SIGTERM, 10), 0)
            self.assertFalse(os.path.exists(self.pidfile), "the pid file outlived a clean exit")

    def test_second_instance_refused(self):
        with Umbra(self.cfg(), files=FILES) as first:
            with Umbra(self.cfg(), files=FILES, expect_fail=True) as second:
                self.assertNotEqual(second.returncode, 0)
                self.assertIn("%s is held by a running Umbra, PID %d" % (self.pidfile,
                                                                        first.proc.pid),
                              second.log())
            # The first keeps its file and serves on.
            self.assertTrue(first.alive())
            self.assertEqual(self.read_pid(), "%d\n" % first.proc.pid)
            self.assertEqual(http_get(first.port, "/a.txt")[0], 200)

    def test_stale_file_taken_over(self):
        # The PID of a process that has exited, as a crash or kill -9 leaves it.
        dead = subprocess.Popen(["true"])
        dead.wait()
        with open(self.pidfile, "w") as f:
            f.write("%d\n" % dead.pid)
        with Umbra(self.cfg(), files=FILES) as u:
            self.assertEqual(self.read_pid(), "%d\n" % u.proc.pid)
            self.assertIn("held PID %d, which no running Umbra holds: taking it over"
                          % dead.pid, u.log())
        # Nor does a live process that is not an Umbra holding it (a PID reused) stop it.
        with open(self.pidfile, "w") as f:
            f.write("%d\n" % os.getpid())
        with Umbra(self.cfg(), files=FILES) as u:
            self.assertEqual(self.read_pid(), "%d\n" % u.proc.pid)

    def test_usr1_sent_through_the_pid_file_reopens_logs(self):
        extra = 'access_log = { path = "logs/access.log" }\n'
        with Umbra(self.cfg(extra), files=dict(FILES, **{"logs/.keep": ""})) as u:
            self.assertEqual(http_get(u.port, "/a.txt")[0], 200)
            self.assertTrue(wait_until(lambda: os.path.getsize(u.path("logs/access.log")) > 0,
                                       5))
            os.rename(u.path("logs/access.log"), u.path("logs/access.log.1"))
            # What the package's logrotate snippet does: kill -USR1 "$(cat FILE)".
            subprocess.run(["sh", "-c", 'kill -USR1 "$(cat "$1")"', "sh", self.pidfile],
                           check=True, timeout=10)
            self.assertTrue(wait_until(lambda: log_lines_with(u, "SIGUSR1: log files reopened"),
                                       5), u.log())
            self.assertTrue(os.path.exists(u.path("logs/access.log")))
            self.assertTrue(u.alive())


class SignalsTest(unittest.TestCase):
    def test_sigquit_stops_with_a_request_in_flight(self):
        with Origin() as o, Umbra(config(o.url), files=FILES) as u:
            s = socket.create_connection(("127.0.0.1", u.port), timeout=5)
            s.sendall(b"GET /slow?delay=8000&cc=no-store HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertTrue(wait_until(lambda: o.stats()["active"] == 1, 3))
            t0 = time.monotonic()
            rc = u.stop(signal.SIGQUIT, timeout=10)
            self.assertEqual(rc, 0)
            self.assertLess(time.monotonic() - t0, 2.0)
            s.close()
            self.assertIn("SIGQUIT: stopping now", u.log())

    def test_sd_notify(self):
        # What systemd's Type=notify sees: a datagram socket named by $NOTIFY_SOCKET.
        with tempfile.TemporaryDirectory(prefix="umbra-notify-") as d:
            path = os.path.join(d, "notify")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            sock.settimeout(5)
            old = os.environ.get("NOTIFY_SOCKET")
            os.environ["NOTIFY_SOCKET"] = path
            try:
                with Umbra('routes = { { path = "/", root = "www" } }', files=FILES) as u:
                    del os.environ["NOTIFY_SOCKET"]
                    msg = sock.recv(4096).decode()
                    self.assertEqual(msg, "READY=1\nMAINPID=%d" % u.proc.pid)
                    u.proc.send_signal(signal.SIGHUP)
                    self.assertRegex(sock.recv(4096).decode(), r"^RELOADING=1\nMONOTONIC_USEC=\d+$")
                    self.assertTrue(sock.recv(4096).decode().startswith("READY=1"))
                    self.assertEqual(u.stop(signal.SIGTERM, 10), 0)
                    self.assertEqual(sock.recv(4096).decode(), "STOPPING=1")
            finally:
                if old is None:
                    os.environ.pop("NOTIFY_SOCKET", None)
                else:
                    os.environ["NOTIFY_SOCKET"] = old
                sock.close()


class ClientGoneTest(unittest.TestCase):
    """The access log of a client that leaves first: 499 when it left before the response
    head, else the status that was sent; logged when it leaves, not when the origin ends."""

    def test_client_leaving_is_logged_499_before_the_head_and_200_after(self):
        files = dict(FILES, **{"logs/.keep": ""})
        with Origin() as o, Umbra(config(o.url, 'access_log = { path = "logs/access.log", '
                                                'format = "json" }'), files=files) as u:
            def records(n):
                try:
                    with open(u.path("logs/access.log")) as f:
                        recs = [json.loads(line) for line in f]
                except FileNotFoundError:
                    return None
                return recs if len(recs) >= n else None

            # Before the head: the origin takes 10 s to answer; the client leaves once the
            # request is there.
            slow = "/gone/slow?delay=10000&cc=no-store"
            with connect(u.port) as s:
                s.sendall(req(slow, close=False))
                self.assertTrue(wait_until(lambda: o.stats()["active"] == 1, 5),
                                "the request did not reach the origin")
            recs = wait_until(lambda: records(1), 6, 0.05)
            self.assertTrue(recs, "no line within 6 s of the client leaving (the origin "
                            "answers after 10 s)")
            self.assertEqual([(r["target"], r["status"], r["bytes"]) for r in recs],
                             [(slow, 499, 0)])
            # After the head: a 20 MB body, of which the client reads the head and leaves.
            big = "/gone/big?size=20000000&cc=no-store"
            with connect(u.port) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                s.sendall(req(big, close=False))
                self.assertTrue(s.recv(65536).startswith(b"HTTP/1.1 200 "))
            recs = wait_until(lambda: records(2), 6, 0.05)
            self.assertTrue(recs, "no line for the client that left mid-body")
            self.assertEqual((recs[1]["target"], recs[1]["status"]), (big, 200))
            self.assertLess(recs[1]["bytes"], 20000000)


if __name__ == "__main__":
    unittest.main()
