"""The PROXY protocol on a listener (issue #29): versions 1 and 2, IPv4 and IPv6,
UNKNOWN and LOCAL, the header's source taken as the client everywhere (the origin's
X-Forwarded-For, req.client_ip, allow lists, the access log); a missing, malformed,
truncated or slow header, or a peer outside proxy_from, closes the connection without an
answer; TLS begins after the header. Against the real binary with two workers.
"""

import os
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Origin, Umbra, admin_port, echoed, http_get, make_cert,  # noqa: E402
                           metric, parse_metrics, parse_response, tls_context, values, wait_until)

V2_SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2(cmd, fam, addrs=b"", tlvs=b""):
    """A v2 header: cmd 0 LOCAL / 1 PROXY; fam as the byte (0x11 TCP over IPv4, 0x21
    TCP over IPv6, 0x00 UNSPEC)."""
    body = addrs + tlvs
    return V2_SIG + bytes([0x20 | cmd, fam]) + struct.pack("!H", len(body)) + body


def v2_inet(src, dst, sport, dport, tlvs=b""):
    return v2(1, 0x11, socket.inet_pton(socket.AF_INET, src) +
              socket.inet_pton(socket.AF_INET, dst) + struct.pack("!HH", sport, dport), tlvs)


def v2_inet6(src, dst, sport, dport):
    return v2(1, 0x21, socket.inet_pton(socket.AF_INET6, src) +
              socket.inet_pton(socket.AF_INET6, dst) + struct.pack("!HH", sport, dport))


GET_IP = b"GET /ip HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
GET_ECHO = b"GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"

CONFIG = """
listen = { { "127.0.0.1:0", proxy_protocol = true },
           { "127.0.0.1:0", proxy_protocol = true, proxy_from = { "10.0.0.0/8", "::1" } },
           { "127.0.0.1:0" },
           { "127.0.0.1:0", proxy_protocol = true, tls = true } }
workers = 2
timeouts = { header = 1 }
admin = { listen = "127.0.0.1:0" }
tls = { { hosts = { "localhost" }, cert = "cert.pem", key = "key.pem" } }
access_log = { path = "access.log" }
upstreams = { app = { servers = { "%s" } } }
routes = {
  { path = "/ip", upstream = "app" },
  { path = "/lan", upstream = "app", allow = { "203.0.113.0/24" } },
  { path = "/", upstream = "app", cache = false },
}
function on_request(req)
  if req.path == "/ip" then
    return umbra.respond(200, req.client_ip .. " " .. tostring(req.client_port))
  end
end
"""


