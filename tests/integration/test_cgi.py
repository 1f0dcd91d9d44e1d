"""The CGI origin (RFC 3875): scripts in shell and Python run by a real umbra, asked by real
clients. Every meta-variable, request bodies, the kinds of answer (document, local and
client redirect, Status:, nph-), streaming and backpressure, and the limits: timeout
(504, child killed), crashes and garbage (502), max_children (503), paths that try to
leave the directory, and slow scripts that must not delay anyone else."""

import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Client, Umbra, class_context, connect, fetch, fetch_req,  # noqa: E402
                           make_cert, parse_response, req, tls_connect, tls_context,
                           tls_recv_all, wait_until)

PY = sys.executable

SH_ENV = r"""#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
env | LC_ALL=C sort
for a in "$@"; do printf 'ARG=%s\n' "$a"; done
"""

PY_ENV = """#!%s
import json, os, sys
body = json.dumps({"env": dict(os.environ), "argv": sys.argv[1:], "cwd": os.getcwd()})
sys.stdout.write("Content-Type: application/json\\n\\n" + body)
""" % PY

PY_POST = """#!%s
import sys
data = sys.stdin.buffer.read()
sys.stderr.write("post.py read %%d bytes\\n" %% len(data))
sys.stdout.write("Status: 201 Made\\r\\nContent-Type: application/octet-stream\\r\\nX-Len: %%d\\r\\n\\r\\n" %% len(data))
sys.stdout.flush()
sys.stdout.buffer.write(data)
""" % PY

# Writes its pid, then more than any socket and pipe can hold, counting as it goes; the
# count file shows how far it got while the client did not read.
PY_BIG = """#!%s
import os, sys
chunk = b"x" * 65536
with open(os.environ["COUNT_FILE"] if "COUNT_FILE" in os.environ else "../big.count", "w") as f:
    sys.stdout.buffer.write(b"Content-Type: application/octet-stream\\n\\n")
    for i in range(512):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        f.seek(0)
        f.write("%%d\\n" %% (i + 1))
        f.flush()
""" % PY

PY_CRASH = """#!%s
import os, signal
os.kill(os.getpid(), signal.SIGSEGV)
""" % PY

FILES = {
    "cgi-bin/env.sh": SH_ENV,
    "cgi-bin/env.py": PY_ENV,
    "cgi-bin/post.py": PY_POST,
    "cgi-bin/big.py": PY_BIG,
    "cgi-bin/crash.py": PY_CRASH,
    "cgi-bin/sub/deep.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\ndeep %s\\n' \"$PATH_INFO\"\n",
    "cgi-bin/empty.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\n'\n",
    "cgi-bin/length.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\nContent-Length: 6\\n\\nsix!\\n\\nextra bytes that are not sent'\n",
    "cgi-bin/local.sh": "#!/bin/sh\nprintf 'Location: /cgi-bin/env.py/after?from+redirect\\n\\n'\n",
    "cgi-bin/loop.sh": "#!/bin/sh\nprintf 'Location: /cgi-bin/loop.sh\\n\\n'\n",
    "cgi-bin/local_static.sh": "#!/bin/sh\nprintf 'Location: /static/a.txt\\n\\n'\n",
    "cgi-bin/client.sh": "#!/bin/sh\nprintf 'Location: http://example.com/elsewhere?x=1\\n\\n'\n",
    "cgi-bin/client_status.sh": "#!/bin/sh\nprintf 'Status: 301 Gone Over There\\nLocation: https://example.org/\\nContent-Type: text/html\\n\\n<a href=\"https://example.org/\">moved</a>\\n'\n",
    "cgi-bin/status.sh": "#!/bin/sh\nprintf \"Status: 418 I'm a teapot\\nContent-Type: text/plain\\nX-Script: yes\\n\\nshort and stout\\n\"\n",
    "cgi-bin/nph-raw.sh": "#!/bin/sh\nprintf 'HTTP/1.1 299 Custom Reason\\r\\nContent-Type: text/x-nph\\r\\nX-Nph: passed\\r\\n\\r\\nraw body\\n'\n",
    "cgi-bin/slow.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nfirst\\n'\nsleep 1\nprintf 'second\\n'\n",
    "cgi-bin/sleep.sh": "#!/bin/sh\nsleep 1\nprintf 'Content-Type: text/plain\\n\\nslept\\n'\n",
    "cgi-bin/endless.sh": "#!/bin/sh\necho $$ > ../endless.pid\nsleep 1000 &\necho $! > ../endless.child\nwait\n",
    "cgi-bin/endless_body.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nstarted\\n'\nwhile :; do sleep 1; done\n",
    "cgi-bin/garbage.sh": "#!/bin/sh\nprintf 'this is not a header line\\n\\nat all\\n'\n",
    "cgi-bin/binary.sh": "#!/bin/sh\nhead -c 3000 /dev/urandom\n",
    "cgi-bin/silent.sh": "#!/bin/sh\nexit 0\n",
    "cgi-bin/endless_head.sh": "#!/bin/sh\necho $$ > ../endless_head.pid\nwhile :; do printf 'X-Field: 0123456789012345678901234567890123456789\\n'; done\n",
    "cgi-bin/nointerp.sh": "#!/nonexistent/interpreter\nprint\n",
    "cgi-bin/headonly.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\nX-Half: 1\\n'\n",
    "cgi-bin/stderr.sh": "#!/bin/sh\necho 'a line on stderr from the script' >&2\nprintf 'Content-Type: text/plain\\n\\nok\\n'\n",
    "cgi-bin/cached.sh": "#!/bin/sh\nn=$(cat ../count 2>/dev/null || echo 0); n=$((n+1)); echo $n > ../count\nprintf 'Content-Type: text/plain\\nCache-Control: max-age=60\\n\\nrun %s\\n' $n\n",
    "cgi-bin/notexec.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nshould not run\\n'\n",
    "outside.sh": "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nOUTSIDE-RAN\\n'\n",
    "www/a.txt": "static a\n",
}

