"""The process: command line, configuration checking, timeouts, connection limits, graceful
shutdown, and the bundled configuration."""

import hashlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (HttpAssertions, Origin, Umbra, class_context, connect,  # noqa: E402
                           echoed, exchange, fetch_req, parse_response, parse_responses,
                           peer_closed, read_response, req, source_dir, umbra_bin, wait_until,
                           write_files)

GOOD_CONFIG = """\
-- a complete configuration
listen = { "127.0.0.1:0" }
workers = 2
routes = {
  { host = "a.test", path = "/", root = "www" },
  { path = "/static/", root = "www", index = "index.html" },
  { path = "/", root = "www" },
}
limits = { max_connections = 100, max_header_bytes = 16384, max_body_bytes = "16MB",
           max_request_line = 8192 }
timeouts = { header = 1.5, idle = 60, send = 30, shutdown = 10 }
mime = { wasm = "application/wasm" }
"""


def run_umbra(args, cwd=None, timeout=10):
    return subprocess.run([umbra_bin()] + args, cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="umbra-it-")
        self.dir = self.tmp.name
        write_files(self.dir, {"www/index.html": "hi\n"})

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_version(self):
        r = run_umbra(["-v"])
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout.decode(), r"^umbra \d+\.\d+\.\d+")

    def test_help(self):
        r = run_umbra(["-h"])
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage", (r.stdout + r.stderr).decode().lower())

    def test_unknown_option(self):
        r = run_umbra(["-Z"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("usage", r.stderr.decode().lower())

    def test_check_good_config(self):
        path = self.write("good.lua", GOOD_CONFIG)
        r = run_umbra(["-t", path], cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr.decode())

    def test_check_good_config_from_other_cwd(self):
        # Relative roots resolve against the config file's folder, not the cwd.
        path = self.write("good.lua", GOOD_CONFIG)
        with tempfile.TemporaryDirectory() as elsewhere:
            r = run_umbra(["-t", path], cwd=elsewhere)
        self.assertEqual(r.returncode, 0, r.stderr.decode())

    def check_bad(self, text, line, words=()):
        """umbra -t exits non-zero naming bad.lua:LINE: (and the given words)."""
        path = self.write("bad.lua", text)
        r = run_umbra(["-t", path], cwd=self.dir)
        out = (r.stdout + r.stderr).decode()
        self.assertNotEqual(r.returncode, 0, out)
        m = re.search(r"bad\.lua:(\d+):", out)
        self.assertTrue(m, "no FILE:LINE: in %r" % out)
        self.assertEqual(int(m.group(1)), line, out)
        for w in words:
            self.assertIn(w.lower(), out.lower())
        return out

    def test_syntax_error_line(self):
        self.check_bad('workers = 1\nroutes = {\n  { path = "/", root = "www" }\n'
                       'limits = { max_connections = 10 }\n', 4)

    def test_syntax_error_line_simple(self):
        self.check_bad('workers = 1\n\nworkers = = 2\n', 3)

    def test_unknown_setting_line(self):
        self.check_bad('workers = 1\nroutes = { { path = "/", root = "www" } }\n\n'
                       'colour = "blue"\n', 4, words=["colour"])

    def test_unknown_limit_line(self):
        self.check_bad('routes = { { path = "/", root = "www" } }\n'
                       'limits = {\n  max_connections = 10,\n  max_bananas = 3,\n}\n', 4,
                       words=["max_bananas"])

    def test_missing_root_line(self):
        self.check_bad('workers = 1\nroutes = {\n  { path = "/", root = "www" },\n'
                       '  { path = "/x/", root = "no-such-dir" },\n}\n', 4,
                       words=["no-such-dir"])

    def test_bad_listen_address_line(self):
        for addr in ("999.1.1.1:80", "127.0.0.1", "127.0.0.1:99999", "nonsense"):
            with self.subTest(addr=addr):
                self.check_bad('workers = 1\nlisten = { "%s" }\n'
                               'routes = { { path = "/", root = "www" } }\n' % addr, 2)

    def test_bad_value_type_line(self):
        self.check_bad('routes = { { path = "/", root = "www" } }\n\nworkers = "many"\n', 3,
                       words=["workers"])

    def test_bad_size_line(self):
        self.check_bad('routes = { { path = "/", root = "www" } }\n'
                       'limits = { max_body_bytes = "16 parsecs" }\n', 2)

    def test_missing_file(self):
        r = run_umbra(["-t", os.path.join(self.dir, "nope.lua")])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("nope.lua", r.stderr.decode())

    def test_config_error_exits_before_binding(self):
        port = free_port()
        path = self.write("bad.lua", 'listen = { "127.0.0.1:%d" }\n'
                                     'routes = { { path = "/", root = "no-such-dir" } }\n' % port)
        with socket.socket() as probe:
            probe.settimeout(0.2)
            proc = subprocess.Popen([umbra_bin(), path], cwd=self.dir, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                # While it runs, nothing accepts on the port.
                accepted = False
                deadline = time.monotonic() + 10
                while proc.poll() is None and time.monotonic() < deadline:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                        accepted = True
                    except OSError:
                        pass
                    time.sleep(0.01)
                out, err = proc.communicate(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)
        self.assertNotEqual(proc.returncode, 0)
        self.assertFalse(accepted, "umbra bound its port before rejecting its config")
        self.assertIn("bad.lua:2:", err.decode())
        self.assertNotIn("listening", err.decode())
        with socket.socket() as s:  # the port is still free
            s.bind(("127.0.0.1", port))


class TimeoutTest(unittest.TestCase, HttpAssertions):
    CONFIG = """
routes = { { path = "/", root = "www" } }
timeouts = { header = 1, idle = 1 }
"""

    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra(cls.CONFIG, files={"www/a.txt": "aaa\n"}))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def get_ok(self):
        data, _ = exchange(self.port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                           timeout=2)
        rs = parse_responses(data)
        self.assertEqual([r.status for r in rs], [200])

    def wait_close(self, s, timeout=4):
        """Reads until the server closes; returns (seconds waited, bytes)."""
        t0 = time.monotonic()
        buf = b""
        s.settimeout(0.1)
        while time.monotonic() - t0 < timeout:
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
        else:
            self.fail("connection still open after %.1f s" % timeout)
        return time.monotonic() - t0, buf

    def assert408OrNothing(self, data):
        if data:
            rs = parse_responses(data)
            self.assertEqual([r.status for r in rs], [408])
            self.assertCommonHeaders(rs[0])

    def test_header_timeout_half_request(self):
        with connect(self.port) as s:
            t0 = time.monotonic()
            s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n")
            # Another client is served meanwhile.
            time.sleep(0.3)
            self.get_ok()
            waited, data = self.wait_close(s)
            elapsed = time.monotonic() - t0
        self.assertGreater(elapsed, 0.7, "closed before the header timeout")
        self.assertLess(elapsed, 3.5)
        self.assert408OrNothing(data)

    def test_header_timeout_trickle(self):
        # A head that keeps arriving one byte at a time must still complete within the
        # header timeout (slowloris).
        with connect(self.port) as s:
            t0 = time.monotonic()
            closed = False
            data = b""
            for b in b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 100:
                try:
                    s.sendall(bytes([b]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                if peer_closed(s, timeout=0.15):
                    closed = True
                    break
                if time.monotonic() - t0 > 5:
                    break
            elapsed = time.monotonic() - t0
        self.assertTrue(closed, "slow head not cut off after %.1f s" % elapsed)
        self.assertLess(elapsed, 3.5)

    def test_idle_timeout(self):
        with connect(self.port) as s:
            s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(s).status, 200)
            waited, data = self.wait_close(s)
        self.assertGreater(waited, 0.7)
        self.assertLess(waited, 3.5)
        self.assertEqual(data, b"")  # an idle close sends nothing

    def test_connection_without_bytes_times_out(self):
        with connect(self.port) as s:
            waited, data = self.wait_close(s)
        self.assertLess(waited, 3.5)
        self.assertEqual(data, b"")


BIG = os.urandom(20 << 20)


def start_download(port, path="/big.bin", rcvbuf=65536):
    """A connection with a small receive buffer that has asked for path."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    return s


def read_slowly(s, buf, seconds_per_mb=0.1, limit_s=30, until=None):
    """Reads at about 1/seconds_per_mb MB/s until EOF or, with until, until a body of that
    many bytes has arrived after the response head; returns buf."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        end = buf.find(b"\r\n\r\n")
        if until is not None and end >= 0 and len(buf) - end - 4 >= until:
            break
        try:
            chunk = s.recv(262144)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
        time.sleep(seconds_per_mb * len(chunk) / (1 << 20))
    return buf


def read_to_close(s, buf, seconds):
    """Reads s into buf until the peer closes (EOF or reset: True), a recv times out or
    seconds pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 20)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        if not chunk:
            return True
        buf += chunk
    return False


def split_download(buf):
    head_end = buf.find(b"\r\n\r\n")
    head = parse_responses(bytes(buf[:head_end + 4]), head_methods=[True])[0]
    return head, bytes(buf[head_end + 4:])


class SlowClientTest(unittest.TestCase):
    def test_idle_timeout_does_not_cut_slow_download(self):
        # idle = 1 is for waiting between requests, not for a response being sent.
        with Umbra('routes = { { path = "/", root = "www" } }\n'
                   'timeouts = { header = 1, idle = 1, send = 30 }\n',
                   files={"www/big.bin": BIG}) as u:
            s = start_download(u.port)
            t0 = time.monotonic()
            buf = read_slowly(s, bytearray(), seconds_per_mb=0.12, until=len(BIG))
            s.close()
            head, body = split_download(buf)
            self.assertEqual(head.status, 200)
            self.assertGreater(time.monotonic() - t0, 1.5, "download was not slow; test is moot")
            self.assertEqual(len(body), len(BIG), "slow download cut short")
            self.assertEqual(hashlib.sha256(body).digest(), hashlib.sha256(BIG).digest())

    def test_send_timeout_drops_stalled_reader(self):
        with Umbra('routes = { { path = "/", root = "www" } }\ntimeouts = { send = 1 }\n',
                   files={"www/big.bin": BIG, "www/a.txt": "aaa\n"}) as u:
            s = start_download(u.port)
            cpu0 = u.cpu_seconds()
            time.sleep(3.5)  # never read: no progress past the socket buffers
            cpu = u.cpu_seconds() - cpu0
            # Whatever was buffered arrives, then the end: well short of the whole file.
            buf = bytearray()
            closed = read_to_close(s, buf, 10)
            s.close()
            self.assertTrue(closed, "stalled download still open")
            self.assertLess(len(buf), len(BIG), "whole file sent to a client that never read")
            self.assertLess(cpu, 0.5, "umbra spins on a stalled client (%.2f s CPU)" % cpu)
            data, _ = exchange(u.port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertEqual([r.status for r in parse_responses(data)], [200])


class HeaderVersusIdleTest(unittest.TestCase):
    """header and idle are different clocks: a started head gets `header`, a connection
    waiting between requests gets `idle`."""

    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra('routes = { { path = "/", root = "www" } }\n'
                                             'timeouts = { header = 1, idle = 2.5 }\n',
                                             files={"www/a.txt": "aaa\n"}))

    def test_partial_second_request_gets_header_timeout(self):
        with connect(self.umbra.port) as s:
            s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(s).status, 200)
            t0 = time.monotonic()
            s.sendall(b"GET /a.txt HTTP/1.1\r\n")
            self.assertTrue(peer_closed(s, timeout=4), "stalled head never timed out")
            elapsed = time.monotonic() - t0
        self.assertGreater(elapsed, 0.7)
        self.assertLess(elapsed, 2.3, "stalled head got the idle timeout, not the header one")

    def test_idle_connection_gets_idle_timeout(self):
        with connect(self.umbra.port) as s:
            s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_response(s).status, 200)
            t0 = time.monotonic()
            self.assertFalse(peer_closed(s, timeout=1.6), "idle connection got the header timeout")
            self.assertTrue(peer_closed(s, timeout=3), "idle connection never timed out")
            elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 4.5)


class RobustnessTest(unittest.TestCase):
    def test_clients_vanishing_mid_download(self):
        # Resets and closes while a file is being sent must not kill the process (SIGPIPE).
        with Umbra('routes = { { path = "/", root = "www" } }\n',
                   files={"www/big.bin": BIG, "www/a.txt": "aaa\n"}) as u:
            for i in range(10):
                s = start_download(u.port)
                s.recv(65536)
                if i % 2:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            time.sleep(0.3)
            self.assertTrue(u.alive(), u.log())
            data, _ = exchange(u.port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertEqual([r.status for r in parse_responses(data)], [200])

    def test_file_truncated_while_sent(self):
        with Umbra('routes = { { path = "/", root = "www" } }\n',
                   files={"www/big.bin": BIG, "www/a.txt": "aaa\n"}) as u:
            s = start_download(u.port)
            buf = bytearray(s.recv(65536))
            cpu0 = u.cpu_seconds()
            os.truncate(u.path("www/big.bin"), 1 << 20)
            s.settimeout(5)
            closed = read_to_close(s, buf, 5)
            s.close()
            # The response cannot be completed: the connection must end, promptly, so the
            # client sees a short body instead of hanging.
            self.assertTrue(closed, "connection left hanging after the file shrank")
            self.assertLess(len(buf), len(BIG))
            self.assertLess(u.cpu_seconds() - cpu0, 0.5)
            self.assertTrue(u.alive(), u.log())

    def test_changed_file_served_fresh(self):
        with Umbra('routes = { { path = "/", root = "www" } }\n', files={"www/a.txt": "aaa\n"}) as u:
            def get():
                data, _ = exchange(u.port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\n"
                                           b"Connection: close\r\n\r\n")
                return parse_responses(data)[0]
            r1 = get()
            with open(u.path("www/a.txt"), "w") as f:
                f.write("changed content\n")
            os.utime(u.path("www/a.txt"), (time.time() + 5, time.time() + 5))
            r2 = get()
            self.assertEqual(r2.body, b"changed content\n")
            self.assertNotEqual(r1.header("ETag"), r2.header("ETag"))
            os.unlink(u.path("www/a.txt"))
            self.assertEqual(get().status, 404)


class ShutdownTest(unittest.TestCase):
    BIG = BIG

    def test_sigterm_drains_download(self):
        with Umbra('routes = { { path = "/", root = "www" } }\ntimeouts = { shutdown = 10 }\n',
                   files={"www/big.bin": self.BIG, "www/a.txt": "aaa\n"}) as u:
            s = start_download(u.port)
            buf = bytearray()
            while len(buf) < (1 << 20):
                chunk = s.recv(65536)
                self.assertTrue(chunk, "closed early")
                buf += chunk
            os.kill(u.proc.pid, signal.SIGTERM)
            t_term = time.monotonic()

            refused = []

            def probe():
                # New connections are refused (or dropped unanswered) once SIGTERM is in.
                def not_served():
                    try:
                        data, closed = exchange(u.port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\n"
                                                b"Connection: close\r\n\r\n", timeout=0.5)
                    except OSError:
                        return True
                    return closed and not data
                refused.append(wait_until(not_served, timeout=1.5, interval=0.1))

            t = threading.Thread(target=probe)
            t.start()
            buf = read_slowly(s, buf, seconds_per_mb=0.12, until=len(self.BIG))  # about 2.3 s
            s.close()
            t.join(10)
            head, body = split_download(buf)
            self.assertEqual(head.status, 200)
            self.assertGreater(time.monotonic() - t_term, 1.0, "download was not slow; test is moot")
            self.assertEqual(len(body), len(self.BIG), "download cut short by SIGTERM")
            self.assertEqual(hashlib.sha256(body).digest(), hashlib.sha256(self.BIG).digest())
            self.assertEqual(refused, [True], "new connection served after SIGTERM")
            rc = u.proc.wait(10)
            self.assertEqual(rc, 0, u.log())

    def test_bug_sigterm_keeps_connection_open_after_inflight_response(self):
        # The bug: the connection stayed open after the response in flight at SIGTERM, and
        # the process waited for timeouts.shutdown. Once that response is complete, the
        # connection must close and the process exit.
        with Umbra('routes = { { path = "/", root = "www" } }\ntimeouts = { shutdown = 6 }\n',
                   files={"www/big.bin": self.BIG}) as u:
            s = start_download(u.port)
            buf = bytearray(s.recv(65536))
            os.kill(u.proc.pid, signal.SIGTERM)
            t0 = time.monotonic()
            s.settimeout(10)
            while True:
                end = buf.find(b"\r\n\r\n")
                if end > 0 and len(buf) - end - 4 >= len(self.BIG):
                    break
                chunk = s.recv(1 << 20)
                self.assertTrue(chunk, "closed before the body was complete")
                buf += chunk
            self.assertEqual(len(buf) - end - 4, len(self.BIG))
            closed = peer_closed(s, timeout=2)
            s.close()
            try:
                rc = u.proc.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
            elapsed = time.monotonic() - t0
            self.assertTrue(closed, "connection still open 2 s after its last response "
                                    "during shutdown")
            self.assertEqual(rc, 0)
            self.assertLess(elapsed, 3.0)

    def test_sigterm_with_idle_keepalive_exits_promptly(self):
        with Umbra('routes = { { path = "/", root = "www" } }\ntimeouts = { shutdown = 10 }\n',
                   files={"www/a.txt": "aaa\n"}) as u:
            with connect(u.port) as s:
                s.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(read_response(s).status, 200)
                t0 = time.monotonic()
                rc = u.stop(signal.SIGTERM, timeout=10)
                elapsed = time.monotonic() - t0
                self.assertEqual(rc, 0, u.log())
                self.assertLess(elapsed, 2.0)
                self.assertTrue(peer_closed(s, timeout=1))

    def test_shutdown_timeout_bounds_drain(self):
        # A client that never reads cannot hold the process past timeouts.shutdown.
        with Umbra('routes = { { path = "/", root = "www" } }\n'
                   'timeouts = { shutdown = 1, send = 60 }\n', files={"www/big.bin": BIG}) as u:
            s = start_download(u.port)
            self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200 "))
            time.sleep(0.3)
            t0 = time.monotonic()
            rc = u.stop(signal.SIGTERM, timeout=10)
            elapsed = time.monotonic() - t0
            s.close()
            self.assertIsNotNone(rc, "still running 10 s after SIGTERM")
            self.assertGreater(elapsed, 0.7, "in-flight download not given its shutdown time")
            # Bounded by shutdown = 1 (not by send = 60); slack for sanitizer builds and a
            # loaded machine.
            self.assertLess(elapsed, 6.0)

    def test_sigquit_exits_immediately(self):
        with Umbra('routes = { { path = "/", root = "www" } }\ntimeouts = { shutdown = 10 }\n',
                   files={"www/big.bin": BIG}) as u:
            s = start_download(u.port)
            self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200 "))
            t0 = time.monotonic()
            rc = u.stop(signal.SIGQUIT, timeout=10)
            s.close()
            self.assertIsNotNone(rc)
            self.assertLess(time.monotonic() - t0, 1.5)

    def test_sigint_exits_zero(self):
        with Umbra('routes = { { path = "/", root = "www" } }\n', files={"www/a.txt": "a"}) as u:
            self.assertEqual(u.stop(signal.SIGINT, timeout=5), 0, u.log())


class MaxConnectionsTest(unittest.TestCase):
    def test_sixth_connection_waits(self):
        config = ('routes = { { path = "/", root = "www" } }\n'
                  'limits = { max_connections = 5 }\ntimeouts = { idle = 30 }\n')
        with Umbra(config, files={"www/a.txt": "aaa\n"}) as u:
            conns = []
            try:
                for _ in range(5):
                    c = connect(u.port)
                    conns.append(c)
                    c.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                    self.assertEqual(read_response(c).status, 200)
                cpu0 = u.cpu_seconds()
                sixth = connect(u.port)  # the kernel's backlog takes it
                conns.append(sixth)
                sixth.sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                sixth.settimeout(1.5)
                try:
                    early = sixth.recv(4096)
                except socket.timeout:
                    early = None
                self.assertIsNone(early, "6th connection answered over max_connections")
                cpu = u.cpu_seconds() - cpu0
                self.assertLess(cpu, 0.5, "umbra spins while at max_connections (%.2f s CPU)"
                                % cpu)
                # One leaves: the waiting one is served.
                conns.pop(0).close()
                r = read_response(sixth, timeout=3)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.body, b"aaa\n")
                # The others still work.
                conns[0].sendall(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(read_response(conns[0]).status, 200)
                self.assertTrue(u.alive())
            finally:
                for c in conns:
                    c.close()


class ListenTest(unittest.TestCase):
    def test_two_listeners(self):
        want = sorted({free_port() for _ in range(2)})
        self.assertEqual(len(want), 2)
        with Umbra('listen = { "127.0.0.1:%d", "127.0.0.1:%d" }\n'
                   'routes = { { path = "/", root = "www" } }\n' % tuple(want),
                   files={"www/a.txt": "aaa\n"}, workers=2) as u:
            self.assertEqual(sorted(u.ports), want, u.log())
            for port in u.ports:
                data, _ = exchange(port, b"GET /a.txt HTTP/1.1\r\nHost: x\r\n"
                                         b"Connection: close\r\n\r\n")
                rs = parse_responses(data)
                self.assertEqual([(r.status, r.body) for r in rs], [(200, b"aaa\n")])

    def test_port_in_use_fails_cleanly(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            port = busy.getsockname()[1]
            with Umbra('listen = { "127.0.0.1:%d" }\nroutes = { { path = "/", root = "www" } }\n'
                       % port, files={"www/a.txt": "a"}, expect_fail=True) as u:
                self.assertNotEqual(u.returncode, 0)
                self.assertIn(str(port), u.log())


    def test_same_address_twice_is_a_config_error(self):
        with tempfile.TemporaryDirectory() as d:
            write_files(d, {"www/a": "a", "c.lua": 'listen = { "127.0.0.1:8080",\n'
                            '  "127.0.0.1:8080" }\nroutes = { { path = "/", root = "www" } }\n'})
            r = run_umbra(["-t", os.path.join(d, "c.lua")])
            self.assertNotEqual(r.returncode, 0)
            self.assertRegex(r.stderr.decode(), r"c\.lua:\d+:")


class BundledConfigTest(unittest.TestCase):
    def test_bundled_config_serves_site(self):
        src = source_dir()
        with open(os.path.join(src, "config.lua")) as f:
            text = f.read()
        # The bundled config names its two ports on one line; give it two free ones.
        ports = []
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        text, n = re.subn(r"(?m)^local proxy_port, origin_port = \d+, \d+$",
                          "local proxy_port, origin_port = %d, %d" % tuple(ports), text)
        self.assertEqual(n, 1, "no port line in config.lua")
        files = {}
        www = os.path.join(src, "config", "www")
        for root, _, names in os.walk(www):
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, src)] = f.read()
        # As the file stands (as_root=False: the harness adds no user of its own), so that
        # it serves when the README's first command runs it as root.
        with Umbra(text, files=files, as_root=False) as u:
            data, _ = exchange(u.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                                       b"Connection: close\r\n\r\n")
            rs = parse_responses(data)
            self.assertEqual([r.status for r in rs], [200])
            self.assertIn(b"Umbra", rs[0].body)
            self.assertEqual(rs[0].header("Content-Type"), "text/html; charset=utf-8")
            self.assertIn("fwd=uri-miss", rs[0].header("Cache-Status"))
            # The second time it comes from the cache.
            data, _ = exchange(u.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n"
                                       b"Connection: close\r\n\r\n")
            rs = parse_responses(data)
            self.assertEqual([r.status for r in rs], [200])
            self.assertIn(b"Umbra", rs[0].body)
            self.assertIn("hit", rs[0].header("Cache-Status"))
            # The check mode accepts it too.
            r = run_umbra(["-t", u.config_path], cwd="/")
            self.assertEqual(r.returncode, 0, r.stderr.decode())


class BodyTimeoutTest(unittest.TestCase):
    """timeouts.header is also the longest pause while a request body arrives: a body that
    keeps coming is read however long it takes, one that stops is cut after the header
    timeout, and other clients are served meanwhile. A static route reads the body before it
    answers; an upstream route streams it to the origin as it arrives."""

    ROUTES = (("static", "GET", "/a.txt"), ("upstream", "POST", "/up/body"))
    PAUSE = 0.25  # between two body bytes: a quarter of the header timeout

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        cls.umbra = class_context(cls, Umbra("""
timeouts = { header = 1, idle = 30 }
upstreams = { app = { servers = { "%s" }, timeout = 30 } }
routes = { { path = "/up/", upstream = "app" }, { path = "/", root = "www" } }
""" % cls.origin.url, files={"www/a.txt": "aaa\n"}))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def trickle(self, s, data):
        """Sends data a byte at a time, PAUSE seconds apart; False when the server closes
        the connection meanwhile."""
        for b in data:
            if peer_closed(s, timeout=self.PAUSE):
                return False
            try:
                s.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    def test_bug_body_streamed_to_upstream_cut_after_header_timeout(self):
        # A body streamed to the origin had the header timeout counted from the head's first
        # byte, not from the last body byte: an upload still arriving was cut after it.
        body = b"0123456789AB"  # 12 pauses: 3 s, three header timeouts
        for name, method, path in self.ROUTES:
            with self.subTest(route=name):
                raw = req("%s?echo=1&slow-%s" % (path, name), method, body=body)
                with connect(self.port, timeout=10) as s:
                    t0 = time.monotonic()
                    s.sendall(raw[:-len(body)])
                    self.assertTrue(self.trickle(s, body), "closed while the body was arriving "
                                    "(after %.1f s)" % (time.monotonic() - t0))
                    buf = bytearray()
                    self.assertTrue(read_to_close(s, buf, 10), "no answer to the whole body")
                r = parse_response(bytes(buf))
                self.assertEqual(r.status, 200, r)
                if name == "static":
                    self.assertEqual(r.body, b"aaa\n")
                else:
                    self.assertEqual(echoed(r)[2], body)

    def test_stalled_body_is_cut_after_the_header_timeout(self):
        body = b"0123456789"
        for name, method, path in self.ROUTES:
            with self.subTest(route=name):
                target = "%s?stalled-%s" % (path, name)
                raw = req(target, method, body=body)
                with connect(self.port, timeout=10) as s:
                    s.sendall(raw[:-len(body)])
                    # Bytes come for longer than the header timeout (6 pauses: 1.5 s), then
                    # stop four short of Content-Length.
                    self.assertTrue(self.trickle(s, body[:6]), "closed while the body was "
                                    "arriving")
                    t_last = time.monotonic()
                    # Another client is served meanwhile.
                    r = fetch_req(self.port, "/a.txt", host="x")
                    self.assertEqual((r.status, r.body), (200, b"aaa\n"))
                    buf = bytearray()
                    closed = read_to_close(s, buf, 8)
                    elapsed = time.monotonic() - t_last
                self.assertTrue(closed, "stalled body still open after 8 s")
                self.assertGreater(elapsed, 0.7, "closed before the header timeout")
                self.assertLess(elapsed, 3.5)
                # Closed without an answer, or with 408 Request Timeout.
                if buf:
                    self.assertEqual([r.status for r in parse_responses(bytes(buf))], [408])
                self.assertEqual([t for _, t, _ in self.origin.records() if t == target], [],
                                 "the origin saw the whole request")


if __name__ == "__main__":
    unittest.main()