def talk(port, data, pieces=None, pause=0.0, timeout=5):
    """Sends data (in pieces of the given sizes, pause seconds apart), then reads until the
    server closes; (bytes read, seconds until closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    try:
        if pieces:
            at = 0
            for n in pieces:
                s.sendall(data[at:at + n])
                at += n
                time.sleep(pause)
            s.sendall(data[at:])
        else:
            s.sendall(data)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            out += b
        return out, time.monotonic() - t0
    finally:
        s.close()


class ProxyProtocolTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.origin = Origin().__enter__()
        cls.addClassCleanup(cls.origin.__exit__, None, None, None)

        def setup(d):
            make_cert(d, cn="localhost", san="DNS:localhost")
        cls.umbra = Umbra(CONFIG % cls.origin.url, setup=setup, raw=True).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)
        cls.pp, cls.pp_from, cls.plain, cls.pp_tls = cls.umbra.ports[:4]

    def client_of(self, header, port=None):
        out, _ = talk(port or self.pp, header + GET_IP)
        r = parse_response(out)
        self.assertEqual(r.status, 200, out[:300])
        return r.body.decode()

    def test_v1_tcp4_and_tcp6(self):
        self.assertEqual(self.client_of(b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n"),
                         "203.0.113.7 5555")
        self.assertEqual(self.client_of(b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 443\r\n"),
                         "2001:db8::7 65535")

    def test_v1_unknown_keeps_the_peer(self):
        self.assertEqual(self.client_of(b"PROXY UNKNOWN\r\n").split()[0], "127.0.0.1")
        self.assertEqual(
            self.client_of(b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n")
            .split()[0], "127.0.0.1")

    def test_v2_inet_inet6_local_and_tlvs(self):
        self.assertEqual(self.client_of(v2_inet("198.51.100.9", "10.0.0.1", 40000, 80)),
                         "198.51.100.9 40000")
        self.assertEqual(self.client_of(v2_inet6("2001:db8::9", "2001:db8::1", 1234, 80)),
                         "2001:db8::9 1234")
        # LOCAL (a health check of the balancer's own): the connection's peer stands.
        self.assertEqual(self.client_of(v2(0, 0x00)).split()[0], "127.0.0.1")
        # TLVs after the addresses are skipped (ALPN, authority).
        tlvs = b"\x01\x00\x02h2" + b"\x02\x00\x09localhost"
        self.assertEqual(self.client_of(v2_inet("198.51.100.10", "10.0.0.1", 1, 2, tlvs)),
                         "198.51.100.10 1")

    def test_header_in_pieces_and_with_the_request(self):
        h = b"PROXY TCP4 203.0.113.8 10.0.0.1 1000 80\r\n"
        out, _ = talk(self.pp, h + GET_IP, pieces=[3, 10, 5, 20], pause=0.05)
        self.assertEqual(parse_response(out).body, b"203.0.113.8 1000")
        out, _ = talk(self.pp, v2_inet("198.51.100.11", "10.0.0.1", 7, 8) + GET_IP,
                      pieces=[5, 7, 4, 10], pause=0.05)
        self.assertEqual(parse_response(out).body, b"198.51.100.11 7")

    def test_origin_sees_the_header_address(self):
        out, _ = talk(self.pp, b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n" + GET_ECHO)
        r = parse_response(out)
        self.assertEqual(r.status, 200)
        _, fields, _ = echoed(r)
        self.assertEqual(values(fields, "X-Forwarded-For"), ["203.0.113.7"])
        # The access log's line names the header's client.
        path = self.umbra.path("access.log")

        def logged():
            if not os.path.exists(path):
                return ""
            with open(path) as f:
                return f.read()
        self.assertTrue(wait_until(lambda: "203.0.113.7" in logged(), 5), logged())

    def test_allow_list_sees_the_header_address(self):
        ok, _ = talk(self.pp, b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n" +
                     GET_ECHO.replace(b"/echo", b"/lan"))
        self.assertEqual(parse_response(ok).status, 200)
        refused, _ = talk(self.pp, b"PROXY UNKNOWN\r\n" + GET_ECHO.replace(b"/echo", b"/lan"))
        self.assertEqual(parse_response(refused).status, 403)

    def refused(self, data, port=None, **kw):
        before = self.refused_count()
        out, took = talk(port or self.pp, data, **kw)
        self.assertEqual(out, b"", "an answer to a connection without a valid header")
        self.assertTrue(wait_until(lambda: self.refused_count() > before, 5))
        return took

    def refused_count(self):
        _, _, body = http_get(admin_port(self.umbra), "/metrics")
        return metric(parse_metrics(body.decode()), "umbra_proxy_protocol_refused_total") or 0

    def test_missing_or_malformed_header_closes_unanswered(self):
        self.refused(GET_IP)                                                   # no header
        self.refused(b"PROXY TCP4  203.0.113.7 10.0.0.1 5555 80\r\n" + GET_IP)  # two spaces
        self.refused(b"PROXY TCP4 203.0.113.7 10.0.0.1 05555 80\r\n" + GET_IP)  # leading 0
        self.refused(b"PROXY TCP4 2001:db8::1 10.0.0.1 5555 80\r\n" + GET_IP)   # wrong family
        self.refused(b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\n" + GET_IP)     # no CR
        self.refused(b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 65536\r\n" + GET_IP)
        self.refused(b"PROXY " + b"A" * 120 + b"\r\n" + GET_IP)                 # too long
        bad_version = bytearray(v2_inet("198.51.100.9", "10.0.0.1", 1, 2))
        bad_version[12] = 0x31
        self.refused(bytes(bad_version) + GET_IP)
        short = bytearray(v2_inet("198.51.100.9", "10.0.0.1", 1, 2))
        short[15] = 4  # a length that cannot hold IPv4 addresses
        self.refused(bytes(short) + GET_IP)

    def test_truncated_or_slow_header_closes_after_the_header_timeout(self):
        # Half a header, then nothing: closed at timeouts.header (1 s), unanswered.
        s = socket.create_connection(("127.0.0.1", self.pp), timeout=5)
        before = self.refused_count()
        t0 = time.monotonic()
        s.sendall(v2_inet("198.51.100.9", "10.0.0.1", 1, 2)[:20])
        try:
            got = s.recv(100)
        except ConnectionResetError:  # closed with the half header unread
            got = b""
        self.assertEqual(got, b"")
        took = time.monotonic() - t0
        s.close()
        self.assertGreater(took, 0.8)
        self.assertLess(took, 3.5)
        self.assertTrue(wait_until(lambda: self.refused_count() > before, 5))
        # A header that arrives whole but closes early: closed, nothing answered.
        self.refused(b"PROXY TCP4 203.0.113.7")

    def test_peer_outside_proxy_from_is_closed_at_once(self):
        took = self.refused(b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n" + GET_IP,
                            port=self.pp_from)
        self.assertLess(took, 1.0)  # not waiting for a header timeout

    def test_plain_listener_takes_no_header(self):
        out, _ = talk(self.plain, GET_IP)
        self.assertEqual(parse_response(out).body.split()[0], b"127.0.0.1")
        out, _ = talk(self.plain, b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n" + GET_IP)
        self.assertEqual(parse_response(out).status, 400)

    def test_tls_begins_after_the_header(self):
        ctx = tls_context()
        raw = socket.create_connection(("127.0.0.1", self.pp_tls), timeout=5)
        raw.sendall(v2_inet6("2001:db8::42", "2001:db8::1", 4242, 443))
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(GET_IP)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        self.assertEqual(parse_response(out).body, b"2001:db8::42 4242")


BACK = """
listen = { { "127.0.0.1:0", proxy_protocol = true } }
workers = 2
routes = { { path = "/" } }
function on_request(req)
  return umbra.respond(200, req.client_ip .. " " .. tostring(req.client_port))
