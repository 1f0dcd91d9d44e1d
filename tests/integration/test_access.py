"""Access rules (issue #29): allow and deny lists per route, basic auth from htpasswd
files that `htpasswd -B` and `htpasswd -5` wrote, and header rules without Lua, against the
real binary with two workers.

The scripted test origin counts what reaches it (its --record file) and echoes the head
it received (/echo), so the tests check both what the client got and what the origin saw.
"""

import base64
import os
import shutil
import subprocess
import sys
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import Origin, Umbra, echoed, fetch_req, values  # noqa: E402

HTPASSWD = shutil.which("htpasswd")


def htpasswd_line(flag, user, password):
    """One line "user:hash" as `htpasswd -n FLAG -b` prints it (apache2-utils)."""
    r = subprocess.run([HTPASSWD, "-n", flag, "-b", user, password], capture_output=True,
                       check=True, timeout=30)
    return r.stdout.decode().strip() + "\n"


def basic(user, password):
    return ("Authorization",
            "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode())


def records(origin):
    with open(origin.record_path) as f:
        return [line for line in f if line.strip()]


def config(url, routes, extra=""):
    return """
upstreams = { app = { servers = { "%s" } } }
%s
routes = { %s
  { path = "/", upstream = "app", cache = false } }
""" % (url, extra, routes)


class AllowDenyTest(unittest.TestCase):
    """403 before any hook or origin: the origin never sees a refused request."""

    @classmethod
    def setUpClass(cls):
        cls.origin = Origin().__enter__()
        cls.addClassCleanup(cls.origin.__exit__, None, None, None)
        routes = """
  { path = "/lan/", upstream = "app", cache = false, allow = { "10.0.0.0/8", "::1" } },
  { path = "/local/", upstream = "app", cache = false, allow = { "127.0.0.0/8" } },
  { path = "/v6only/", upstream = "app", cache = false, allow = { "::1", "fd00::/8" } },
  { path = "/mapped/", upstream = "app", cache = false, allow = { "::ffff:127.0.0.0/104" } },
  { path = "/deny4/", upstream = "app", cache = false, deny = { "127.0.0.1" } },
  { path = "/deny6/", upstream = "app", cache = false, deny = { "::1", "2001:db8::/32" } },
  { path = "/both/", upstream = "app", cache = false, allow = { "127.0.0.0/8" },
    deny = { "127.0.0.1/32" } },"""
        # The hook would answer 200 itself: a 403 shows the lists ran before it.
        extra = """
function on_request(req)
  if req.path:find("^/deny4/hook") then return umbra.respond(200, "hook") end
end
"""
        cls.umbra = Umbra(config(cls.origin.url, routes, extra), workers=2).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)

    def status(self, path):
        return fetch_req(self.umbra.port, path).status

    def test_ipv4_allow_and_deny(self):
        before = len(records(self.origin))
        self.assertEqual(self.status("/lan/a"), 403)      # 127.0.0.1 not in 10/8 nor ::1
        self.assertEqual(self.status("/deny4/a"), 403)
        self.assertEqual(self.status("/deny4/hook"), 403)  # before the hook
        self.assertEqual(self.status("/both/a"), 403)      # deny wins over allow
        time.sleep(0.2)
        self.assertEqual(len(records(self.origin)), before, "a refused request reached the origin")
        self.assertEqual(self.status("/local/a"), 200)
        self.assertEqual(self.status("/a"), 200)

    def test_ipv6_entries(self):
        # An IPv4 client matches no IPv6 network but the IPv4-mapped one.
        self.assertEqual(self.status("/v6only/a"), 403)
        self.assertEqual(self.status("/mapped/a"), 200)
        self.assertEqual(self.status("/deny6/a"), 200)

    def test_refused_on_both_workers(self):
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(self.status, ["/deny4/x%d" % i for i in range(40)]))
        self.assertEqual(set(got), {403})