EXEC = [k for k in FILES if k.endswith((".sh", ".py")) and not k.endswith("notexec.sh")]

CONFIG = """
cgi = { max_children = 64, timeout = 3 }
routes = {
  { path = "/cgi-bin/", cgi = "cgi-bin" },
  { path = "/cached/", cgi = "cgi-bin", cache = true },
  { path = "/static/", root = "www" },
}
"""


def setup_scripts(d):
    for k in EXEC:
        os.chmod(os.path.join(d, k), 0o755)
    os.symlink(os.path.join(d, "outside.sh"), os.path.join(d, "cgi-bin/link_out.sh"))
    os.symlink("../outside.sh", os.path.join(d, "cgi-bin/link_out_rel.sh"))
    os.symlink("env.sh", os.path.join(d, "cgi-bin/link_in.sh"))


def env_lines(body):
    out = {}
    args = []
    for line in body.decode().splitlines():
        k, _, v = line.partition("=")
        if k == "ARG":
            args.append(v)
        else:
            out[k] = v
    return out, args


def zombies_of(pid):
    """The zombie children of pid, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == pid:
            found.append(int(name))
    return found


def read_file(path):
    with open(path) as f:
        return f.read()


def pid_gone(pid):
    """True when pid no longer exists (killed and reaped), or is another program now."""
    return not os.path.exists("/proc/%d" % pid)


class CgiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra(CONFIG, files=FILES, setup=setup_scripts))
        cls.port = cls.umbra.port

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def get(self, target, method="GET", headers=(), body=None, timeout=10, host="umbra.test"):
        return fetch_req(self.port, target, method, headers, body, host=host, timeout=timeout)

    # -- meta-variables ------------------------------------------------------------

    def test_every_variable_shell(self):
        r = self.get("/cgi-bin/env.sh/extra/path?a=1&b=%20x",
                     headers=[("X-Custom", "one"), ("X-Custom", "two"),
                              ("Authorization", "Basic dXNlcjpwYXNz"),
                              ("Proxy-Authorization", "Basic c2VjcmV0"),
                              ("Proxy", "http://evil.example/"),
                              ("X-Under_score", "dropped"),
                              ("Accept-Language", "fr")],
                     host="site.test:8088")
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(r.header("Content-Type"), "text/plain")
        env, args = env_lines(r.body)
        self.assertEqual(env["GATEWAY_INTERFACE"], "CGI/1.1")
        self.assertTrue(env["SERVER_SOFTWARE"].startswith("umbra/"))
        self.assertEqual(env["SERVER_NAME"], "site.test")
        self.assertEqual(env["SERVER_PORT"], "8088")
        self.assertEqual(env["SERVER_PROTOCOL"], "HTTP/1.1")
        self.assertEqual(env["REQUEST_METHOD"], "GET")
        self.assertEqual(env["SCRIPT_NAME"], "/cgi-bin/env.sh")
        self.assertEqual(env["PATH_INFO"], "/extra/path")
        self.assertEqual(env["PATH_TRANSLATED"],
                         os.path.realpath(self.umbra.path("cgi-bin")) + "/extra/path")
        self.assertEqual(env["QUERY_STRING"], "a=1&b=%20x")
        self.assertEqual(env["REMOTE_ADDR"], "127.0.0.1")
        self.assertTrue(env["REMOTE_PORT"].isdigit() and int(env["REMOTE_PORT"]) > 0)
        self.assertEqual(env["AUTH_TYPE"], "Basic")
        self.assertEqual(env["HTTP_X_CUSTOM"], "one, two")
        self.assertEqual(env["HTTP_ACCEPT_LANGUAGE"], "fr")
        self.assertEqual(env["HTTP_HOST"], "site.test:8088")
        for hidden in ("HTTP_AUTHORIZATION", "HTTP_PROXY_AUTHORIZATION", "HTTP_PROXY",
                       "HTTP_X_UNDER_SCORE", "CONTENT_LENGTH", "CONTENT_TYPE", "HTTPS"):
            self.assertNotIn(hidden, env)
        self.assertEqual(args, [], "a query with '=' gives no arguments")

    def test_every_variable_python_post(self):
        body = b"name=value&x=y"
        r = self.get("/cgi-bin/env.py", method="POST", body=body,
                     headers=[("Content-Type", "application/x-www-form-urlencoded")])
        self.assertEqual(r.status, 200, r.body)
        got = json.loads(r.body)
        env = got["env"]
        self.assertEqual(env["REQUEST_METHOD"], "POST")
        self.assertEqual(env["CONTENT_LENGTH"], str(len(body)))
        self.assertEqual(env["CONTENT_TYPE"], "application/x-www-form-urlencoded")
        self.assertEqual(env["QUERY_STRING"], "")
        self.assertEqual(env["PATH_INFO"], "")
        self.assertNotIn("PATH_TRANSLATED", env)
        self.assertEqual(env["SERVER_NAME"], "umbra.test")
        self.assertEqual(env["SERVER_PORT"], "80")
        # The script runs in its own folder.
        self.assertEqual(got["cwd"], os.path.realpath(self.umbra.path("cgi-bin")))

    def test_search_query_gives_arguments(self):
        r = self.get("/cgi-bin/env.sh?foo+bar+--me%202")
        env, args = env_lines(r.body)
        self.assertEqual(args, ["foo", "bar", "--me 2"])
        self.assertEqual(env["QUERY_STRING"], "foo+bar+--me%202")
        r = self.get("/cgi-bin/env.py?one+%2Dtwo")
        self.assertEqual(json.loads(r.body)["argv"], ["one", "-two"])

    def test_https_variable_on_tls(self):
        def certs(d):
            setup_scripts(d)
            make_cert(d, cn="localhost", san="DNS:localhost")
        cfg = """
