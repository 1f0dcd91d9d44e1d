"""TLS termination: certificates by SNI (exact, wildcard, default), protocol versions,
ALPN, session resumption, HTTP/1.1 over TLS (keep-alive, pipelining, large files),
certificate reload (file change, SIGHUP, broken replacements), redirect_https, and bad
input on a TLS port.

Certificates are made at test time with the openssl command: a root CA, an intermediate
it signs, and ECDSA P-256 leaf certificates signed by the intermediate. Umbra serves each
leaf with the intermediate; clients trust the root only, so every handshake also checks
that the chain is sent whole.
"""

import hashlib
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import umbra_harness  # noqa: E402
from umbra_harness import (CertAuthority, Origin, TlsClient, Umbra, class_context,  # noqa: E402
                           client_hello, connect, exchange, log_lines_with, origin_body,
                           parse_response, parse_responses, peer_cert_names, peer_closed,
                           tls_connect, tls_context, tls_recv_all, wait_until)

TLS12 = ssl.TLSVersion.TLSv1_2
TLS13 = ssl.TLSVersion.TLSv1_3
BIG = os.urandom(5 << 20)
HEADER_TIMEOUT = 1.5
SLACK = 1.5  # timer granularity, scheduling on a loaded 2-CPU machine

CA = None  # CertAuthority, made once for the module
CERTS = {}  # name -> {"NAME.crt": bytes, "NAME.key": bytes}


def setUpModule():
    global CA
    d = tempfile.mkdtemp(prefix="umbra-tls-pki-")
    CA = CertAuthority(d)
    CA.leaf("example", ["example.com", "*.example.com"])
    CA.leaf("example2", ["example.com", "*.example.com"], org="gen2")
    CA.leaf("other", ["other.test"])
    for name in ("example", "example2", "other"):
        CERTS[name] = CA.read(name)


def tearDownModule():
    if CA is not None:
        shutil.rmtree(CA.dir, ignore_errors=True)


LISTEN = 'listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }\n'  # .ports: plain, TLS


CERT_ENTRIES = """\
  { hosts = { "example.com", "*.example.com" }, cert = "example.crt", key = "example.key" },
  { hosts = { "other.test" }, cert = "other.crt", key = "other.key" },
"""

ROUTES = """\
routes = {
  { host = "other.test", path = "/", root = "other" },
  { path = "/", root = "www", redirect_https = true },
}
"""


def tls_config(tls_extra="", routes=ROUTES, header=HEADER_TIMEOUT):
    return (LISTEN + "timeouts = { header = %g, shutdown = 5 }\n" % header
            + "tls = {\n" + CERT_ENTRIES + tls_extra + "}\n" + routes)


def site_files():
    files = {"www/a.txt": "www a\n", "www/index.html": "<p>www</p>\n", "www/big.bin": BIG,
             "other/a.txt": "other a\n"}
    files.update(CERTS["example"])
    files.update(CERTS["other"])
    return files


def req(path, host="example.com", method="GET", headers=(), close=False):
    """umbra_harness.req for example.com, kept alive unless close."""
    return umbra_harness.req(path, method, headers, host=host, close=close)


def ctx(**kw):
    return tls_context(CA.root, **kw)


def read_slowly(client, chunk=32768, pause=0.005, timeout=30):
    """Reads one response from a TlsClient a chunk at a time with pauses, so that the
    server finds the socket buffer full again and again."""
    deadline = time.monotonic() + timeout
    while b"\r\n\r\n" not in client.buf:
        client._recv(deadline)
    while True:
        try:
            return client.read_response(timeout=0.001)
        except socket.timeout:
            pass
        if time.monotonic() > deadline:
            raise socket.timeout("response not complete after %g s" % timeout)
        client.sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = client.sock.recv(chunk)
        if not data:
            raise ConnectionError("closed mid-response")
        client.buf += data
        time.sleep(pause)


class TlsBase(unittest.TestCase):
    """Helpers for a test (or class) that has an Umbra in self.u: .tls and .plain ports."""

    @property
    def tls(self):
        return self.u.ports[1]

    @property
    def plain(self):
        return self.u.ports[0]

    def names(self, server_name, **kw):
        with tls_connect(self.tls, ctx(**kw), server_name) as s:
            return peer_cert_names(s)

    def assertServes(self, server_name="example.com", host="example.com", path="/a.txt",
                     body=b"www a\n", **kw):
        with TlsClient(self.tls, ctx(**kw), server_name) as c:
            r = c.get(path, host=host)
            self.assertEqual((r.status, r.body), (200, body), r.raw_head)

    def assertAlive(self):
        self.assertTrue(self.u.alive(), "umbra exited:\n" + self.u.log())
        self.assertServes()

    def peer_lines(self, port, timeout=3):
        """The log lines about the client whose local port was port (waits for one)."""
        needle = "127.0.0.1:%d " % port
        wait_until(lambda: log_lines_with(self.u, needle), timeout)
        return log_lines_with(self.u, needle)


class ListenBugTest(TlsBase):
    def test_bug_two_ephemeral_listeners_are_not_duplicates(self):
        # The bug: two "127.0.0.1:0" entries (the issue's own listen example, one plain and
        # one TLS) were refused as the same address listed twice.
        with Umbra(LISTEN + "tls = {\n" + CERT_ENTRIES + "}\n" + ROUTES,
                   files=site_files()) as u:
            self.u = u
            self.assertEqual(len(u.ports), 2, u.log())
            self.assertNotEqual(u.ports[0], u.ports[1])
            self.assertServes()