end
"""

FRONT = """
listen = { { "127.0.0.1:0", proxy_protocol = true } }
workers = 2
upstreams = { one = { servers = { "http://127.0.0.1:%d" }, send_proxy = "v1" },
              two = { servers = { "http://127.0.0.1:%d" }, send_proxy = "v2" },
              none = { servers = { "http://127.0.0.1:%d" } },
              probed = { servers = { "http://127.0.0.1:%d" }, send_proxy = "v2",
                         health = { path = "/", interval = 0.1, fails = 1 } } }
admin = { listen = "127.0.0.1:0" }
routes = { { path = "/v1/", upstream = "one", cache = false },
           { path = "/v2/", upstream = "two", cache = false },
           { path = "/none/", upstream = "none", cache = false } }
"""


class SendProxyTest(unittest.TestCase):
    """upstreams.NAME.send_proxy: a second Umbra with a proxy_protocol listener, behind
    this one, sees each client as the first one saw it."""

    @classmethod
    def setUpClass(cls):
        cls.back = Umbra(BACK, raw=True).__enter__()
        cls.addClassCleanup(cls.back.__exit__, None, None, None)
        p = cls.back.port
        cls.front = Umbra(FRONT % (p, p, p, p), raw=True).__enter__()
        cls.addClassCleanup(cls.front.__exit__, None, None, None)

    def through(self, version, client, port):
        v6 = ":" in client
        hdr = "PROXY TCP%d %s %s %d 80\r\n" % (6 if v6 else 4, client,
                                                "2001:db8::1" if v6 else "10.0.0.1", port)
        out, _ = talk(self.front.port, hdr.encode() +
                      ("GET /%s/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n" %
                       version).encode())
        r = parse_response(out)
        self.assertEqual(r.status, 200, out[:300])
        return r.body.decode()

    def test_v1_and_v2_carry_the_client(self):
        self.assertEqual(self.through("v1", "203.0.113.5", 1111), "203.0.113.5 1111")
        self.assertEqual(self.through("v2", "203.0.113.6", 2222), "203.0.113.6 2222")
        self.assertEqual(self.through("v1", "2001:db8::5", 3333), "2001:db8::5 3333")
        self.assertEqual(self.through("v2", "2001:db8::6", 4444), "2001:db8::6 4444")

    def test_each_client_has_its_own_connection(self):
        # Kept-alive connections would carry the first client's header for the next one.
        for i in range(6):
            ip = "198.51.100.%d" % (i + 1)
            self.assertEqual(self.through("v2", ip, 5000 + i), "%s %d" % (ip, 5000 + i))

    def test_health_probes_send_the_header(self):
        # The back refuses a connection without a header: a probe without one would take
        # the server out (fails = 1), and a probe that sends one keeps it up.
        time.sleep(0.6)
        _, _, body = http_get(admin_port(self.front), "/metrics")
        up = metric(parse_metrics(body.decode()), "umbra_upstream_server_up", upstream="probed",
                    server="http://127.0.0.1:%d" % self.back.port)
        self.assertEqual(up, 1, body.decode()[-2000:])
        self.assertNotIn("is down", self.front.log())

    def test_without_send_proxy_the_back_refuses(self):
        out, _ = talk(self.front.port, b"PROXY TCP4 203.0.113.5 10.0.0.1 1 80\r\n"
                      b"GET /none/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        self.assertEqual(parse_response(out).status, 502)


class ProxyConfigTest(unittest.TestCase):

    def test_send_proxy_needs_the_builtin_client(self):
        u = Umbra('upstreams = { app = { servers = { "https://127.0.0.1:1" },\n'
                  '  send_proxy = "v2" } }\nroutes = { { path = "/", upstream = "app" } }\n',
                  expect_fail=True)
        with u:
            pass
        self.assertNotEqual(u.returncode, 0)
        self.assertIn("upstreams.app.send_proxy: needs http:// servers at IP addresses", u.log())

    def test_proxy_from_without_proxy_protocol_names_the_line(self):
        u = Umbra('listen = {\n  { "127.0.0.1:0", proxy_from = { "10.0.0.0/8" } } }\n',
                  raw=True, expect_fail=True)
        with u:
            pass
        self.assertNotEqual(u.returncode, 0)
        self.assertIn("config.lua:2:", u.log())
        self.assertIn("proxy_from needs proxy_protocol = true", u.log())

    def test_bad_network_names_the_line(self):
        u = Umbra('listen = {\n  { "127.0.0.1:0", proxy_protocol = true,\n'
                  '    proxy_from = { "10.0.0.300/8" } } }\n', raw=True, expect_fail=True)
        with u:
            pass
        self.assertNotEqual(u.returncode, 0)
        self.assertIn("listen.1.proxy_from.1", u.log())


if __name__ == "__main__":
    unittest.main()