listen = { { "127.0.0.1:0", tls = true } }
tls = { { hosts = { "localhost" }, cert = "cert.pem", key = "key.pem" } }
routes = { { path = "/cgi-bin/", cgi = "cgi-bin" } }
"""
        with Umbra(cfg, files=FILES, setup=certs, raw=False) as u:
            with tls_connect(u.port, tls_context(), "localhost") as s:
                s.sendall(req("/cgi-bin/env.sh", host="localhost"))
                data, _ = tls_recv_all(s)
            env, _ = env_lines(parse_response(data).body)
            self.assertEqual(env["HTTPS"], "on")
            self.assertEqual(env["SERVER_PORT"], "443")

    def test_path_info_in_subfolder_and_encoded(self):
        r = self.get("/cgi-bin/sub/deep.sh/a%20b/c")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"deep /a b/c\n")

    # -- bodies and answers --------------------------------------------------------

    def test_post_body_streams_to_stdin(self):
        body = os.urandom(3 << 20)
        r = self.get("/cgi-bin/post.py", method="POST", body=body, timeout=20)
        self.assertEqual(r.status, 201)
        self.assertEqual(r.reason, "Made")
        self.assertEqual(r.header("X-Len"), str(len(body)))
        self.assertEqual(r.body, body)
        self.assertTrue(wait_until(lambda: "post.py read %d bytes" % len(body) in self.umbra.log()))

    def test_chunked_post_body(self):
        parts = [b"hello ", b"chunked ", b"world"]
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        raw = req("/cgi-bin/post.py", "POST", headers=[("Transfer-Encoding", "chunked")]) + chunked
        r = fetch(self.port, raw)
        self.assertEqual(r.status, 201)
        self.assertEqual(r.body, b"hello chunked world")

    def test_stderr_goes_to_error_log_with_request(self):
        r = self.get("/cgi-bin/stderr.sh")
        self.assertEqual(r.body, b"ok\n")
        self.assertTrue(wait_until(lambda: "GET /cgi-bin/stderr.sh: a line on stderr from the script"
                                   in self.umbra.log()), self.umbra.log())

    def test_status_field(self):
        r = self.get("/cgi-bin/status.sh")
        self.assertEqual(r.status, 418)
        self.assertEqual(r.reason, "I'm a teapot")
        self.assertEqual(r.header("X-Script"), "yes")
        self.assertIsNone(r.header("Status"))
        self.assertEqual(r.body, b"short and stout\n")

    def test_local_redirect_runs_the_new_path_as_get(self):
        r = self.get("/cgi-bin/local.sh", method="POST", body=b"dropped")
        self.assertEqual(r.status, 200, r.body)
        env = json.loads(r.body)["env"]
        self.assertEqual(env["REQUEST_METHOD"], "GET")
        self.assertEqual(env["SCRIPT_NAME"], "/cgi-bin/env.py")
        self.assertEqual(env["PATH_INFO"], "/after")
        self.assertEqual(env["QUERY_STRING"], "from+redirect")
        self.assertNotIn("CONTENT_LENGTH", env)
        self.assertIsNone(r.header("Location"))

    def test_local_redirect_loop_is_502(self):
        r = self.get("/cgi-bin/loop.sh")
        self.assertEqual(r.status, 502)

    def test_local_redirect_outside_route_goes_to_client(self):
        r = self.get("/cgi-bin/local_static.sh")
        self.assertEqual(r.status, 302)
        self.assertEqual(r.header("Location"), "/static/a.txt")

    def test_client_redirect(self):
        r = self.get("/cgi-bin/client.sh")
        self.assertEqual(r.status, 302)
        self.assertEqual(r.header("Location"), "http://example.com/elsewhere?x=1")
        r = self.get("/cgi-bin/client_status.sh")
        self.assertEqual(r.status, 301)
        self.assertEqual(r.header("Location"), "https://example.org/")
        self.assertIn(b"moved", r.body)

    def test_nph_passes_through(self):
        r = self.get("/cgi-bin/nph-raw.sh")
        self.assertEqual(r.status, 299)
        self.assertEqual(r.reason, "Custom Reason")
        self.assertEqual(r.header("X-Nph"), "passed")
        self.assertEqual(r.header("Content-Type"), "text/x-nph")
        self.assertEqual(r.body, b"raw body\n")

    def test_content_length_is_kept_and_keepalive_works(self):
        with Client(self.port, timeout=10) as c:
            for _ in range(3):
                c.send(req("/cgi-bin/length.sh", close=False))
                r = c.read_response(timeout=10)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("Content-Length"), "6")
                self.assertEqual(r.body, b"six!\n\n")
            c.send(req("/cgi-bin/empty.sh", close=False))
            r = c.read_response(timeout=10)
            self.assertEqual((r.status, r.body), (200, b""))

    def test_head_request(self):
        r = self.get("/cgi-bin/status.sh", method="HEAD")
        self.assertEqual(r.status, 418)
        self.assertEqual(r.body, b"")

    def test_streams_as_it_comes(self):
        with connect(self.port, 10) as s:
            t0 = time.monotonic()
            s.sendall(req("/cgi-bin/slow.sh"))
            first = b""
            while b"first" not in first:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "closed before the first part")
                first += chunk
            t_first = time.monotonic() - t0
            rest = first
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                rest += chunk
            t_all = time.monotonic() - t0
        self.assertLess(t_first, 0.8, "the first part waited for the script's end")
        self.assertGreater(t_all, 0.9)
        self.assertIn(b"second", rest)

    def test_backpressure_pauses_the_script(self):
        count = self.umbra.path("big.count")
        total = 512 * 65536
        with connect(self.port, 20) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            s.sendall(req("/cgi-bin/big.py"))
            self.assertTrue(wait_until(lambda: os.path.exists(count) and read_file(count).strip(), 5))
            time.sleep(1.5)  # the client reads nothing meanwhile
            written = int(read_file(count).strip() or 0) * 65536
            self.assertLess(written, total // 2,
                            "the script wrote %d bytes to a client that read none" % written)
            got = 0
            s.settimeout(20)
            data = b""
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
                if len(data) < 4096:
                    data += chunk
        self.assertIn(b"200", data.split(b"\r\n", 1)[0])
        self.assertGreater(got, total)  # the whole body (with its chunk framing)
        self.assertEqual(read_file(count).strip(), "512")

    def test_binary_output_is_not_a_head(self):
        self.assertEqual(self.get("/cgi-bin/binary.sh").status, 502)

    def test_may_be_cached(self):
        a = self.get("/cached/cached.sh")
        b = self.get("/cached/cached.sh")
        self.assertEqual(a.status, 200)
        self.assertEqual(a.body, b.body)
        c = self.get("/cgi-bin/cached.sh")  # the uncached route runs it again
        self.assertNotEqual(c.body, a.body)

    # -- failures ------------------------------------------------------------------

    def test_garbage_is_502(self):
        r = self.get("/cgi-bin/garbage.sh")
        self.assertEqual(r.status, 502)
        self.assertNotIn(b"at all", r.body)

    def test_no_output_is_502(self):
        self.assertEqual(self.get("/cgi-bin/silent.sh").status, 502)
        self.assertEqual(self.get("/cgi-bin/headonly.sh").status, 502)

    def test_missing_interpreter_is_502(self):
        self.assertEqual(self.get("/cgi-bin/nointerp.sh").status, 502)
        self.assertTrue(wait_until(lambda: "cannot run" in self.umbra.log()), self.umbra.log())

    def test_endless_head_is_502_and_killed(self):
        t0 = time.monotonic()
        r = self.get("/cgi-bin/endless_head.sh")
        self.assertEqual(r.status, 502)
        self.assertLess(time.monotonic() - t0, 2.5, "a head past the limit waited for the timeout")
        pid = int(read_file(self.umbra.path("endless_head.pid")))
        self.assertTrue(wait_until(lambda: pid_gone(pid), 5), "script %d still there" % pid)

    def test_crash_is_502(self):
        r = self.get("/cgi-bin/crash.py")
        self.assertEqual(r.status, 502)

    def test_endless_script_times_out_504_and_is_killed(self):
        for f in ("endless.pid", "endless.child"):
            if os.path.exists(self.umbra.path(f)):
                os.unlink(self.umbra.path(f))
        t0 = time.monotonic()
        r = self.get("/cgi-bin/endless.sh", timeout=15)
        took = time.monotonic() - t0
        self.assertEqual(r.status, 504)
        self.assertGreater(took, 2.5)
        self.assertLess(took, 8)
        pid = int(read_file(self.umbra.path("endless.pid")))
        child = int(read_file(self.umbra.path("endless.child")))
        self.assertTrue(wait_until(lambda: pid_gone(pid), 5), "script %d still there" % pid)
        self.assertTrue(wait_until(lambda: pid_gone(child), 5), "its child %d still there" % child)

    def test_endless_body_is_cut_at_timeout(self):
        with connect(self.port, 15) as s:
            s.sendall(req("/cgi-bin/endless_body.sh"))
            data = b""
            t0 = time.monotonic()
            while time.monotonic() - t0 < 12:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        self.assertIn(b"started", data)
        self.assertFalse(data.endswith(b"0\r\n\r\n"), "a cut body must not look complete")

    def test_client_leaving_kills_the_script(self):
        before = set(zombies_of(self.umbra.proc.pid))
        with connect(self.port, 5) as s:
            s.sendall(req("/cgi-bin/endless.sh"))
            self.assertTrue(wait_until(lambda: os.path.exists(self.umbra.path("endless.pid")), 5))
        pid = int(read_file(self.umbra.path("endless.pid")))
        self.assertTrue(wait_until(lambda: pid_gone(pid), 5), "script %d outlived its client" % pid)
        self.assertEqual(set(zombies_of(self.umbra.proc.pid)) - before, set())

    # -- paths ---------------------------------------------------------------------

    def test_paths_that_escape_are_refused(self):
        for target, allowed in [
            ("/cgi-bin/../outside.sh", (400, 403, 404)),
            ("/cgi-bin/%2e%2e/outside.sh", (400, 403, 404)),
            ("/cgi-bin/..%2foutside.sh", (400, 403, 404)),
            ("/cgi-bin/link_out.sh", (403,)),
            ("/cgi-bin/link_out_rel.sh", (403,)),
            ("/cgi-bin/missing.sh", (404,)),
            ("/cgi-bin/notexec.sh", (403,)),
            ("/cgi-bin/", (403,)),
            ("/cgi-bin/sub", (403,)),
        ]:
            r = self.get(target)
            self.assertIn(r.status, allowed, target)
            self.assertNotIn(b"OUTSIDE-RAN", r.body, target)
            self.assertNotIn(b"should not run", r.body, target)
        r = self.get("/cgi-bin/link_in.sh")
        self.assertEqual(r.status, 200)

    # -- load ----------------------------------------------------------------------

    def test_50_slow_scripts_do_not_delay_a_static_request(self):
        results = []

        def one():
            try:
                results.append(self.get("/cgi-bin/sleep.sh", timeout=20).status)
            except Exception as e:  # noqa: BLE001 - reported below
                results.append(repr(e))
        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        r = self.get("/static/a.txt")
        took = time.monotonic() - t0
        self.assertEqual(r.body, b"static a\n")
        self.assertLess(took, 0.5, "a static request waited %.2fs behind slow scripts" % took)
        for t in threads:
            t.join(30)
        self.assertEqual(results, [200] * 50)
        self.assertTrue(wait_until(lambda: zombies_of(self.umbra.proc.pid) == [], 5),
                        "zombies left: %r" % zombies_of(self.umbra.proc.pid))


class CgiSpawnRaceTest(unittest.TestCase):
    """Bug: a CGI child being spawned holds a copy of every descriptor of the server until
    its exec, so a client socket closed meanwhile on another worker stayed in that
    worker's epoll set, which then reported events of the freed connection (a crash).
    Two workers spawn scripts while clients hang up in the middle of their requests."""

    def test_clients_leaving_while_scripts_spawn_do_not_crash(self):
        cfg = """