class BadConfigTest(unittest.TestCase):
    def check_fails(self, body, files, *needles):
        u = Umbra(body, files=files, expect_fail=True)
        with u:
            pass
        self.assertNotEqual(u.returncode, 0)
        for n in needles:
            self.assertIn(n, u.log())

    def test_bad_network(self):
        self.check_fails('routes = { { path = "/", root = ".", allow = { "10.0.0.0/33" } } }',
                         None, "routes.1.allow.1")

    def test_framing_fields_refused(self):
        for name in ("Content-Length", "Transfer-Encoding", "Connection", "Upgrade"):
            with self.subTest(name=name):
                self.check_fails('headers = { response = { set = { ["%s"] = "1" } } }\n'
                                 'routes = { { path = "/", root = "." } }' % name,
                                 None, "config.lua:3:", "headers.response.set.%s" % name,
                                 "framing or hop-by-hop")
        self.check_fails('routes = { { path = "/", root = ".",\n'
                         '  headers = { request = { remove = { "TE" } } } } }',
                         None, "routes.1.headers.request.remove.1")

    @unittest.skipUnless(HTPASSWD, "htpasswd (apache2-utils) not installed")
    def test_apr1_refused_with_its_line(self):
        lines = (htpasswd_line("-B", "ann", "pw1") + "# a comment\n" +
                 htpasswd_line("-m", "bob", "pw2"))
        self.assertIn("$apr1$", lines)
        self.check_fails('routes = { { path = "/", root = ".",\n'
                         '  auth = { basic = "users.htpasswd" } } }',
                         {"users.htpasswd": lines}, "config.lua:4:", "routes.1.auth.basic",
                         "users.htpasswd, line 3", "user 'bob'", "MD5")

    def test_plain_and_des_refused(self):
        for line, what in (("carl:secret\n", "plain-text"), ("dan:abJnggxhB/yWI\n", "DES")):
            with self.subTest(what=what):
                self.check_fails('routes = { { path = "/", root = ".",\n'
                                 '  auth = { basic = "u.htpasswd" } } }',
                                 {"u.htpasswd": "\n" + line}, "line 2", what)


@unittest.skipUnless(HTPASSWD, "htpasswd (apache2-utils) not installed")
class BasicAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = Origin().__enter__()
        cls.addClassCleanup(cls.origin.__exit__, None, None, None)
        files = {
            "staff.htpasswd": htpasswd_line("-B", "ann", "bcrypt pass") +
                              htpasswd_line("-2", "sam", "sha:256") +
                              htpasswd_line("-5", "sue", "sha512"),
        }
        routes = """
  { path = "/staff/", upstream = "app", cache = false,
    auth = { basic = "staff.htpasswd", realm = "staff" } },
  { path = "/pass/", upstream = "app", cache = false,
    auth = { basic = "staff.htpasswd", pass_auth = true } },"""
        cls.umbra = Umbra(config(cls.origin.url, routes), files=files, workers=2).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)

    def get(self, path, *headers):
        return fetch_req(self.umbra.port, path, headers=list(headers))

    def test_no_credentials_401_with_challenge(self):
        before = len(records(self.origin))
        r = self.get("/staff/x?echo=1")
        self.assertEqual(r.status, 401)
        self.assertEqual(r.header("WWW-Authenticate"), 'Basic realm="staff"')
        time.sleep(0.2)
        self.assertEqual(len(records(self.origin)), before)

    def test_bcrypt_and_sha_crypt(self):
        for user, pw in (("ann", "bcrypt pass"), ("sam", "sha:256"), ("sue", "sha512")):
            with self.subTest(user=user):
                r = self.get("/staff/x?echo=1", basic(user, pw))
                self.assertEqual(r.status, 200, r.raw_head)
                # Not sent on without pass_auth.
                self.assertEqual(values(echoed(r)[1], "Authorization"), [])

    def test_wrong_user_and_wrong_password(self):
        before = len(records(self.origin))
        for h in (basic("nobody", "bcrypt pass"), basic("ann", "wrong"), basic("ann", ""),
                  ("Authorization", "Basic !!!"), ("Authorization", "Bearer abc")):
            with self.subTest(h=h):
                r = self.get("/staff/x?echo=1", h)
                self.assertEqual(r.status, 401)
                self.assertIn('realm="staff"', r.header("WWW-Authenticate"))
        time.sleep(0.2)
        self.assertEqual(len(records(self.origin)), before)

    def test_pass_auth(self):
        h = basic("sam", "sha:256")
        r = self.get("/pass/x?echo=1", h)
        self.assertEqual(r.status, 200)
        self.assertEqual(values(echoed(r)[1], "Authorization"), [h[1]])
        self.assertIn('realm="Restricted"', self.get("/pass/x?echo=1").header("WWW-Authenticate"))

    def test_post_body_reaches_origin_after_verification(self):
        # A first request for these credentials waits for the verifier; its body must
        # reach the origin whole.
        body = b"x" * 70000
        r = fetch_req(self.umbra.port, "/staff/x?echo=1", method="POST", body=body,
                      headers=[basic("sue", "sha512"), ("Content-Type", "text/plain")])
        self.assertEqual(r.status, 200, r.raw_head)
        self.assertEqual(echoed(r)[2], body)

    def test_many_requests_with_the_right_password(self):
        h = basic("ann", "bcrypt pass")
        self.assertEqual(self.get("/staff/a", h).status, 200)
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(lambda i: self.get("/staff/a%d" % i, h).status, range(200)))
        self.assertEqual(set(got), {200})

    def test_authorization_never_logged(self):
        self.get("/staff/x?echo=1", basic("ann", "bcrypt pass"))
        self.get("/staff/x?echo=1", basic("ann", "wrong"))
        log = self.umbra.log()
        self.assertNotIn(basic("ann", "bcrypt pass")[1].split()[1], log)
        self.assertNotIn("bcrypt pass", log)


