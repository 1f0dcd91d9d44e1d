"""Privilege dropping (README "Privileges"), against the real binary started as root: with
user = "nobody" it binds, then every thread of the process runs as nobody (read from
/proc/PID/task/*/status) and it serves; without user it refuses to serve as root, unless
user = "root" says so; the access log is the user's and is reopened on SIGUSR1; a reload
that adds a port below 1024 after the drop is refused with the reason, and the old
configuration keeps serving. Skipped, with the reason, when not run as root."""

import grp
import os
import pwd
import shutil
import signal
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import (TlsClient, Umbra, http_get, make_cert, port_is_free,  # noqa: E402
                           tls_context, wait_until)

NOBODY = pwd.getpwnam("nobody")
# A group other than nobody's own, to see the group setting take.
OTHER_GROUP = grp.getgrnam("daemon")
# A route whose hook answers with a word (HOOK % word), and a static route.
HOOK = ('routes = { { path = "/files/", root = "www" },\n'
        '           { path = "/", on_request = function(req) return umbra.respond(200, "%s\\n") end } }\n')
FILES = {"www/a.txt": "file\n"}


def open_up(d):
    """The test's folder (made 0700 by root) readable by nobody: the static files, and the
    config that a reload reads as nobody."""
    os.chmod(d, 0o755)


def ids(path):
    """(uids, gids, groups) from a /proc status file: real, effective, saved, fs."""
    fields = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.split()
    return ([int(x) for x in fields["Uid"]], [int(x) for x in fields["Gid"]],
            sorted(int(x) for x in fields.get("Groups", [])))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def threads(pid):
    return sorted(os.listdir("/proc/%d/task" % pid))