workers = 2
routes = { { path = "/cgi-bin/", cgi = "cgi-bin" }, { path = "/static/", root = "www" } }
"""
        with Umbra(cfg, files=FILES, setup=setup_scripts) as u:
            stop = time.monotonic() + 4
            errors = []

            def leaver():
                n = 0
                while time.monotonic() < stop and n < 3000:
                    n += 1
                    try:
                        with connect(u.port, 2) as s:
                            s.sendall(req("/cgi-bin/empty.sh", close=False))
                    except OSError:
                        pass

            def asker():
                n = 0
                while time.monotonic() < stop and n < 3000:
                    n += 1
                    try:
                        r = fetch_req(u.port, "/cgi-bin/empty.sh", timeout=5)
                        # 503: the leavers' scripts can fill max_children for a moment.
                        if r.status not in (200, 503):
                            errors.append(r.status)
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(repr(e))
                        return
            def closer():
                # The server closes first (Connection: close), then the client's FIN comes:
                # an event on a socket the server has closed.
                n = 0
                while time.monotonic() < stop and n < 5000:
                    n += 1
                    try:
                        with connect(u.port, 2) as s:
                            s.sendall(req("/static/a.txt"))
                            while s.recv(4096):
                                pass
                    except OSError:
                        pass
            threads = [threading.Thread(target=f)
                       for f in (leaver, leaver, asker, asker, closer, closer, closer)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            self.assertTrue(u.alive(), "umbra died:\n" + u.log()[-3000:])
            self.assertEqual(errors, [])
            self.assertEqual(fetch_req(u.port, "/cgi-bin/empty.sh").status, 200)
            self.assertTrue(wait_until(lambda: zombies_of(u.proc.pid) == [], 5),
                            "zombies left: %r" % zombies_of(u.proc.pid))


class CgiLimitTest(unittest.TestCase):
    def test_max_children_503(self):
        cfg = """