@unittest.skipUnless(HTPASSWD, "htpasswd (apache2-utils) not installed")
class ReloadTest(unittest.TestCase):
    def test_file_read_again_on_reload(self):
        with Origin() as o:
            files = {"u.htpasswd": htpasswd_line("-B", "ann", "old")}
            routes = '{ path = "/s/", upstream = "app", cache = false, auth = { basic = "u.htpasswd" } },'
            with Umbra(config(o.url, routes), files=files, workers=2) as u:
                self.assertEqual(fetch_req(u.port, "/s/a", headers=[basic("ann", "old")]).status, 200)
                with open(u.path("u.htpasswd"), "w") as f:
                    f.write(htpasswd_line("-B", "ann", "new"))
                u.proc.send_signal(1)  # SIGHUP
                deadline = time.time() + 10
                st = None
                while time.time() < deadline:
                    st = fetch_req(u.port, "/s/a", headers=[basic("ann", "new")]).status
                    if st == 200:
                        break
                    time.sleep(0.1)
                self.assertEqual(st, 200)
                # The old password, though verified and cached before, no longer passes.
                self.assertEqual(fetch_req(u.port, "/s/a", headers=[basic("ann", "old")]).status, 401)


class HeaderRulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.origin = Origin().__enter__()
        cls.addClassCleanup(cls.origin.__exit__, None, None, None)
        extra = """
headers = {
  request = { set = { ["X-A"] = "1" }, add = { ["X-Added"] = "g" }, remove = { "X-B" } },
  response = { set = { ["X-Frame-Options"] = "DENY" }, add = { ["X-Extra"] = "e" },
               remove = { "X-Origin-Port" } },
}
"""
        routes = """
  { path = "/r/", upstream = "app", cache = false,
    headers = { request = { set = { ["X-A"] = "route" } },
                response = { set = { ["X-Frame-Options"] = "SAMEORIGIN" },
                             remove = { "X-Extra" } } } },"""
        cls.umbra = Umbra(config(cls.origin.url, routes, extra), workers=2).__enter__()
        cls.addClassCleanup(cls.umbra.__exit__, None, None, None)

    def test_request_rules(self):
        r = fetch_req(self.umbra.port, "/echo",
                      headers=[("X-A", "client"), ("X-A", "two"), ("X-B", "gone"),
                               ("X-Added", "c")])
        self.assertEqual(r.status, 200)
        fields = echoed(r)[1]
        self.assertEqual(values(fields, "X-A"), ["1"])
        self.assertEqual(values(fields, "X-B"), [])
        self.assertEqual(values(fields, "X-Added"), ["c", "g"])

    def test_response_rules(self):
        r = fetch_req(self.umbra.port, "/x?header=X-Frame-Options:ALLOW&header=X-Extra:o")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header_all("X-Frame-Options"), ["DENY"])
        self.assertEqual(r.header_all("X-Extra"), ["o", "e"])
        self.assertIsNone(r.header("X-Origin-Port"))

    def test_route_rules_after_global(self):
        r = fetch_req(self.umbra.port, "/r/x?echo=1")
        self.assertEqual(values(echoed(r)[1], "X-A"), ["route"])
        self.assertEqual(r.header_all("X-Frame-Options"), ["SAMEORIGIN"])
        self.assertIsNone(r.header("X-Extra"))

    def test_rules_on_our_own_answers(self):
        u = Umbra('headers = { response = { set = { ["X-Frame-Options"] = "DENY" } } }\n'
                  'routes = { { path = "/", root = ".", deny = { "127.0.0.1" } } }')
        with u:
            r = fetch_req(u.port, "/")
            self.assertEqual(r.status, 403)
            self.assertEqual(r.header("X-Frame-Options"), "DENY")


if __name__ == "__main__":
    unittest.main()