def privileged_free_port():
    """A port below 1024 that nothing uses on 127.0.0.1 (bound and released as root)."""
    for port in range(1023, 900, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise unittest.SkipTest("no free port below 1024 on 127.0.0.1")


@unittest.skipUnless(os.geteuid() == 0, "privilege dropping needs root to start as "
                     "(CI runs as root); run these tests as root")
class DropTest(unittest.TestCase):
    def start(self, body, **kw):
        return Umbra(body, as_root=False, setup=open_up, files=FILES, **kw)

    def assert_all_threads(self, pid, uid, gid, groups):
        tids = threads(pid)
        for tid in tids:
            u, g, sup = ids("/proc/%d/task/%s/status" % (pid, tid))
            self.assertEqual(u, [uid] * 4, "thread %s uids" % tid)
            self.assertEqual(g, [gid] * 4, "thread %s gids" % tid)
            self.assertEqual(sup, groups, "thread %s groups" % tid)
        return tids

    def test_user_nobody_every_thread_drops_and_serves(self):
        body = 'user = "nobody"\n' + HOOK % "dropped"
        with self.start(body, workers=2) as u:
            pid = u.proc.pid
            tids = self.assert_all_threads(pid, NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])
            # main, listener, 2 workers, at least: the drop reached threads it did not start
            self.assertGreaterEqual(len(tids), 4, tids)
            self.assertIn("serving as user nobody", u.log())
            status, _, data = http_get(u.port, "/")
            self.assertEqual((status, data), (200, b"dropped\n"))
            status, _, data = http_get(u.port, "/files/a.txt")
            self.assertEqual((status, data), (200, b"file\n"))
            # After the requests, threads made since (if any) are nobody's too.
            self.assert_all_threads(pid, NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])

    def test_pid_file_written_as_root_and_removed_or_emptied_as_the_user(self):
        # Issue #26: the pid file is opened (and locked) as root before the drop, so a
        # folder only root writes works; the user cannot remove it there at exit, so it is
        # emptied, and the next start takes it over. In a folder the user owns, it goes.
        root_only = tempfile.mkdtemp(prefix="umbra-pid-root-")
        users = tempfile.mkdtemp(prefix="umbra-pid-user-")
        try:
            os.chmod(root_only, 0o755)
            os.chown(users, NOBODY.pw_uid, NOBODY.pw_gid)
            for folder, left in ((root_only, ""), (users, None)):
                pidfile = os.path.join(folder, "umbra.pid")
                body = 'user = "nobody"\npid = "%s"\n' % pidfile + HOOK % "p"
                for _ in range(2):  # the second start takes over what the first left
                    with self.start(body) as u:
                        with open(pidfile) as f:
                            self.assertEqual(f.read(), "%d\n" % u.proc.pid)
                        self.assertEqual(u.stop(signal.SIGTERM, 10), 0)
                        if left is None:
                            self.assertFalse(os.path.exists(pidfile), folder)
                        else:
                            with open(pidfile) as f:
                                self.assertEqual(f.read(), left)
        finally:
            shutil.rmtree(root_only, ignore_errors=True)
            shutil.rmtree(users, ignore_errors=True)

    def test_group_setting_sets_the_group(self):
        body = 'user = "nobody"\ngroup = "daemon"\n' + HOOK % "g"
        with self.start(body) as u:
            # initgroups: the group given, plus nobody's supplementary groups (none); never 0.
            self.assert_all_threads(u.proc.pid, NOBODY.pw_uid, OTHER_GROUP.gr_gid,
                                    [OTHER_GROUP.gr_gid])
            self.assertEqual(http_get(u.port, "/")[0], 200)

    def test_root_without_user_is_refused_before_binding(self):
        port = privileged_free_port()
        body = 'listen = { "127.0.0.1:%d" }\n' % port + HOOK % "x"
        with self.start(body, expect_fail=True) as u:
            self.assertEqual(u.returncode, 1, u.log())
            self.assertIn("config.lua: refusing to serve as root", u.log())
            self.assertIn('user = "root"', u.log())
        self.assertTrue(port_is_free(port))

    def test_user_root_is_the_explicit_way_to_stay_root(self):
        with self.start('user = "root"\n' + HOOK % "root") as u:
            self.assert_all_threads(u.proc.pid, 0, 0, ids("/proc/self/status")[2])
            self.assertEqual(http_get(u.port, "/")[2], b"root\n")
            self.assertIn('serving as root (user = "root")', u.log())

    def test_unknown_user_and_lone_group_are_config_errors_with_line(self):
        with self.start('\nuser = "no-such-user-umbra"\n' + HOOK % "x", expect_fail=True) as u:
            self.assertEqual(u.returncode, 1)
            self.assertRegex(u.log(), r"config\.lua:4: user: no such user 'no-such-user-umbra'")
        with self.start('group = "daemon"\n' + HOOK % "x", expect_fail=True) as u:
            self.assertEqual(u.returncode, 1)
            self.assertRegex(u.log(), r"config\.lua:3: group: set user too")

    def test_privileged_port_bound_before_the_drop(self):
        port = privileged_free_port()
        body = 'listen = { "127.0.0.1:%d" }\nuser = "nobody"\n' % port + HOOK % "low"
        with self.start(body) as u:
            self.assertEqual(u.port, port)
            self.assertEqual(http_get(port, "/")[2], b"low\n")
            self.assert_all_threads(u.proc.pid, NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])

    def test_access_log_is_the_users_and_reopens_after_rotation(self):
        def setup(d):
            open_up(d)
            os.mkdir(os.path.join(d, "logs"))
            os.chown(os.path.join(d, "logs"), NOBODY.pw_uid, NOBODY.pw_gid)

        body = ('user = "nobody"\naccess_log = { path = "logs/access.log" }\n' +
                HOOK % "log")
        with Umbra(body, as_root=False, setup=setup, files=FILES) as u:
            log = u.path("logs/access.log")
            self.assertEqual(os.stat(log).st_uid, NOBODY.pw_uid)
            http_get(u.port, "/first")
            self.assertTrue(wait_until(lambda: b"/first" in read(log), 5))
            os.rename(log, log + ".1")  # what logrotate does, then its postrotate:
            u.proc.send_signal(signal.SIGUSR1)
            self.assertTrue(wait_until(lambda: os.path.exists(log), 5), u.log())
            http_get(u.port, "/second")
            self.assertTrue(wait_until(lambda: b"/second" in read(log), 5),
                            u.log())
            self.assertEqual(os.stat(log).st_uid, NOBODY.pw_uid)
            self.assertNotIn("SIGUSR1: ", "".join(l for l in u.log().splitlines(True)
                                                 if "[error]" in l))

    def test_reload_adding_a_privileged_port_is_refused_whole(self):
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            start = int(f.read())
        port = privileged_free_port()
        if port >= start:
            self.skipTest("net.ipv4.ip_unprivileged_port_start is %d: port %d is not "
                          "privileged on this machine" % (start, port))
        with self.start('user = "nobody"\n' + HOOK % "v1") as u:
            old = u.port
            with open(u.config_path, "w") as f:
                f.write('listen = { "127.0.0.1:%d", "127.0.0.1:%d" }\nuser = "nobody"\n'
                        % (old, port) + HOOK % "v2")
            mark = len(u.log())
            u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: "configuration not reloaded" in u.log()[mark:],
                                       10), u.log())
            tail = u.log()[mark:]
            self.assertIn("config.lua: listen 127.0.0.1:%d: Permission denied: a port below "
                          "1024 needs root or CAP_NET_BIND_SERVICE" % port, tail)
            # Nothing of the new file applies: the old answer, the old port only.
            self.assertEqual(http_get(old, "/")[2], b"v1\n")
            self.assertTrue(port_is_free(port))
            self.assertTrue(u.alive())
            # A reload that keeps to unprivileged ports still works as the user.
            with open(u.config_path, "w") as f:
                f.write('listen = { "127.0.0.1:%d" }\nuser = "nobody"\n' % old +
                        HOOK % "v3")
            mark = len(u.log())
            u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(
                lambda: "configuration reloaded" in u.log()[mark:], 10), u.log())
            self.assertTrue(wait_until(lambda: http_get(old, "/")[2] == b"v3\n", 5))

    def test_keys_read_as_root_at_start_and_as_the_user_on_reload(self):
        # A key only root may read: read before the drop, it serves; a reload after the
        # drop cannot read it: the certificate reload and the configuration reload say so
        # (file and line), and the certificate loaded at start keeps serving.
        def setup(d):
            open_up(d)
            os.mkdir(os.path.join(d, "tls"), 0o755)
            cert, key = make_cert(os.path.join(d, "tls"), cn="umbra.test", san="DNS:umbra.test")
            os.chmod(key, 0o600)

        body = ('listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }\nuser = "nobody"\n'
                'tls = { { hosts = { "umbra.test" }, cert = "tls/cert.pem", key = "tls/key.pem" } }\n'
                + HOOK % "tls")
        with Umbra(body, as_root=False, setup=setup, files=FILES) as u:
            tls_port = u.ports[1]
            with TlsClient(tls_port, tls_context(), server_name="umbra.test") as c:
                self.assertEqual(c.get("/").body, b"tls\n")
            mark = len(u.log())
            u.proc.send_signal(signal.SIGHUP)
            self.assertTrue(wait_until(lambda: "SIGHUP: configuration" in u.log()[mark:], 10),
                            u.log())
            tail = u.log()[mark:]
            self.assertIn("key.pem: Permission denied (keeping the certificate loaded before "
                          "for umbra.test)", tail)
            self.assertIn("config.lua:5: tls.1.key: tls/key.pem: Permission denied", tail)
            self.assertIn("configuration not reloaded", tail)
            with TlsClient(tls_port, tls_context(), server_name="umbra.test") as c:
                self.assertEqual(c.get("/").body, b"tls\n")
            self.assertTrue(u.alive())


if __name__ == "__main__":
    unittest.main()