cgi = { max_children = 2, timeout = 5 }
routes = { { path = "/cgi-bin/", cgi = "cgi-bin" } }
"""
        with Umbra(cfg, files=FILES, setup=setup_scripts) as u:
            socks = []
            try:
                for _ in range(2):
                    s = connect(u.port, 10)
                    s.sendall(req("/cgi-bin/sleep.sh"))
                    socks.append(s)
                time.sleep(0.3)
                r = fetch_req(u.port, "/cgi-bin/env.sh")
                self.assertEqual(r.status, 503)
                for s in socks:
                    data = b""
                    while True:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    self.assertEqual(parse_response(data).body, b"slept\n")
            finally:
                for s in socks:
                    s.close()
            # The slots came back.
            self.assertEqual(fetch_req(u.port, "/cgi-bin/empty.sh").status, 200)

    def test_config_errors_name_file_and_line(self):
        cases = [
            ('routes = {\n  { path = "/c/", cgi = "nope" },\n}\n', ":4:", "nope"),
            ('routes = {\n  { path = "/c/",\n    cgi = "cgi-bin", root = "cgi-bin" },\n}\n',
             ":5:", "root"),
            ('cgi = { max_children = 0 }\nroutes = { { path = "/c/", cgi = "cgi-bin" } }\n',
             ":3:", "max_children"),
            ('cgi = { timeout = -1 }\nroutes = { { path = "/c/", cgi = "cgi-bin" } }\n',
             ":3:", "timeout"),
            ('cgi = { children = 3 }\nroutes = { { path = "/c/", cgi = "cgi-bin" } }\n',
             ":3:", "children"),
        ]
        for body, line, word in cases:
            with Umbra(body, files=FILES, expect_fail=True) as u:
                self.assertNotEqual(u.returncode, 0)
                log = u.log()
                self.assertIn("config.lua" + line, log, body)
                self.assertIn(word, log, body)


# Issue #26: the README's numbers for CGI, each pinned at its boundary.
PROMISE_FILES = dict(FILES)
PROMISE_FILES.update({
    # Marks that it runs (one file per pid), then holds its slot until told to go.
    "cgi-bin/hold.sh": "#!/bin/sh\ntouch ../running.$$\nwhile [ ! -e ../release ]; do sleep 0.05; done\n"
                       "printf 'Content-Type: text/plain\\n\\nheld\\n'\n",
    # Ignores SIGTERM, saying when it came; only SIGKILL ends it.
    "cgi-bin/stubborn.py": """#!%s
