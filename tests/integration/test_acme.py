"""Automatic certificates by ACME (RFC 8555, issue #30) against Debian's pebble and
pebble-challtestsrv, started here on 127.0.0.1 with free ports: pebble's DNS is
challtestsrv, which answers every name with 127.0.0.1, and its http-01 validations go to
Umbra's plain listener (httpPort). Pebble's random nonce rejections are left on (its
default), so every test also runs the client's badNonce retries.

What a user sees: the first certificate issued for two names by http-01 and served with a
chain that verifies against pebble's root (from its management API); a restart with the
CA stopped serving the stored certificate at once; a renewal forced by renew_before longer
than the lifetime (a new certificate is served); a name the CA cannot reach logged with
the CA's problem and retried, the other names unaffected; `umbra -t` on the settings.
"""

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (Umbra, exchange, metric, parse_metrics, parse_response,  # noqa: E402
                           peer_cert_names, req, scrape, tls_connect, tls_context, umbra_bin,
                           wait_until)

PEBBLE = shutil.which("pebble")
CHALLTESTSRV = shutil.which("pebble-challtestsrv")
ISSUE_TIMEOUT = 90  # seconds; validations on a loaded 2-CPU machine


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Pebble:
    """pebble and pebble-challtestsrv for Umbra's listeners http_port and tls_port."""

    def __init__(self, http_port, tls_port):
        self.http_port, self.tls_port = http_port, tls_port
        self.dir = tempfile.mkdtemp(prefix="umbra-pebble-")
        self.procs = []
        self.cert = os.path.join(self.dir, "pebble.crt")
        key = os.path.join(self.dir, "pebble.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", self.cert,
                        "-days", "2", "-subj", "/CN=pebble test",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True)
        self.acme_port, self.mgmt_port = free_port(), free_port()
        self.dns_port, self.chall_port = free_port(), free_port()
        with open(os.path.join(self.dir, "pebble.json"), "w") as f:
            json.dump({"pebble": {
                "listenAddress": "127.0.0.1:%d" % self.acme_port,
                "managementListenAddress": "127.0.0.1:%d" % self.mgmt_port,
                "certificate": self.cert, "privateKey": key,
                "httpPort": http_port, "tlsPort": tls_port,
                "ocspResponderURL": "", "externalAccountBindingRequired": False}}, f)
        self.directory = "https://127.0.0.1:%d/dir" % self.acme_port
        self.log_path = os.path.join(self.dir, "pebble.log")

    def start(self):
        log = open(self.log_path, "ab")
        self.procs.append(subprocess.Popen(
            [CHALLTESTSRV, "-dns01", "127.0.0.1:%d" % self.dns_port, "-http01", "",
             "-https01", "", "-tlsalpn01", "", "-management",
             "127.0.0.1:%d" % self.chall_port, "-defaultIPv4", "127.0.0.1",
             "-defaultIPv6", ""], stdout=log, stderr=log, stdin=subprocess.DEVNULL))
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1")
        self.procs.append(subprocess.Popen(
            [PEBBLE, "-config", os.path.join(self.dir, "pebble.json"), "-dnsserver",
             "127.0.0.1:%d" % self.dns_port], stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, env=env, cwd=self.dir))
        log.close()
        ctx = ssl.create_default_context(cafile=self.cert)

        def up():
            try:
                urllib.request.urlopen(self.directory, context=ctx, timeout=2).read()
                urllib.request.urlopen("http://127.0.0.1:%d/" % self.chall_port,
                                       timeout=2).read()
                return True
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False
        if not wait_until(up, timeout=20, interval=0.1):
            raise AssertionError("pebble did not start:\n" + self.log())
        return self

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        self.procs = []

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def root(self):
        """pebble's root certificate (PEM), which signs what it issues."""
        ctx = ssl.create_default_context(cafile=self.cert)
        pem = urllib.request.urlopen("https://127.0.0.1:%d/roots/0" % self.mgmt_port,
                                     context=ctx, timeout=5).read()
        path = os.path.join(self.dir, "root.pem")
        with open(path, "wb") as f:
            f.write(pem)
        return path

    def add_a(self, host, address):
        body = json.dumps({"host": host, "addresses": [address]}).encode()
        urllib.request.urlopen(urllib.request.Request(
            "http://127.0.0.1:%d/add-a" % self.chall_port, data=body, method="POST"),
            timeout=5).read()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class AriDirectory:
    """A directory beside pebble's (pebble 2.4 has no ACME renewal information): the same
    URLs plus renewalInfo, served here with a suggested window that has begun already."""

    def __init__(self, pebble):
        import http.server
        import threading
        self.pebble, self.asked = pebble, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/dir":
                    ctx = ssl.create_default_context(cafile=pebble.cert)
                    d = json.loads(urllib.request.urlopen(pebble.directory, context=ctx,
                                                          timeout=5).read())
                    d["renewalInfo"] = "https://127.0.0.1:%d/renewal-info" % outer.port
                    body, extra = json.dumps(d).encode(), {}
                else:
                    outer.asked.append(self.path)
                    now = time.time()
                    fmt = "%Y-%m-%dT%H:%M:%SZ"
                    body = json.dumps({"suggestedWindow": {
                        "start": time.strftime(fmt, time.gmtime(now - 3600)),
                        "end": time.strftime(fmt, time.gmtime(now - 60))}}).encode()
                    extra = {"Retry-After": "3600"}
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pebble.cert, os.path.join(pebble.dir, "pebble.key"))
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = "https://127.0.0.1:%d/dir" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def config(pebble, storage, entries, renew_before=None, challenges=None, admin=False,
           directory=None, guarded=False):
    renew = ', renew_before = "%s"' % renew_before if renew_before else ""
    if challenges:
        renew += ", challenges = { %s }" % ", ".join('"%s"' % c for c in challenges)
    return ('listen = { "127.0.0.1:%d", { "127.0.0.1:%d", tls = true } }\nworkers = 1\n'
            'tls = { %s,\n  acme = { directory = "%s", email = "ops@example.com",\n'
            '  storage = "%s", ca_file = "%s"%s } }\n'
            '%s\n%s'
            % (pebble.http_port, pebble.tls_port, entries, directory or pebble.directory, storage,
               pebble.cert, renew, GUARDED if guarded else 'routes = { { path = "/", root = "www" } }',
               'admin = { listen = "127.0.0.1:0" }\n' if admin else ""))