class TlsServerTest(TlsBase):
    """One server for the read-only checks: plain + TLS listener, two certificates."""

    @classmethod
    def setUpClass(cls):
        cls.u = class_context(cls, Umbra(tls_config(), files=site_files(), workers=2))

    @classmethod
    def tearDownClass(cls):
        rc = cls.u.stop(signal.SIGTERM, 10)
        assert rc == 0, "exit status %r on SIGTERM:\n%s" % (rc, cls.u.log())

    # -- certificates -------------------------------------------------------------------

    def test_each_name_gets_its_certificate(self):
        cn, sans, _, _ = self.names("example.com")
        self.assertEqual((cn, sans), ("example.com", ["example.com", "*.example.com"]))
        cn, sans, _, _ = self.names("other.test")
        self.assertEqual((cn, sans), ("other.test", ["other.test"]))

    def test_hostname_verification_passes(self):
        # A client that checks the name (as browsers do) accepts both.
        for name in ("example.com", "www.example.com", "other.test"):
            with self.subTest(name=name):
                c = ssl.create_default_context(cafile=CA.root)
                with tls_connect(self.tls, c, name) as s:
                    self.assertTrue(s.getpeercert())

    def test_chain_sent_with_intermediate(self):
        r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.tls,
                            "-servername", "example.com", "-CAfile", CA.root, "-showcerts",
                            "-verify_return_error"], input=b"", capture_output=True,
                           timeout=20)
        out = r.stdout.decode("latin-1")
        self.assertEqual(out.count("-----BEGIN CERTIFICATE-----"), 2, out)
        self.assertIn("Verify return code: 0 (ok)", out)
        self.assertIn("Umbra Test Intermediate", out)

    def test_wildcard_one_label(self):
        for name in ("www.example.com", "a-b.example.com", "WWW.Example.COM", "example.com."):
            with self.subTest(name=name):
                self.assertEqual(self.names(name)[0], "example.com")

    def test_name_case_insensitive(self):
        self.assertEqual(self.names("OTHER.Test")[0], "other.test")

    def test_no_sni_gets_default(self):
        self.assertEqual(self.names(None)[0], "example.com")
        self.assertServes(server_name=None)

    def test_unknown_sni_gets_default(self):
        for name in ("unknown.test", "a.b.example.com", "example.com.evil", "xother.test"):
            with self.subTest(name=name):
                self.assertEqual(self.names(name)[0], "example.com")
        self.assertServes(server_name="unknown.test")

    # -- versions, ALPN, resumption ----------------------------------------------------

    def test_tls13(self):
        with TlsClient(self.tls, ctx(minimum=TLS13, maximum=TLS13), "example.com") as c:
            self.assertEqual(c.sock.version(), "TLSv1.3")
            self.assertEqual(c.get("/a.txt").body, b"www a\n")

    def test_tls12(self):
        with TlsClient(self.tls, ctx(minimum=TLS12, maximum=TLS12), "example.com") as c:
            self.assertEqual(c.sock.version(), "TLSv1.2")
            self.assertIn("ECDHE-ECDSA", c.sock.cipher()[0])
            self.assertEqual(c.get("/a.txt").body, b"www a\n")

    def test_default_prefers_tls13(self):
        with tls_connect(self.tls, ctx(), "example.com") as s:
            self.assertEqual(s.version(), "TLSv1.3")

    def test_alpn_http11(self):
        with TlsClient(self.tls, ctx(alpn=["http/1.1"]), "example.com") as c:
            self.assertEqual(c.sock.selected_alpn_protocol(), "http/1.1")
            self.assertEqual(c.get("/a.txt").status, 200)

    def test_alpn_prefers_h2(self):
        # The server's order: h2 first, whatever the client's order (test_h2.py speaks it).
        for offer in (["h2", "http/1.1"], ["http/1.1", "h2"], ["h2"]):
            with self.subTest(offer=offer):
                with tls_connect(self.tls, ctx(alpn=offer), "example.com") as s:
                    self.assertEqual(s.selected_alpn_protocol(), "h2")

    def test_no_alpn_is_fine(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            self.assertIsNone(c.sock.selected_alpn_protocol())
            self.assertEqual(c.get("/a.txt").status, 200)

    def test_alpn_unknown_only_refused_and_logged(self):
        raw = connect(self.tls)
        port = raw.getsockname()[1]
        with self.assertRaises(ssl.SSLError) as cm:
            ctx(alpn=["spdy/3"]).wrap_socket(raw, server_hostname="example.com")
        raw.close()
        self.assertIn("NO_APPLICATION_PROTOCOL", str(cm.exception).upper().replace(" ", "_"))
        self.assertEqual(len(self.peer_lines(port)), 1, self.u.log())
        self.assertAlive()

    def check_resumption(self, version):
        c = ctx(minimum=version, maximum=version)
        with TlsClient(self.tls, c, "example.com") as first:
            # TLS 1.3 tickets come after the handshake: read a response first.
            self.assertEqual(first.get("/a.txt").status, 200)
            self.assertFalse(first.sock.session_reused)
            session = first.sock.session
        self.assertTrue(session.has_ticket)
        # Several connections: with 2 workers, both see the ticket keys.
        for i in range(4):
            with TlsClient(self.tls, c, "example.com", session=session) as again:
                self.assertTrue(again.sock.session_reused, "connection %d" % i)
                self.assertEqual(again.get("/a.txt").body, b"www a\n")
                if version == TLS12:
                    session = again.sock.session

    def test_resumption_tls13(self):
        self.check_resumption(TLS13)

    def test_resumption_tls12(self):
        self.check_resumption(TLS12)

    def test_no_ticket_full_handshake(self):
        c = ctx(tickets=False, minimum=TLS12, maximum=TLS12)
        with TlsClient(self.tls, c, "example.com") as first:
            first.get("/a.txt")
            session = first.sock.session
        with TlsClient(self.tls, c, "example.com", session=session) as again:
            # No ticket and no server-side cache: a full handshake, which must work.
            self.assertEqual(again.get("/a.txt").status, 200)

    def check_resumption_refused_for_other_name(self, version):
        # RFC 6066 section 3: "A server that implements this extension MUST NOT accept the
        # request to resume the session if the server_name extension contains a different
        # name. Instead, it proceeds with a full handshake." A session made for
        # example.com, offered with SNI other.test, must give other.test's certificate.
        # (Regression: tickets are shared by every certificate's context, and nothing
        # compared the session's name with the new SNI, so TLS 1.2 resumed it.)
        c = ctx(minimum=version, maximum=version)
        with TlsClient(self.tls, c, "example.com") as first:
            self.assertEqual(first.get("/a.txt").status, 200)
            session = first.sock.session
        self.assertTrue(session.has_ticket)
        with TlsClient(self.tls, c, "other.test", session=session) as again:
            self.assertFalse(again.sock.session_reused,
                             "resumed an example.com session for SNI other.test")
            self.assertEqual(peer_cert_names(again.sock)[0], "other.test")
            self.assertEqual(again.get("/a.txt", host="other.test").body, b"other a\n")
        # The same session is still good for its own name.
        with TlsClient(self.tls, c, "example.com", session=session) as same:
            self.assertTrue(same.sock.session_reused)

    def test_tls12_resumption_refused_for_other_name(self):
        self.check_resumption_refused_for_other_name(TLS12)

    def test_tls13_resumption_refused_for_other_name(self):
        self.check_resumption_refused_for_other_name(TLS13)

    # -- HTTP over TLS -----------------------------------------------------------------

    def test_keep_alive(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            for i in range(20):
                host, body = (("other.test", b"other a\n") if i % 3 == 2
                              else ("example.com", b"www a\n"))
                r = c.get("/a.txt", host=host)
                self.assertEqual((r.status, r.body), (200, body), i)
                self.assertNotEqual(r.header("Connection"), "close")

    def test_pipelining(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/a.txt") + req("/index.html", method="HEAD") + req("/missing")
                   + req("/a.txt", host="other.test") + req("/a.txt", close=True))
            data, how = tls_recv_all(c.sock)
        rs = parse_responses(data, head_methods=[False, True])
        self.assertEqual([r.status for r in rs], [200, 200, 404, 200, 200])
        self.assertEqual(rs[0].body, b"www a\n")
        self.assertEqual(rs[1].body, b"")
        self.assertEqual(rs[1].header("Content-Length"), "11")
        self.assertEqual(rs[3].body, b"other a\n")
        self.assertEqual(rs[4].body, b"www a\n")
        self.assertEqual(how, "close_notify")

    def test_pipelined_large_files(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/big.bin") + req("/a.txt") + req("/big.bin"))
            for want in (BIG, b"www a\n", BIG):
                r = c.read_response(timeout=30)
                self.assertEqual(r.status, 200)
                self.assertEqual(hashlib.sha256(r.body).hexdigest(),
                                 hashlib.sha256(want).hexdigest())

    def test_large_file_intact(self):
        for version in (TLS12, TLS13):
            with self.subTest(version=version):
                with TlsClient(self.tls, ctx(minimum=version, maximum=version),
                               "example.com") as c:
                    r = c.get("/big.bin", timeout=30)
                    self.assertEqual(r.status, 200)
                    self.assertEqual(r.header("Content-Length"), str(len(BIG)))
                    self.assertEqual(len(r.body), len(BIG))
                    self.assertEqual(hashlib.sha256(r.body).hexdigest(),
                                     hashlib.sha256(BIG).hexdigest())
                    # The connection is still in step after 5 MB.
                    self.assertEqual(c.get("/a.txt").body, b"www a\n")

    def test_large_file_slow_reader(self):
        # The reader takes its time: the server's writes stop on a full socket buffer and
        # must resume with the same bytes (partial SSL writes).
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/big.bin"))
            time.sleep(0.5)
            r = read_slowly(c)
            self.assertEqual(hashlib.sha256(r.body).digest(), hashlib.sha256(BIG).digest())
            self.assertEqual(c.get("/a.txt").body, b"www a\n")

    def test_range_over_tls(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            r = c.get("/big.bin", headers=[("Range", "bytes=1000000-3999999")], timeout=30)
            self.assertEqual(r.status, 206)
            self.assertEqual(r.body, BIG[1000000:4000000])

    def test_request_in_same_flight_as_client_finished(self):
        # TLS 1.3: the client's Finished and two pipelined requests reach the server in
        # one segment, so the requests are already decrypted inside OpenSSL when the
        # handshake completes: the server must not wait for the socket to be readable.
        sock = connect(self.tls)
        try:
            inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = ctx(minimum=TLS13).wrap_bio(inc, out, server_hostname="example.com")
            deadline = time.monotonic() + 5
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    sock.sendall(out.read())
                    sock.settimeout(max(0.01, deadline - time.monotonic()))
                    data = sock.recv(65536)
                    self.assertTrue(data, "closed mid-handshake")
                    inc.write(data)
            obj.write(req("/a.txt") + req("/a.txt", host="other.test", close=True))
            sock.sendall(out.read())  # Finished + the requests, one write
            got = b""
            while True:
                try:
                    chunk = obj.read(65536)
                except ssl.SSLWantReadError:
                    sock.settimeout(max(0.01, deadline - time.monotonic()))
                    data = sock.recv(65536)
                    if not data:
                        break
                    inc.write(data)
                    continue
                except ssl.SSLZeroReturnError:
                    break
                if not chunk:
                    break
                got += chunk
        finally:
            sock.close()
        rs = parse_responses(got)
        self.assertEqual([(r.status, r.body) for r in rs], [(200, b"www a\n"), (200, b"other a\n")])

    def test_request_in_one_byte_records(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            for b in req("/a.txt", host="other.test"):
                c.send(bytes([b]))  # one TLS record each
            r = c.read_response()
            self.assertEqual((r.status, r.body), (200, b"other a\n"))

    def test_routes_by_host(self):
        self.assertServes("other.test", "other.test", body=b"other a\n")
        self.assertServes("example.com", "example.com", body=b"www a\n")
        self.assertServes("www.example.com", "www.example.com", body=b"www a\n")

    def test_connection_close_sends_close_notify(self):
        with tls_connect(self.tls, ctx(), "example.com") as s:
            s.sendall(req("/a.txt", close=True))
            data, how = tls_recv_all(s)
        self.assertEqual(parse_response(data).body, b"www a\n")
        self.assertEqual(how, "close_notify")

    def test_client_close_notify(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            self.assertEqual(c.get("/a.txt").status, 200)
            s = c.sock
            s.settimeout(5)
            raw = s.unwrap()  # sends close_notify, waits for the server's
            self.assertTrue(peer_closed(raw, 5))
            raw.close()
        self.assertAlive()

    def test_header_timeout_over_tls(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(b"GET /a.txt HTTP/1.1\r\nHost: exa")
            t0 = time.monotonic()
            data, how = tls_recv_all(c.sock, HEADER_TIMEOUT + SLACK + 2)
            took = time.monotonic() - t0
        self.assertNotEqual(how, "timeout", "not closed within the header timeout")
        self.assertLess(took, HEADER_TIMEOUT + SLACK)
        self.assertEqual(parse_response(data).status, 408)

    def test_curl(self):
        if shutil.which("curl") is None:
            self.skipTest("no curl")
        r = subprocess.run(["curl", "-sS", "--cacert", CA.root, "--max-time", "10",
                            "--resolve", "other.test:%d:127.0.0.1" % self.tls,
                            "-w", "\n%{http_version} %{ssl_verify_result}",
                            "https://other.test:%d/a.txt" % self.tls],
                           capture_output=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"other a\n\n2 0")  # ALPN h2

    # -- redirect_https ------------------------------------------------------------------

    def test_redirect_https(self):
        for target in ("/a.txt", "/a.txt?x=1&y=%20z", "/no/such/file", "/"):
            with self.subTest(target=target):
                data, _ = exchange(self.plain, req(target, close=True))
                r = parse_response(data)
                self.assertEqual(r.status, 308)
                self.assertEqual(r.header("Location"), "https://example.com" + target)

    def test_redirect_https_keeps_method(self):
        for method in ("HEAD", "POST", "PUT"):
            with self.subTest(method=method):
                raw = req("/a.txt", method=method, close=True,
                          headers=[("Content-Length", "0")] if method != "HEAD" else ())
                data, _ = exchange(self.plain, raw)
                r = parse_response(data, head=method == "HEAD")
                self.assertEqual(r.status, 308)
                self.assertEqual(r.header("Location"), "https://example.com/a.txt")

    def test_redirect_https_keep_alive(self):
        data, _ = exchange(self.plain, req("/a.txt") + req("/b", host="www.example.com")
                           + req("/a.txt", host="other.test", close=True))
        rs = parse_responses(data)
        self.assertEqual([r.status for r in rs], [308, 308, 200])
        self.assertEqual(rs[1].header("Location"), "https://www.example.com/b")
        self.assertEqual(rs[2].body, b"other a\n")

    def test_redirect_https_absolute_form(self):
        data, _ = exchange(self.plain, b"GET http://example.com/a.txt?q=1 HTTP/1.1\r\n"
                           b"Host: example.com\r\nConnection: close\r\n\r\n")
        r = parse_response(data)
        self.assertEqual(r.status, 308)
        self.assertEqual(r.header("Location"), "https://example.com/a.txt?q=1")

    def test_no_redirect_over_tls(self):
        self.assertServes("example.com", "example.com", body=b"www a\n")

    def test_bug_redirect_https_keeps_plain_port(self):
        # The bug: the redirect kept the plain listener's port. A plain listener on a
        # non-default port (Host "example.com:8080") must not send the client to
        # https://example.com:8080/, where no TLS listens: the issue says
        # "Location: https://HOST/target".
        data, _ = exchange(self.plain, req("/a.txt", host="example.com:%d" % self.plain,
                                           close=True))
        r = parse_response(data)
        self.assertEqual(r.status, 308)
        self.assertEqual(r.header("Location"), "https://example.com/a.txt")


class DefaultSettingTest(TlsBase):
    """tls.default names the entry for no SNI and unknown names."""

    @classmethod
    def setUpClass(cls):
        cls.u = class_context(cls, Umbra(tls_config('  default = "other.test",\n'),
                                         files=site_files()))

    def test_default(self):
        for name, want in ((None, "other.test"), ("unknown.test", "other.test"),
                           ("a.b.example.com", "other.test"), ("www.example.com", "example.com"),
                           ("example.com", "example.com"), ("other.test", "other.test")):
            with self.subTest(name=name):
                self.assertEqual(self.names(name)[0], want)


class ProtocolsTest(TlsBase):
    def refused(self, **kw):
        raw = connect(self.tls)
        port = raw.getsockname()[1]
        try:
            with self.assertRaises(ssl.SSLError):
                ctx(**kw).wrap_socket(raw, server_hostname="example.com")
        finally:
            raw.close()
        self.assertEqual(len(self.peer_lines(port)), 1, self.u.log())

    def test_tls13_only(self):
        with Umbra(tls_config('  protocols = { "TLSv1.3" },\n'), files=site_files()) as u:
            self.u = u
            self.refused(minimum=TLS12, maximum=TLS12)
            with tls_connect(self.tls, ctx(), "example.com") as s:
                self.assertEqual(s.version(), "TLSv1.3")
            self.assertServes(minimum=TLS13)
            self.assertTrue(u.alive())

    def test_tls12_only(self):
        with Umbra(tls_config('  protocols = { "TLSv1.2" },\n'), files=site_files()) as u:
            self.u = u
            self.refused(minimum=TLS13, maximum=TLS13)
            with tls_connect(self.tls, ctx(), "example.com") as s:
                self.assertEqual(s.version(), "TLSv1.2")
            self.assertServes(maximum=TLS12)

    def test_ciphers_and_ciphersuites(self):
        with Umbra(tls_config('  ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256",\n'
                              '  ciphersuites = "TLS_CHACHA20_POLY1305_SHA256",\n'),
                   files=site_files()) as u:
            self.u = u
            with tls_connect(self.tls, ctx(maximum=TLS12), "example.com") as s:
                self.assertEqual(s.cipher()[0], "ECDHE-ECDSA-AES128-GCM-SHA256")
            with tls_connect(self.tls, ctx(minimum=TLS13), "example.com") as s:
                self.assertEqual(s.cipher()[0], "TLS_CHACHA20_POLY1305_SHA256")
            c = ctx(maximum=TLS12)
            c.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
            self.refused_with(c)

    def refused_with(self, c):
        raw = connect(self.tls)
        try:
            with self.assertRaises(ssl.SSLError):
                c.wrap_socket(raw, server_hostname="example.com")
        finally:
            raw.close()
        self.assertTrue(self.u.alive())

    def test_bad_settings_refused_at_start(self):
        for extra, why in (('  protocols = { "TLSv1.1" },\n', "TLSv1.1"),
                           ('  ciphers = "NO-SUCH-CIPHER",\n', "NO-SUCH-CIPHER"),
                           ('  default = "nowhere.test",\n', "nowhere.test")):
            with self.subTest(extra=extra):
                with Umbra(tls_config(extra), files=site_files(), expect_fail=True) as u:
                    self.assertNotEqual(u.returncode, 0)
                    self.assertIn(why, u.log())
                    self.assertRegex(u.log(), r"config\.lua:\d+:")


class BadInputTest(TlsBase):
    """Each bad client is closed, logged once, and the server goes on serving."""

    @classmethod
    def setUpClass(cls):
        cls.u = class_context(cls, Umbra(tls_config(), files=site_files(), workers=2))

    @classmethod
    def tearDownClass(cls):
        assert cls.u.alive(), "umbra exited:\n" + cls.u.log()
        rc = cls.u.stop(signal.SIGTERM, 10)
        assert rc == 0, "exit status %r on SIGTERM:\n%s" % (rc, cls.u.log())

    def send_bad(self, raw, timeout=HEADER_TIMEOUT + SLACK + 2):
        """Sends raw on a new connection; returns (bytes read, seconds until closed, local
        port). Fails if the server does not close."""
        with connect(self.tls, timeout) as s:
            port = s.getsockname()[1]
            t0 = time.monotonic()
            try:
                s.sendall(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass
            data = b""
            closed = False
            deadline = t0 + timeout
            while time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                data += chunk
            took = time.monotonic() - t0
        self.assertTrue(closed, "not closed within %.1f s (read %r)" % (timeout, data[:100]))
        return data, took, port

    def assertOneLogLine(self, port):
        lines = self.peer_lines(port)
        self.assertEqual(len(lines), 1, "log lines for port %d:\n%s\nwhole log:\n%s"
                         % (port, "\n".join(lines), self.u.log()))
        return lines[0]

    def test_garbage_bytes(self):
        for raw in (bytes(range(256)) * 4, b"\x00" * 1000, b"\xff" * 10,
                    b"SSH-2.0-OpenSSH_9.2\r\n", b"\x16\x03\x01\xff\xff" + b"\x01" * 100,
                    b"\x16\x03\x01\x00\x04\x01\x00\x00\x00",
                    b"\x15\x03\x03\x00\x02\x02\x28"):  # an alert instead of a hello
            with self.subTest(raw=raw[:20]):
                data, took, port = self.send_bad(raw)
                self.assertLess(took, 1.0)
                self.assertNotIn(b"HTTP/", data)
                self.assertOneLogLine(port)
        self.assertAlive()

    def test_plain_http_to_tls_port(self):
        data, took, port = self.send_bad(req("/a.txt"))
        self.assertLess(took, 1.0)
        self.assertNotIn(b"www a", data)
        line = self.assertOneLogLine(port)
        self.assertIn("http request", line)
        self.assertAlive()

    def stall_check(self, raw, expect_server_hello):
        """Sends raw (part of a handshake) and stalls: closed after the header timeout,
        one log line, and the server serves other clients meanwhile."""
        result = {}

        def stall():
            try:
                result["r"] = self.send_bad(raw)
            except BaseException as e:  # reported below
                result["e"] = e

        t = threading.Thread(target=stall)
        t.start()
        try:
            time.sleep(0.3)
            # Others are served while the staller waits (both workers).
            for _ in range(4):
                self.assertServes()
        finally:
            t.join(HEADER_TIMEOUT + SLACK + 5)
        if "e" in result:
            raise result["e"]
        data, took, port = result["r"]
        self.assertEqual(data[:1] == b"\x16", expect_server_hello, data[:20])
        self.assertGreater(took, HEADER_TIMEOUT - 0.3)
        self.assertLess(took, HEADER_TIMEOUT + SLACK)
        # One "timed out" line for the staller's port (a handshake that timed out was once
        # not logged at all); other lines with that port belong to later clients that
        # reused it.
        wait_until(lambda: [l for l in self.peer_lines(port) if "timed out" in l], 3)
        lines = [l for l in self.peer_lines(port) if "timed out" in l]
        self.assertEqual(len(lines), 1, "log lines for port %d:\n%s" % (port, "\n".join(lines)))

    def test_half_client_hello_closed_after_header_timeout(self):
        hello = client_hello("example.com")
        self.stall_check(hello[:len(hello) // 2], expect_server_hello=False)

    def test_record_header_only_closed_after_header_timeout(self):
        hello = client_hello("example.com")
        self.stall_check(hello[:5], expect_server_hello=False)

    def test_stall_after_server_hello_closed_after_header_timeout(self):
        # A whole ClientHello: the server answers, then the client never finishes.
        self.stall_check(client_hello("example.com"), expect_server_hello=True)

    def test_tls12_stall_after_server_hello_closed_after_header_timeout(self):
        hello = client_hello("example.com", ctx(minimum=TLS12, maximum=TLS12))
        self.stall_check(hello, expect_server_hello=True)

    def test_reset_mid_handshake(self):
        hello = client_hello("example.com")
        for n in (10, len(hello)):
            s = connect(self.tls)
            s.sendall(hello[:n])
            if n == len(hello):
                s.settimeout(3)
                s.recv(1)  # the server's flight has started
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST
        time.sleep(0.3)
        self.assertAlive()

    def test_many_stalled_handshakes(self):
        hello = client_hello("example.com")
        socks = []
        try:
            for i in range(60):
                s = connect(self.tls)
                s.sendall(hello[:(i % 3) * 100 + 50])
                socks.append(s)
            t0 = time.monotonic()
            self.assertServes()
            self.assertLess(time.monotonic() - t0, 1.0)
            closed = [peer_closed(s, HEADER_TIMEOUT + SLACK + 2 - (time.monotonic() - t0))
                      for s in socks]
            self.assertTrue(all(closed), "%d of %d stalled handshakes still open"
                            % (closed.count(False), len(closed)))
        finally:
            for s in socks:
                s.close()
        self.assertAlive()

    def test_client_hello_in_bytes_one_by_one(self):
        # Slow but steady: each byte is a new read for the server.
        hello = client_hello("example.com")
        s = connect(self.tls)
        try:
            for b in hello:
                s.sendall(bytes([b]))
            s.settimeout(5)
            self.assertEqual(s.recv(1), b"\x16")  # the ServerHello
        finally:
            s.close()
        self.assertAlive()


class ReloadTest(TlsBase):
    """Certificates reload when their files change (inotify), and on SIGHUP."""

    def setUp(self):
        self.u = Umbra(tls_config(), files=site_files(), workers=2)
        self.u.__enter__()

    def tearDown(self):
        try:
            self.assertTrue(self.u.alive(), "umbra exited:\n" + self.u.log())
            self.assertEqual(self.u.stop(signal.SIGTERM, 10), 0, self.u.log())
        finally:
            self.u.__exit__(None, None, None)

    def org(self, name="example.com"):
        return self.names(name)[2]

    def wait_org(self, want, timeout=5):
        """Waits until new connections (several: both workers) get the O= want."""
        def all_want():
            return all(self.org() == want for _ in range(4))
        return wait_until(all_want, timeout, interval=0.05)

    def replace(self, name, src, how="rename"):
        """Puts CERTS[src]'s pair in place of NAME.crt/NAME.key (key first)."""
        for ext in ("key", "crt"):
            path = self.u.path("%s.%s" % (name, ext))
            content = CERTS[src]["%s.%s" % (src, ext)]
            if how == "rename":
                tmp = path + ".new"
                with open(tmp, "wb") as f:
                    f.write(content)
                os.rename(tmp, path)
            else:
                with open(path, "wb") as f:
                    f.write(content)

    def check_reload(self, how):
        self.assertIsNone(self.org())
        with TlsClient(self.tls, ctx(), "example.com") as old:
            self.assertEqual(old.get("/a.txt").body, b"www a\n")
            t0 = time.monotonic()
            self.replace("example", "example2", how)
            self.assertTrue(self.wait_org("gen2"), "new certificate not served:\n" + self.u.log())
            took = time.monotonic() - t0
            # The open connection goes on, on the certificate it started with.
            for _ in range(3):
                self.assertEqual(old.get("/a.txt").body, b"www a\n")
            self.assertIsNone(peer_cert_names(old.sock)[2])
        self.assertLess(took, 2.0)
        self.assertTrue(log_lines_with(self.u, "reloaded"), self.u.log())
        # other.test's entry did not change and was not reloaded.
        self.assertFalse([l for l in log_lines_with(self.u, "reloaded") if "other" in l],
                         self.u.log())
        self.assertEqual(self.names("other.test")[0], "other.test")

    def test_reload_on_rename(self):
        self.check_reload("rename")

    def test_reload_on_rewrite_in_place(self):
        self.check_reload("write")

    def test_reload_on_symlink_swap(self):
        # certbot's layout: live/NAME.crt is a link into archive/, re-pointed on renewal.
        def layout(d):
            for sub in ("archive", "live"):
                os.makedirs(os.path.join(d, sub), exist_ok=True)
            for gen, src in (("1", "example"), ("2", "example2")):
                for ext in ("crt", "key"):
                    with open(os.path.join(d, "archive", "example%s.%s" % (gen, ext)),
                              "wb") as f:
                        f.write(CERTS[src]["%s.%s" % (src, ext)])
            for ext in ("crt", "key"):
                os.symlink("../archive/example1." + ext,
                           os.path.join(d, "live", "example." + ext))

        # A server of its own, on the linked files.
        config = tls_config().replace('cert = "example.crt", key = "example.key"',
                                      'cert = "live/example.crt", key = "live/example.key"')
        with Umbra(config, files=site_files(), setup=layout) as u:
            self.u, first = u, self.u
            try:
                self.assertIsNone(self.org())
                with TlsClient(self.tls, ctx(), "example.com") as old:
                    old.get("/a.txt")
                    for ext in ("key", "crt"):
                        link = u.path("live/example." + ext)
                        os.symlink("../archive/example2." + ext, link + ".new")
                        os.rename(link + ".new", link)
                    self.assertTrue(self.wait_org("gen2"), u.log())
                    self.assertEqual(old.get("/a.txt").body, b"www a\n")
            finally:
                self.u = first

    def test_sighup_reload(self):
        with TlsClient(self.tls, ctx(), "example.com") as old:
            old.get("/a.txt")
            self.replace("example", "example2")
            self.u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: log_lines_with(self.u, "SIGHUP: reloaded"), 5),
                            self.u.log())
            self.assertTrue(self.wait_org("gen2"), self.u.log())
            self.assertEqual(old.get("/a.txt").body, b"www a\n")
        self.assertIn("SIGHUP: reloaded 2 certificates", self.u.log())

    def test_sighup_without_change(self):
        with TlsClient(self.tls, ctx(), "example.com") as old:
            old.get("/a.txt")
            for _ in range(3):
                self.u.proc.send_signal(signal.SIGHUP)
                time.sleep(0.1)
            self.assertTrue(wait_until(
                lambda: len(log_lines_with(self.u, "SIGHUP: reloaded")) == 3, 5), self.u.log())
            self.assertEqual(old.get("/a.txt").body, b"www a\n")
        self.assertIsNone(self.org())

    def check_kept(self, marker, timeout=5):
        """The log reports a failed reload (a line with marker and 'keeping') and new
        connections still get the first certificate."""
        self.assertTrue(wait_until(lambda: [l for l in log_lines_with(self.u, marker)
                                            if "keeping" in l], timeout), self.u.log())
        self.assertIsNone(self.org())
        self.assertServes()

    def test_broken_cert_keeps_old(self):
        with TlsClient(self.tls, ctx(), "example.com") as old:
            old.get("/a.txt")
            with open(self.u.path("example.crt"), "wb") as f:
                f.write(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                        b"-----END CERTIFICATE-----\n")
            self.check_kept("example.crt")
            self.assertEqual(old.get("/a.txt").body, b"www a\n")
        # Fixed later: the new pair is picked up.
        self.replace("example", "example2")
        self.assertTrue(self.wait_org("gen2"), self.u.log())

    def test_empty_cert_keeps_old(self):
        open(self.u.path("example.crt"), "wb").close()
        self.check_kept("example.crt")

    def test_mismatched_key_keeps_old(self):
        # A new key without its certificate (renewals that write them one by one, slowly).
        with open(self.u.path("example.key"), "wb") as f:
            f.write(CERTS["example2"]["example2.key"])
        self.check_kept("example.key")
        with open(self.u.path("example.crt"), "wb") as f:
            f.write(CERTS["example2"]["example2.crt"])
        self.assertTrue(self.wait_org("gen2"), self.u.log())

    def test_deleted_cert_keeps_old(self):
        os.unlink(self.u.path("example.crt"))
        self.check_kept("example.crt")
        self.replace("example", "example2")
        self.assertTrue(self.wait_org("gen2"), self.u.log())

    def test_sighup_with_broken_cert_reports(self):
        with open(self.u.path("other.crt"), "wb") as f:
            f.write(b"garbage\n")
        self.check_kept("other.crt")
        self.u.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: log_lines_with(self.u, "SIGHUP: reloaded"), 5))
        line = log_lines_with(self.u, "SIGHUP: reloaded")[0]
        self.assertIn("reloaded 1 certificate;", line)
        self.assertIn("other.crt", line)
        self.assertEqual(self.names("other.test")[0], "other.test")
        self.assertIsNone(self.org())

    def test_resumption_across_reload(self):
        c = ctx()
        with TlsClient(self.tls, c, "example.com") as first:
            first.get("/a.txt")
            session = first.sock.session
        self.replace("example", "example2")
        self.assertTrue(self.wait_org("gen2"), self.u.log())
        with TlsClient(self.tls, c, "example.com", session=session) as again:
            self.assertTrue(again.sock.session_reused)
            self.assertEqual(again.get("/a.txt").body, b"www a\n")

    def test_reload_under_handshake_load(self):
        # New connections all the time while the certificate flips back and forth: every
        # handshake completes with one of the two, and nothing crashes.
        stop = threading.Event()
        seen, errors = set(), []

        def hammer():
            c = ctx()
            while not stop.is_set():
                try:
                    with TlsClient(self.tls, c, "www.example.com") as cl:
                        seen.add(peer_cert_names(cl.sock)[2])
                        if cl.get("/a.txt").status != 200:
                            errors.append("status")
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for i in range(8):
                self.replace("example", "example2" if i % 2 == 0 else "example")
                time.sleep(0.25)
                self.u.proc.send_signal(signal.SIGHUP)
                time.sleep(0.1)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        self.assertEqual(errors, [])
        self.assertEqual(seen, {None, "gen2"})
        self.assertAlive()

    def test_download_survives_reload(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/big.bin"))
            time.sleep(0.2)
            self.replace("example", "example2")
            self.u.proc.send_signal(signal.SIGHUP)
            r = read_slowly(c)
            self.assertEqual(hashlib.sha256(r.body).digest(), hashlib.sha256(BIG).digest())
            self.assertEqual(c.get("/a.txt").body, b"www a\n")


class ProxyOverTlsTest(TlsBase):
    """Upstream routes behind a TLS listener: bodies both ways, X-Forwarded-Proto."""

    @classmethod
    def setUpClass(cls):
        cls.origin = class_context(cls, Origin())
        routes = ('upstreams = { app = { servers = { "%s" } } }\n'
                  'routes = { { path = "/", upstream = "app" } }\n' % cls.origin.url)
        cls.u = class_context(cls, Umbra(tls_config(routes=routes), files=site_files(), workers=2))

    def test_large_response(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            r = c.get("/r?size=3000000", timeout=30)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.body, origin_body(3000000))
            self.assertEqual(c.get("/r?size=10").body, origin_body(10))

    def test_streamed_response(self):
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/r?size=200000&slow=5&piece=10000"))
            r = c.read_response(timeout=30)
            self.assertEqual(r.body, origin_body(200000))

    def test_request_body_and_forwarded_proto(self):
        body = os.urandom(2 << 20)
        with TlsClient(self.tls, ctx(), "example.com") as c:
            c.send(req("/echo", method="POST", headers=[("Content-Length", str(len(body)))])
                   + body)
            r = c.read_response(timeout=30)
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("X-Echo-Body-Length"), str(len(body)))
            self.assertEqual(r.header("X-Echo-Body-Sha256"), hashlib.sha256(body).hexdigest())
            self.assertIn(b"\r\nx-forwarded-proto: https\r\n", r.body.lower())
        data, _ = exchange(self.plain, req("/echo?echo=head", close=True))
        self.assertIn(b"\r\nx-forwarded-proto: http\r\n", parse_response(data).body.lower())


class ShutdownTest(TlsBase):
    def test_sigterm_with_tls_connections_exits_zero(self):
        with Umbra(tls_config(), files=site_files(), workers=2) as u:
            self.u = u
            idle = TlsClient(self.tls, ctx(), "example.com")
            idle.get("/a.txt")
            half = connect(self.tls)
            half.sendall(client_hello("example.com")[:100])
            try:
                t0 = time.monotonic()
                self.assertEqual(u.stop(signal.SIGTERM, 10), 0, u.log())
                self.assertLess(time.monotonic() - t0, 5.5)
            finally:
                idle.close()
                half.close()


if __name__ == "__main__":
    unittest.main()