import os, signal, time
with open("../stubborn.pid", "w") as f:
    f.write("%%d" %% os.getpid())
def on_term(*_):
    with open("../stubborn.term", "w") as f:
        f.write(repr(time.time()))
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
""" % PY,
    # ?n=K: K local redirects in a row, then a document.
    "cgi-bin/hop.sh": "#!/bin/sh\nn=${QUERY_STRING#n=}\nif [ \"$n\" -gt 0 ]; then\n"
                      "  printf 'Location: /cgi-bin/hop.sh?n=%d\\n\\n' $((n - 1))\nelse\n"
                      "  printf 'Content-Type: text/plain\\n\\nlanded\\n'\nfi\n",
    "cgi-bin/nph-te.sh": "#!/bin/sh\nprintf 'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\n"
                         "Transfer-Encoding: chunked\\r\\n\\r\\n5\\r\\nhello\\r\\n0\\r\\n\\r\\n'\n",
    "cgi-bin/nph-plain.sh": "#!/bin/sh\nprintf 'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\n"
                            "\\r\\nhello'\n",
})
PROMISE_EXEC = [k for k in PROMISE_FILES if k.endswith((".sh", ".py")) and not k.endswith("notexec.sh")]


def setup_promise_scripts(d):
    for k in PROMISE_EXEC:
        os.chmod(os.path.join(d, k), 0o755)


class CgiPromisesTest(unittest.TestCase):
    """README: `cgi.max_children` ... past it, 503 with `Retry-After: 1`; SIGKILL 2 s after
    SIGTERM; at most 8 local redirects in a row, more is 502; an nph- head with
    `Transfer-Encoding` is a 502."""

    @classmethod
    def setUpClass(cls):
        cls.umbra = class_context(cls, Umbra("""