# Every request refused twice over: an access rule on the only route, and a global hook
# that answers 401 (for one the rule lets through). The CA's http-01 requests must not
# meet either.
GUARDED = ('routes = { { path = "/", root = "www", deny = { "127.0.0.1" } } }\n'
           'function on_request(req) return umbra.respond(401, "no\\n") end')


def served(port, name, root):
    """(CN, SAN names, serial) of the certificate a handshake for name gets, verified
    against root; None when the handshake fails."""
    try:
        s = tls_connect(port, tls_context(root), name)
    except (ssl.SSLError, OSError):
        return None
    try:
        return peer_cert_names(s)
    finally:
        s.close()


def make_dated_cert(storage, name, days_before, days_after):
    """STORAGE/NAME.crt and .key: a self-signed P-256 certificate for name, valid from
    days_before days ago to days_after days ahead (openssl ca can set both dates)."""
    work = tempfile.mkdtemp(prefix="umbra-acme-ca-")
    try:
        open(os.path.join(work, "index.txt"), "w").close()
        with open(os.path.join(work, "ca.cnf"), "w") as f:
            f.write("[ca]\ndefault_ca = d\n[d]\ndir = %s\ndatabase = $dir/index.txt\n"
                    "new_certs_dir = $dir\nserial = $dir/serial\ndefault_md = sha256\n"
                    "policy = p\nunique_subject = no\ncopy_extensions = copy\n"
                    "[p]\ncommonName = supplied\n" % work)
        with open(os.path.join(work, "serial"), "w") as f:
            f.write("1000\n")
        key, crt = os.path.join(storage, name + ".key"), os.path.join(storage, name + ".crt")
        csr = os.path.join(work, "req.csr")
        subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", csr,
                        "-subj", "/CN=" + name, "-addext", "subjectAltName=DNS:" + name],
                       check=True, capture_output=True)
        fmt = "%Y%m%d%H%M%SZ"
        now = time.time()
        subprocess.run(["openssl", "ca", "-batch", "-config", os.path.join(work, "ca.cnf"),
                        "-selfsign", "-keyfile", key, "-in", csr, "-out", crt, "-notext",
                        "-startdate", time.strftime(fmt, time.gmtime(now - days_before * 86400)),
                        "-enddate", time.strftime(fmt, time.gmtime(now + days_after * 86400))],
                       check=True, capture_output=True)
        os.chmod(key, 0o600)
        os.chmod(crt, 0o600)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def served_unverified(port, name):
    """The common name of the certificate a handshake for name gets (not verified)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as s:
            der = s.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject",
                          "-nameopt", "multiline"], input=der, capture_output=True, check=True)
    m = re.search(rb"commonName\s*=\s*(\S+)", out.stdout)
    return m.group(1).decode() if m else None


@unittest.skipUnless(PEBBLE and CHALLTESTSRV, "needs Debian's pebble (third_party/install.sh)")
class AcmeTest(unittest.TestCase):
    def setUp(self):
        self.http_port, self.tls_port = free_port(), free_port()
        self.pebble = Pebble(self.http_port, self.tls_port).start()
        self.storage = tempfile.mkdtemp(prefix="umbra-acme-store-")

    def tearDown(self):
        self.pebble.cleanup()
        shutil.rmtree(self.storage, ignore_errors=True)

    def umbra(self, entries, **kw):  # kw: config's renew_before, challenges
        return Umbra(config(self.pebble, self.storage, entries, **kw), raw=True,
                     files={"www/a.txt": "hello"}, start_timeout=20)

    def wait_issued(self, u, name, count=1):
        lines = u.log_lines("acme: %s: certificate issued" % name, count,
                            timeout=ISSUE_TIMEOUT)
        self.assertGreaterEqual(len(lines), count, u.log() + "\n--- pebble:\n" +
                                self.pebble.log()[-3000:])

    def test_first_issuance_http01_two_names_then_restart_without_ca(self):
        entries = '{ hosts = { "a.test", "b.test" }, acme = true }'
        with self.umbra(entries, guarded=True) as u:
            self.assertIn("no certificate yet for a.test", u.log())
            self.wait_issued(u, "a.test")
            for name in ("a.test", "b.test"):
                self.assertIn("acme: %s: answering the http-01 challenge" % name, u.log())
            root = self.pebble.root()
            for name in ("a.test", "b.test"):
                got = wait_until(lambda: served(self.tls_port, name, root), timeout=10)
                self.assertIsNotNone(got, "no verified handshake for %s:\n%s" % (name, u.log()))
                self.assertEqual(sorted(got[1]), ["a.test", "b.test"])
            first = got[3]
            # The stored files: private keys readable by the server's user only.
            for f in ("a.test.crt", "a.test.key", "account.key"):
                self.assertEqual(os.stat(os.path.join(self.storage, f)).st_mode & 0o777, 0o600)
            # The site's rules still hold for everything else (the challenge path is not a
            # route), and a token is answered only while its validation runs.
            data, _ = exchange(self.http_port, req("/a.txt"))
            self.assertEqual(parse_response(data).status, 403)
            tokens = re.findall(r"/\.well-known/acme-challenge/([A-Za-z0-9_-]+)",
                                self.pebble.log())
            self.assertTrue(tokens, self.pebble.log())
            for token in set(tokens):
                data, _ = exchange(self.http_port,
                                   req("/.well-known/acme-challenge/" + token))
                self.assertEqual(parse_response(data).status, 403)
        self.pebble.stop()
        with self.umbra(entries) as u:
            got = served(self.tls_port, "b.test", root)
            self.assertIsNotNone(got, u.log())
            self.assertEqual(got[3], first)
            time.sleep(1)
            self.assertNotIn("ordering", u.log())
            self.assertNotIn("renewing", u.log())

    def test_first_issuance_tls_alpn01_two_names(self):
        # No http-01: pebble can validate only through Umbra's TLS listener (acme-tls/1).
        entries = ('{ hosts = { "t1.test", "t2.test" }, acme = true },\n'
                   '  { hosts = { "t3.test", "t4.test" }, acme = true }')
        with self.umbra(entries, challenges=["tls-alpn-01"]) as u:
            self.wait_issued(u, "t1.test")
            self.wait_issued(u, "t3.test")
            root = self.pebble.root()
            for name, sans in (("t2.test", ["t1.test", "t2.test"]),
                               ("t4.test", ["t3.test", "t4.test"])):
                # The watch loads the stored files a moment after the log line.
                got = wait_until(lambda: (lambda g: g if g and sorted(g[1]) == sans else None)(
                    served(self.tls_port, name, root)), timeout=10)
                self.assertIsNotNone(got, "%s: %s\n%s" % (
                    name, served(self.tls_port, name, root), u.log()))
            for name in ("t1.test", "t2.test", "t3.test", "t4.test"):
                self.assertIn("acme: %s: answering the tls-alpn-01 challenge" % name, u.log())
            self.assertNotIn("http-01", u.log())

    def test_reload_adding_a_name_one_client_at_a_time(self):
        one = '{ hosts = { "h1.test" }, acme = true }'
        with self.umbra(one) as u:
            self.wait_issued(u, "h1.test")
            with open(u.config_path) as f:
                text = f.read()
            with open(u.config_path, "w") as f:
                f.write(text.replace(one, one + ',\n  { hosts = { "h2.test" }, acme = true }'))
            u.proc.send_signal(signal.SIGHUP)
            self.wait_issued(u, "h2.test")
            root = self.pebble.root()
            got = wait_until(lambda: (lambda g: g if g and g[1] == ["h2.test"] else None)(
                served(self.tls_port, "h2.test", root)), timeout=10)
            self.assertIsNotNone(got, u.log())
            # The new store's client did not order h1.test again: it was stored.
            self.assertEqual(len(u.log_lines("acme: h1.test: ordering", 1, timeout=0)), 1)

    def test_renewal_information_moves_renewal_earlier(self):
        ari = AriDirectory(self.pebble)
        try:
            with self.umbra('{ hosts = { "ari.test" }, acme = true }', directory=ari.url) as u:
                self.wait_issued(u, "ari.test")
                root = self.pebble.root()
                first = wait_until(lambda: served(self.tls_port, "ari.test", root), timeout=10)
                self.assertIsNotNone(first, u.log())
                # Five years left, renew_before unset: only the CA's window renews it.
                self.wait_issued(u, "ari.test", 2)
                self.assertTrue(u.log_lines("acme: ari.test: the CA suggests renewing now", 1))
                self.assertTrue(ari.asked)
                self.assertRegex(ari.asked[0], r"^/renewal-info/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")
                again = wait_until(lambda: (lambda g: g if g and g[3] != first[3] else None)(
                    served(self.tls_port, "ari.test", root)), timeout=10)
                self.assertIsNotNone(again, u.log())
        finally:
            ari.close()

    def test_renewal_forced_by_renew_before(self):
        entries = '{ hosts = { "r.test" }, acme = true }'
        with self.umbra(entries, renew_before="100000d") as u:
            self.wait_issued(u, "r.test")
            root = self.pebble.root()
            first = wait_until(lambda: served(self.tls_port, "r.test", root), timeout=10)
            self.assertIsNotNone(first, u.log())
            self.wait_issued(u, "r.test", 2)
            self.assertTrue(u.log_lines("acme: r.test: renewing the certificate", 1))
            again = wait_until(lambda: (lambda g: g if g and g[3] != first[3] else None)(
                served(self.tls_port, "r.test", root)), timeout=10)
            self.assertIsNotNone(again, "the renewed certificate is not served:\n" + u.log())

    def test_ca_down_at_renewal_old_certificate_still_served(self):
        entries = '{ hosts = { "d.test" }, acme = true }'
        with self.umbra(entries, renew_before="100000d") as u:
            self.wait_issued(u, "d.test")
            root = self.pebble.root()
            first = wait_until(lambda: served(self.tls_port, "d.test", root), timeout=10)
            self.assertIsNotNone(first, u.log())
            self.pebble.stop()
            lines = u.log_lines("acme: d.test: the order failed", 1, timeout=ISSUE_TIMEOUT)
            self.assertTrue(lines, u.log())
            self.assertIn("the stored certificate keeps serving", lines[0])
            self.assertEqual(served(self.tls_port, "d.test", root), first)

    def test_stored_certificate_in_its_last_third_warned_while_ca_down(self):
        # A stored certificate of 30 days with 5 left (openssl ca sets the dates), the CA
        # down: it keeps serving, and once its renewal has failed the log warns that it
        # is in the last third of its lifetime, with the CA's error, once (a day apart).
        make_dated_cert(self.storage, "w.test", days_before=25, days_after=5)
        self.pebble.stop()
        with self.umbra('{ hosts = { "w.test" }, acme = true }') as u:
            got = served_unverified(self.tls_port, "w.test")
            self.assertEqual(got, "w.test", u.log())
            lines = u.log_lines("acme: w.test: the certificate expires in", 1,
                                timeout=ISSUE_TIMEOUT)
            self.assertTrue(lines, u.log())
            self.assertRegex(lines[0], r"expires in (4\.9|5\.0) days, in the last third of its "
                             r"lifetime, and is not renewed \(last error: .+\)")
            self.assertTrue(u.log_lines("acme: w.test: the order failed", 1))
            time.sleep(1)
            self.assertEqual(len(u.log_lines("the last third", 1)), 1, u.log())

    def test_unreachable_name_logged_with_ca_problem_others_unaffected(self):
        # 127.0.0.2 is loopback where nothing listens: pebble's validation cannot connect.
        self.pebble.add_a("bad.test", "127.0.0.2")
        entries = ('{ hosts = { "good.test" }, acme = true },\n'
                   '  { hosts = { "bad.test" }, acme = true }')
        with self.umbra(entries, admin=True) as u:
            self.wait_issued(u, "good.test")
            lines = u.log_lines("acme: bad.test: the order failed", 1, timeout=ISSUE_TIMEOUT)
            self.assertTrue(lines, u.log())
            # The CA's problem document, as pebble wrote it.
            self.assertIn("urn:ietf:params:acme:error:", lines[0])
            self.assertIn("trying again in", lines[0])
            root = self.pebble.root()
            self.assertIsNotNone(wait_until(lambda: served(self.tls_port, "good.test", root),
                                            timeout=10), u.log())
            # bad.test has no certificate: it gets the default one (good.test's is not the
            # default entry's: the first entry is, which is good.test's), named so.
            got = served(self.tls_port, "bad.test", root)
            self.assertIsNotNone(got)
            self.assertEqual(got[1], ["good.test"])
            m = parse_metrics(scrape(u))
            self.assertEqual(metric(m, "umbra_acme_orders_total", host="good.test"), 1)
            self.assertEqual(metric(m, "umbra_acme_order_failures_total", host="good.test"), 0)
            self.assertGreaterEqual(metric(m, "umbra_acme_orders_total", host="bad.test"), 1)
            self.assertGreaterEqual(
                metric(m, "umbra_acme_order_failures_total", host="bad.test"), 1)
            days = metric(m, "umbra_acme_certificate_expiry_days", host="good.test")
            self.assertTrue(days is not None and 1 < days < 3700, days)  # pebble: 5 years
            self.assertIsNone(metric(m, "umbra_acme_certificate_expiry_days", host="bad.test"))
            st = {a["host"]: a for a in json.loads(scrape(u, "/status.json"))["tls"]["acme"]}
            self.assertEqual(sorted(st), ["bad.test", "good.test"])
            self.assertIsNone(st["bad.test"]["expires"])
            self.assertGreaterEqual(st["bad.test"]["failures"], 1)
            self.assertGreater(st["good.test"]["days_left"], 1)


class AcmeSettingsTest(unittest.TestCase):
    def check(self, body, files=None, storage_mode=None):
        d = tempfile.mkdtemp(prefix="umbra-acme-t-")
        try:
            for rel, content in (files or {}).items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(content)
            if storage_mode is not None:
                os.chmod(os.path.join(d, "store"), storage_mode)
            path = os.path.join(d, "config.lua")
            with open(path, "w") as f:
                if os.geteuid() == 0:
                    f.write('user = "root" ')
                f.write('listen = { { "127.0.0.1:0", tls = true } }\n'
                        'routes = { { path = "/", root = "." } }\n' + body)
            p = subprocess.run([umbra_bin(), "-t", path], capture_output=True, text=True,
                               timeout=30)
            return p.returncode, p.stdout + p.stderr
        finally:
            shutil.rmtree(d, ignore_errors=True)

    ACME = 'acme = { directory = "https://127.0.0.1:1/dir", storage = "store" }'

    def test_acme_entry_is_accepted(self):
        rc, out = self.check('tls = { { hosts = "a.test", acme = true },\n  %s }\n' % self.ACME,
                             files={"store/.keep": ""})
        self.assertEqual(rc, 0, out)
        # A check asks no CA: the client starts only with a running server.
        self.assertNotIn("acme:", out)

    def test_acme_entry_without_ca_names_file_and_line(self):
        rc, out = self.check('tls = {\n  { hosts = "a.test", acme = true } }\n')
        self.assertNotEqual(rc, 0)
        self.assertIn("config.lua:4: tls.1.acme: acme = true needs a CA", out)

    def test_missing_storage_names_line(self):
        rc, out = self.check('tls = { { hosts = "a.test", acme = true },\n  %s }\n' % self.ACME)
        self.assertNotEqual(rc, 0)
        self.assertIn("config.lua:4: tls.acme.storage: no such", out)

    def test_unwritable_storage(self):
        if os.geteuid() == 0:
            self.skipTest("root writes anywhere")
        rc, out = self.check('tls = { { hosts = "a.test", acme = true },\n  %s }\n' % self.ACME,
                             files={"store/.keep": ""}, storage_mode=0o500)
        self.assertNotEqual(rc, 0)
        self.assertIn("config.lua:4: tls.acme.storage: cannot write in", out)

    def test_bad_renew_before_and_challenge(self):
        rc, out = self.check('tls = { { hosts = "a.test", acme = true },\n  acme = { directory '
                             '= "https://x/dir", storage = "store",\n  renew_before = "30x" } }\n',
                             files={"store/.keep": ""})
        self.assertNotEqual(rc, 0)
        self.assertIn("config.lua:5: tls.acme.renew_before: expected a duration", out)
        rc, out = self.check('tls = { { hosts = "a.test", acme = true },\n  acme = { directory '
                             '= "https://x/dir", storage = "store",\n  challenges = { "dns-01" '
                             '} } }\n', files={"store/.keep": ""})
        self.assertNotEqual(rc, 0)
        self.assertIn("tls.acme.challenges.1: unknown challenge 'dns-01'", out)

    def test_cert_with_acme_and_wildcard_refused(self):
        rc, out = self.check('tls = { { hosts = "a.test", acme = true, cert = "x.crt" },\n  '
                             '%s }\n' % self.ACME, files={"store/.keep": ""})
        self.assertNotEqual(rc, 0)
        self.assertIn("tls.1.cert: an entry with acme = true gets its certificate", out)
        rc, out = self.check('tls = { { hosts = "*.a.test", acme = true },\n  %s }\n' % self.ACME,
                             files={"store/.keep": ""})
        self.assertNotEqual(rc, 0)
        self.assertIn("is a wildcard", out)


if __name__ == "__main__":
    unittest.main()
