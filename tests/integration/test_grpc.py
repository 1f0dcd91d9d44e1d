"""gRPC through Umbra (issue 31): Debian's python3-grpcio as server and client (generic
handlers, bytes in and out, no generated code) with an h2 upstream between them. Unary,
client streaming, server streaming (10,000 messages), bidirectional streaming in lock step
(each answer before the next request: nothing waits for the whole request), a status with
details carried in trailers, deadlines (grpc-timeout) enforced by Umbra itself before and
after the answer began, a server that is down (UNAVAILABLE), a rate limit
(RESOURCE_EXHAUSTED), and calls never cached. gRPC-Web (grpc_web = true): binary and
text (base64) frames from HTTP/1.1 and HTTP/2 clients round-tripped against the same
server.

python3-grpcio and python3-h2 belong to Debian's /usr/bin/python3: when CTest found
another interpreter, this file runs itself again under that one.
"""

import base64
import http.client
import os
import queue
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import need_debian_python  # noqa: E402

need_debian_python("grpc", "h2.config")  # h2_call needs h2
import grpc  # noqa: E402
from concurrent import futures  # noqa: E402

from umbra_harness import Umbra, closed_port, h2_call  # noqa: E402


def ident(b):
    return b


class GrpcServer:
    """A gRPC server on 127.0.0.1 (service t.S) counting its calls in .calls; .cancelled
    counts the calls it saw cancelled (their client, here Umbra, gave up on them)."""

    def __init__(self):
        self.calls = 0
        self.cancelled = 0
        self.lock = threading.Lock()
        h = grpc.method_handlers_generic_handler("t.S", {
            "Unary": grpc.unary_unary_rpc_method_handler(self.unary, ident, ident),
            "Count": grpc.stream_unary_rpc_method_handler(self.count, ident, ident),
            "Many": grpc.unary_stream_rpc_method_handler(self.many, ident, ident),
            "Echo": grpc.stream_stream_rpc_method_handler(self.echo, ident, ident),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail, ident, ident),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow, ident, ident),
            "Stall": grpc.unary_stream_rpc_method_handler(self.stall, ident, ident),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((h,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _count(self, ctx):
        with self.lock:
            self.calls += 1

    def _watch_cancel(self, ctx, seconds):
        """Waits up to seconds; True when the call was cancelled meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not ctx.is_active():
                with self.lock:
                    self.cancelled += 1
                return True
            time.sleep(0.02)
        return False

    def unary(self, req, ctx):
        self._count(ctx)
        ctx.set_trailing_metadata((("x-trailer", "unary"),))
        return b"echo:" + req

    def count(self, it, ctx):
        self._count(ctx)
        n = b = 0
        for m in it:
            n += 1
            b += len(m)
        return b"%d messages, %d bytes" % (n, b)

    def many(self, req, ctx):
        # "N" or "N:PAD": N messages, each with PAD dots after it.
        self._count(ctx)
        n, _, pad = req.partition(b":")
        for i in range(int(n)):
            yield b"message %d" % i + b"." * int(pad or b"0")

    def echo(self, it, ctx):
        self._count(ctx)
        for m in it:
            yield b"re:" + m

    def fail(self, req, ctx):
        self._count(ctx)
        ctx.set_trailing_metadata((("x-detail", "looked everywhere"),
                                   ("grpc-status-details-bin", b"\x08\x05\x12\x03why")))
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing: " + req.decode())

    def slow(self, req, ctx):
        self._count(ctx)
        self._watch_cancel(ctx, 5)
        return b"late"

    def stall(self, req, ctx):
        self._count(ctx)
        yield b"first"
        self._watch_cancel(ctx, 5)

    def close(self):
        self.server.stop(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def conf(port, extra="", route_extra=", cache = false"):
    return """
upstreams = { g = { servers = { "http://127.0.0.1:%d" }, protocol = "h2", timeout = 10 } }
routes = { { path = "/", upstream = "g" %s } }
%s
""" % (port, route_extra, extra)


def grpc_frame(payload):
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


GRPC_HEADERS = [("content-type", "application/grpc"), ("te", "trailers")]


class GrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = GrpcServer()
        cls.umbra = Umbra(conf(cls.srv.port), workers=1)
        cls.umbra.__enter__()
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.umbra.port)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.umbra.__exit__(None, None, None)
        cls.srv.close()

    def call(self, kind, name):
        return getattr(self.channel, kind)("/t.S/" + name, request_serializer=ident,
                                           response_deserializer=ident)

    def test_unary_with_its_trailers(self):
        reply, call = self.call("unary_unary", "Unary").with_call(b"hello", timeout=10)
        self.assertEqual(reply, b"echo:hello")
        self.assertEqual(call.code(), grpc.StatusCode.OK)
        self.assertIn(("x-trailer", "unary"), tuple(call.trailing_metadata()))

    def test_client_streaming(self):
        reply = self.call("stream_unary", "Count")(iter([b"x" * 100] * 1000), timeout=20)
        self.assertEqual(reply, b"1000 messages, 100000 bytes")

    def test_server_streaming_10000_messages(self):
        got = list(self.call("unary_stream", "Many")(b"10000", timeout=60))
        self.assertEqual(len(got), 10000)
        self.assertEqual(got[0], b"message 0")
        self.assertEqual(got[-1], b"message 9999")

    def test_bidirectional_in_lock_step(self):
        # Each request is sent only once the answer to the one before arrived: a proxy
        # that waited for the request's end (or held whole messages) would stall here.
        q = queue.Queue()

        def requests():
            for i in range(50):
                yield b"ping %d" % i
                if q.get(timeout=10) is None:
                    return

        answers = []
        for m in self.call("stream_stream", "Echo")(requests(), timeout=30):
            answers.append(m)
            q.put(m)
        self.assertEqual(answers, [b"re:ping %d" % i for i in range(50)])

    def test_a_status_with_details_in_trailers(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.call("unary_unary", "Fail")(b"key-7", timeout=10)
        e = cm.exception
        self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(e.details(), "no such thing: key-7")
        md = dict(e.trailing_metadata())
        self.assertEqual(md.get("x-detail"), "looked everywhere")
        self.assertEqual(md.get("grpc-status-details-bin"), b"\x08\x05\x12\x03why")

    def test_a_client_deadline(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.call("unary_unary", "Slow")(b"", timeout=0.5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_umbra_enforces_grpc_timeout_before_the_answer(self):
        # A client that does not time out itself: Umbra does, at grpc-timeout, with a
        # trailers-only answer, and resets the server's stream.
        before = self.srv.cancelled
        t0 = time.monotonic()
        st, head, body, tail = h2_call(self.umbra.port, "/t.S/Slow", body=grpc_frame(b""),
                                       headers=GRPC_HEADERS + [("grpc-timeout", "400m")])
        took = time.monotonic() - t0
        self.assertEqual(st, 200)
        self.assertEqual(head.get("grpc-status"), "4")  # DEADLINE_EXCEEDED, trailers-only
        self.assertEqual(head.get("content-type"), "application/grpc")
        self.assertEqual(body, b"")
        self.assertGreaterEqual(took, 0.35)
        self.assertLess(took, 3)
        deadline = time.monotonic() + 5
        while self.srv.cancelled == before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreater(self.srv.cancelled, before, "the server's call was not cancelled")

    def test_umbra_enforces_grpc_timeout_after_the_answer_began(self):
        st, head, body, tail = h2_call(self.umbra.port, "/t.S/Stall", body=grpc_frame(b""),
                                       headers=GRPC_HEADERS + [("grpc-timeout", "500m")])
        self.assertEqual(st, 200)
        self.assertEqual(body, grpc_frame(b"first"))
        self.assertIn(("grpc-status", "4"), tail)

    def test_calls_are_never_cached(self):
        with Umbra(conf(self.srv.port, route_extra=", cache = true"), workers=1) as u, \
                grpc.insecure_channel("127.0.0.1:%d" % u.port) as ch:
            before = self.srv.calls
            f = ch.unary_unary("/t.S/Unary", request_serializer=ident, response_deserializer=ident)
            self.assertEqual(f(b"a", timeout=10), b"echo:a")
            self.assertEqual(f(b"a", timeout=10), b"echo:a")
            self.assertEqual(self.srv.calls - before, 2)


class GrpcErrorsTest(unittest.TestCase):
    """Calls Umbra fails itself get gRPC's answer, not an HTML page."""

    def unary(self, port, timeout=10):
        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
            f = ch.unary_unary("/t.S/Unary", request_serializer=ident, response_deserializer=ident)
            with self.assertRaises(grpc.RpcError) as cm:
                f(b"x", timeout=timeout)
            return cm.exception

    def test_a_server_that_is_down_gives_unavailable(self):
        with Umbra(conf(closed_port()), workers=1) as u:
            e = self.unary(u.port)
            self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)
            # Trailers-only: one HEADERS frame with the status, no body, no length.
            st, head, body, tail = h2_call(u.port, "/t.S/Unary", body=grpc_frame(b"x"),
                                           headers=GRPC_HEADERS)
            self.assertEqual((st, head.get("grpc-status"), body, tail), (200, "14", b"", []))
            self.assertNotIn("content-length", head)
            self.assertIn("grpc-message", head)

    def test_a_rate_limit_gives_resource_exhausted(self):
        with GrpcServer() as srv, Umbra(conf(srv.port, route_extra=", cache = false, rate_limit = \"one\"",
                                             extra="rate_limits = { one = { rate = 0.1, burst = 1 } }"),
                                        workers=1) as u:
            with grpc.insecure_channel("127.0.0.1:%d" % u.port) as ch:
                f = ch.unary_unary("/t.S/Unary", request_serializer=ident,
                                   response_deserializer=ident)
                self.assertEqual(f(b"1", timeout=10), b"echo:1")
            e = self.unary(u.port)
            self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(srv.calls, 1)

    def test_a_plain_request_still_gets_html_errors(self):
        # Only gRPC calls are answered the gRPC way.
        with Umbra(conf(closed_port()), workers=1) as u:
            st, head, body, tail = h2_call(u.port, "/x", method="GET")
            self.assertEqual(st, 502)
            self.assertNotIn("grpc-status", head)


def grpc_web_frames(data):
    """The frames of a gRPC-Web body: (messages, trailers as a dict)."""
    msgs, trailers, pos = [], {}, 0
    while pos < len(data):
        flag, n = data[pos], int.from_bytes(data[pos + 1:pos + 5], "big")
        payload = data[pos + 5:pos + 5 + n]
        pos += 5 + n
        if flag & 0x80:
            for line in payload.decode().split("\r\n"):
                if line:
                    k, _, v = line.partition(":")
                    trailers[k.strip()] = v.strip()
        else:
            msgs.append(payload)
    return msgs, trailers


def b64_pieces(text):
    """Decodes base64 made of padded pieces one after another (gRPC-Web's -text)."""
    out, text = b"", text.strip()
    for i in range(0, len(text), 4):
        out += base64.b64decode(text[i:i + 4])
    return out


def grpc_web_h1(port, path, body, text=False, timeout=10):
    """A gRPC-Web call over HTTP/1.1: (status, content-type, messages, trailers)."""
    ctype = "application/grpc-web-text" if text else "application/grpc-web+proto"
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=base64.b64encode(body) if text else body,
              headers={"Content-Type": ctype, "X-Grpc-Web": "1"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if text:
        data = b64_pieces(data)
    msgs, trailers = grpc_web_frames(data)
    if not trailers and r.getheader("grpc-status"):
        # Trailers-only: the status and its metadata in the head.
        trailers = {k.lower(): v for k, v in r.getheaders()}
    return r.status, r.getheader("content-type"), msgs, trailers


class GrpcWebTest(unittest.TestCase):
    """gRPC-Web on a route with grpc_web = true: binary and text frames, from HTTP/1.1 and
    HTTP/2 clients, to the same gRPC server."""

    @classmethod
    def setUpClass(cls):
        cls.srv = GrpcServer()
        cls.umbra = Umbra(conf(cls.srv.port, route_extra=", cache = false, grpc_web = true"),
                          workers=1)
        cls.umbra.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.umbra.__exit__(None, None, None)
        cls.srv.close()

    def test_binary_unary_over_http1(self):
        st, ct, msgs, tr = grpc_web_h1(self.umbra.port, "/t.S/Unary", grpc_frame(b"web"))
        self.assertEqual(st, 200)
        self.assertTrue(ct.startswith("application/grpc-web"), ct)
        self.assertFalse(ct.startswith("application/grpc-web-text"), ct)
        self.assertEqual(msgs, [b"echo:web"])
        self.assertEqual(tr.get("grpc-status"), "0")
        self.assertEqual(tr.get("x-trailer"), "unary")

    def test_text_server_streaming_over_http1(self):
        st, ct, msgs, tr = grpc_web_h1(self.umbra.port, "/t.S/Many", grpc_frame(b"500"), text=True)
        self.assertEqual(st, 200)
        self.assertTrue(ct.startswith("application/grpc-web-text"), ct)
        self.assertEqual(msgs, [b"message %d" % i for i in range(500)])
        self.assertEqual(tr.get("grpc-status"), "0")

    def test_binary_server_streaming_10000_messages_to_a_slow_reader(self):
        # The client reads only after a pause: Umbra's output fills and the layer must
        # hold the server back, then go on.
        c = http.client.HTTPConnection("127.0.0.1", self.umbra.port, timeout=30)
        c.request("POST", "/t.S/Many", body=grpc_frame(b"10000:1000"),
                  headers={"Content-Type": "application/grpc-web"})
        time.sleep(1)
        r = c.getresponse()
        msgs, tr = grpc_web_frames(r.read())
        c.close()
        self.assertEqual(len(msgs), 10000)  # 10 MB
        self.assertEqual(msgs[-1], b"message 9999" + b"." * 1000)
        self.assertEqual(tr.get("grpc-status"), "0")

    def test_text_and_binary_over_http2(self):
        for text in (False, True):
            body = grpc_frame(b"h2")
            st, head, data, tail = h2_call(
                self.umbra.port, "/t.S/Unary", body=base64.b64encode(body) if text else body,
                headers=[("content-type", "application/grpc-web-text" if text else
                          "application/grpc-web")])
            self.assertEqual(st, 200)
            msgs, tr = grpc_web_frames(b64_pieces(data) if text else data)
            self.assertEqual(msgs, [b"echo:h2"], text)
            self.assertEqual(tr.get("grpc-status"), "0", text)
            self.assertEqual(tail, [], "the trailers travel in the body")

    def test_a_status_with_details(self):
        st, ct, msgs, tr = grpc_web_h1(self.umbra.port, "/t.S/Fail", grpc_frame(b"k9"))
        self.assertEqual(st, 200)
        self.assertEqual(tr.get("grpc-status"), "5")
        self.assertEqual(tr.get("grpc-message"), "no such thing: k9")
        self.assertEqual(tr.get("x-detail"), "looked everywhere")

    def test_a_server_that_is_down(self):
        with Umbra(conf(closed_port(), route_extra=", cache = false, grpc_web = true"),
                   workers=1) as u:
            st, ct, msgs, tr = grpc_web_h1(u.port, "/t.S/Unary", grpc_frame(b"x"), text=True)
            self.assertEqual((st, tr.get("grpc-status"), msgs), (200, "14", []))
            self.assertTrue(ct.startswith("application/grpc-web-text"), ct)

    def test_global_setting_and_a_route_that_turns_it_off(self):
        # grpc_web = true at the top turns the layer on for every route; a route's own
        # grpc_web = false turns it off there: its gRPC-Web request passes as it came (an
        # HTTP error of the dead server, not a gRPC-Web answer).
        config = """
grpc_web = true
upstreams = { g = { servers = { "http://127.0.0.1:%d" }, protocol = "h2", timeout = 10 } }
routes = { { path = "/off/", upstream = "g", cache = false, grpc_web = false },
           { path = "/", upstream = "g", cache = false } }
""" % closed_port()
        with Umbra(config, workers=1) as u:
            st, ct, msgs, tr = grpc_web_h1(u.port, "/t.S/Unary", grpc_frame(b"x"))
            self.assertEqual((st, tr.get("grpc-status"), msgs), (200, "14", []))
            self.assertTrue(ct.startswith("application/grpc-web"), ct)
            st, ct, msgs, tr = grpc_web_h1(u.port, "/off/t.S/Unary", grpc_frame(b"x"))
            self.assertEqual(st, 502)
            self.assertIsNone(tr.get("grpc-status"))

    def test_other_requests_pass_untouched(self):
        with Umbra(conf(closed_port(), route_extra=", cache = false, grpc_web = true"),
                   workers=1) as u:
            c = http.client.HTTPConnection("127.0.0.1", u.port, timeout=10)
            c.request("GET", "/page")
            r = c.getresponse()
            r.read()
            c.close()
            self.assertEqual(r.status, 502)


if __name__ == "__main__":
    unittest.main()