cgi = { max_children = 3, timeout = 1 }
routes = { { path = "/cgi-bin/", cgi = "cgi-bin" } }
""", files=PROMISE_FILES, setup=setup_promise_scripts))

    def tearDown(self):
        self.assertTrue(self.umbra.alive(), "umbra died:\n" + self.umbra.log())

    def running(self):
        return [n for n in os.listdir(self.umbra.path("")) if n.startswith("running.")]

    def test_max_children_n_run_and_the_next_gets_503_retry_after_1(self):
        u = self.umbra
        for n in self.running() + (["release"] if os.path.exists(u.path("release")) else []):
            os.unlink(u.path(n))
        socks = []
        try:
            for _ in range(3):
                s = connect(u.port, 10)
                s.sendall(req("/cgi-bin/hold.sh"))
                socks.append(s)
            # The limit passes: all three run at once.
            self.assertTrue(wait_until(lambda: len(self.running()) == 3, 5), self.running())
            r = fetch_req(u.port, "/cgi-bin/hold.sh")
            self.assertEqual(r.status, 503)
            self.assertEqual(r.header("Retry-After"), "1")
            self.assertEqual(len(self.running()), 3, "the fourth script ran")
            with open(u.path("release"), "w"):
                pass
            for s in socks:
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                r = parse_response(data)
                self.assertEqual((r.status, r.body), (200, b"held\n"))
        finally:
            for s in socks:
                s.close()

    def test_script_ignoring_sigterm_is_killed_2s_later(self):
        u = self.umbra
        for f in ("stubborn.pid", "stubborn.term"):
            if os.path.exists(u.path(f)):
                os.unlink(u.path(f))
        r = fetch_req(u.port, "/cgi-bin/stubborn.py", timeout=10)
        self.assertEqual(r.status, 504)
        self.assertTrue(wait_until(lambda: os.path.exists(u.path("stubborn.term")), 3))
        pid = int(read_file(u.path("stubborn.pid")))
        self.assertFalse(wait_until(lambda: pid_gone(pid), 1.5), "killed before the 2 s grace")
        self.assertTrue(wait_until(lambda: pid_gone(pid), 2), "script %d outlived the grace" % pid)
        gone = time.time()
        term = float(read_file(u.path("stubborn.term")))
        self.assertGreater(gone - term, 1.8)
        self.assertLess(gone - term, 3.0)

    def test_8_local_redirects_are_followed_the_9th_is_502(self):
        r = fetch_req(self.umbra.port, "/cgi-bin/hop.sh?n=8")
        self.assertEqual((r.status, r.body), (200, b"landed\n"))
        r = fetch_req(self.umbra.port, "/cgi-bin/hop.sh?n=9")
        self.assertEqual(r.status, 502)

    def test_nph_head_with_transfer_encoding_is_502(self):
        r = fetch_req(self.umbra.port, "/cgi-bin/nph-plain.sh")
        self.assertEqual((r.status, r.body), (200, b"hello"))
        r = fetch_req(self.umbra.port, "/cgi-bin/nph-te.sh")
        self.assertEqual(r.status, 502)


if __name__ == "__main__":
    unittest.main()
