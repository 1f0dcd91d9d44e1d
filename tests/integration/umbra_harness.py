"""Helpers for Umbra's integration tests: start the real binary, talk raw HTTP to it.

Python 3 standard library only. Every server listens on 127.0.0.1 with an ephemeral port,
every wait is bounded in time, and the process is killed by its PID (never by name).

    with Umbra('routes = { { path = "/", root = "www" } }',
               files={"www/a.txt": "hi"}) as u:
        status, headers, body = http_get(u.port, "/a.txt")
"""

import http.client
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time


def need_debian_python(*modules):
    """Imports modules (names such as "grpc" or "h2.config"); when one is missing and this
    is not Debian's /usr/bin/python3 (CTest may have found another interpreter, and
    Debian's python3-grpcio and python3-h2 belong to Debian's), runs the test again under
    /usr/bin/python3 instead. Raises ImportError when Debian's lacks it too."""
    import importlib
    import sys
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
                os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        raise

DEFAULT_BIN = "/work/main/build/umbra"

# "... [info] umbra 0.1.0 listening on 127.0.0.1:41234, [::1]:41235 with 1 workers (config ...)"
_START_RE = re.compile(r"listening on (.+?) with \d+ workers")
_PORT_RE = re.compile(r":(\d+)$")


def umbra_bin():
    """Path of the binary under test: $UMBRA_BIN, else the default build."""
    return os.environ.get("UMBRA_BIN") or DEFAULT_BIN


def source_dir():
    """The repository root: $UMBRA_SOURCE_DIR, else two folders above this file."""
    return os.environ.get("UMBRA_SOURCE_DIR") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", ".."))


class UmbraError(Exception):
    """The server did not start (or did not fail) as the test expected."""


class SanitizerReport(AssertionError):
    """The server's stderr holds an AddressSanitizer, LeakSanitizer, ThreadSanitizer or
    UndefinedBehaviorSanitizer report."""


_SANITIZER_RE = re.compile(r"(ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|"
                           r"ThreadSanitizer: |runtime error: |SUMMARY: \w+Sanitizer)")


def sanitizer_check_enabled():
    """True when $UMBRA_SANITIZER_CHECK asks the harness to fail on sanitizer reports."""
    return os.environ.get("UMBRA_SANITIZER_CHECK", "") not in ("", "0")


def sanitizer_build():
    """"asan", "tsan" or None: what $UMBRA_SANITIZE says the binary under test was built
    with (CMake passes it to the integration tests)."""
    v = os.environ.get("UMBRA_SANITIZE", "")
    return v if v in ("asan", "tsan") else None


def sanitizer_report(log):
    """The lines of log from the first sanitizer report on (at most 60), or "" if none."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if _SANITIZER_RE.search(line):
            return "\n".join(lines[max(0, i - 2):i + 60])
    return ""


def write_files(base, files):
    """Writes files (relative path -> bytes or str) under base, creating folders."""
    for rel, content in (files or {}).items():
        path = os.path.join(base, rel)
        os.makedirs(os.path.dirname(path) or base, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        with open(path, "wb") as f:
            f.write(content)


class Umbra:
    """Context manager running one umbra process on a generated config.

    config_body is appended to `listen = { "127.0.0.1:0" }` and `workers = N`, so it may
    override either. files are written under the temp dir (the config's folder), which is
    also the process's cwd; then setup(dir), if given, may add what files cannot express
    (symlinks, modes, mtimes) before the process starts. With expect_fail=True, the process is expected to exit before
    it logs its start-up line; __enter__ then waits for it and keeps its return code in
    .returncode and its stderr in .log(). preexec_fn runs in the child before exec (e.g.
    to lower its RLIMIT_NOFILE with resource.setrlimit).

    Run as root (as CI runs), the config also gets `user = "root"`, on its first line so
    that no line number moves: Umbra refuses to serve as root unless the file says so
    (README "Privileges"), and the tests' files and folders belong to root. A test of that
    rule passes as_root=False and writes its own user setting.

    With UMBRA_SANITIZER_CHECK=1 in the environment (CMake sets it for sanitizer builds),
    leaving the context raises SanitizerReport when the process's stderr holds a sanitizer
    report, so that a report fails the test even when the server kept running.
    """

    def __init__(self, config_body, files=None, workers=None, expect_fail=False,
                 start_timeout=10.0, args=(), setup=None, preexec_fn=None, raw=False,
                 as_root=True, env=None):
        self.config_body = config_body
        self.env = env  # variables added to the process's environment
        self.raw = raw  # config_body is the whole file (no listen/workers prepended)
        self.preexec_fn = preexec_fn
        self.as_root = as_root
        self.setup = setup
        self.files = files or {}
        # Tests that do not choose take $UMBRA_TEST_WORKERS (default 1): CI runs the cache
        # tests under ThreadSanitizer with 2, so that objects cross workers.
        self.workers = workers if workers is not None else int(
            os.environ.get("UMBRA_TEST_WORKERS") or 1)
        self.expect_fail = expect_fail
        self.start_timeout = start_timeout
        self.args = list(args)
        self.dir = None
        self.proc = None
        self.port = None
        self.ports = []
        self.returncode = None
        self._lines = []
        self._lock = threading.Lock()
        self._reader = None

    # -- lifecycle ------------------------------------------------------------------

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-it-")
        try:
            write_files(self.dir, self.files)
            if self.setup is not None:
                self.setup(self.dir)
            self.config_path = os.path.join(self.dir, "config.lua")
            with open(self.config_path, "w") as f:
                if self.as_root and os.geteuid() == 0:
                    f.write('user = "root" ')
                if not self.raw:
                    f.write('listen = { "127.0.0.1:0" }\nworkers = %d\n' % self.workers)
                f.write(self.config_body)
                f.write("\n")
                if os.environ.get("UMBRA_UPSTREAM_CLIENT"):
                    # Every upstream through the named client (CTest runs test_upstream
                    # once with each: Umbra's own HTTP/1.1 client and libcurl).
                    f.write('for _, u in pairs(type(upstreams) == "table" and upstreams or {}) '
                            'do u.client = "%s" end\n' % os.environ["UMBRA_UPSTREAM_CLIENT"])
            self._start()
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self._cleanup()
        if sanitizer_check_enabled():
            report = sanitizer_report(self.log())
            if report and exc[0] is None:
                raise SanitizerReport(report)
        return False

    def _start(self):
        self.proc = subprocess.Popen(
            [umbra_bin()] + self.args + [self.config_path], cwd=self.dir,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=self.preexec_fn, env=dict(os.environ, **self.env) if self.env else None)
        started = threading.Event()

        def drain():
            for raw in iter(self.proc.stderr.readline, b""):
                line = raw.decode("utf-8", "replace")
                with self._lock:
                    self._lines.append(line)
                m = _START_RE.search(line)
                if m and not started.is_set():
                    self.ports = [int(p.group(1)) for p in
                                  (_PORT_RE.search(a.strip()) for a in m.group(1).split(","))
                                  if p]
                    started.set()
            started.set()  # EOF: the process closed stderr (exited)

        self._reader = threading.Thread(target=drain, daemon=True)
        self._reader.start()
        if not started.wait(self.start_timeout):
            raise UmbraError("umbra did not log its start-up line within %.0f s:\n%s"
                             % (self.start_timeout, self.log()))
        if self.expect_fail:
            if self.ports:
                raise UmbraError("umbra started but was expected to fail:\n" + self.log())
            try:
                self.returncode = self.proc.wait(self.start_timeout)
            except subprocess.TimeoutExpired:
                raise UmbraError("umbra closed stderr but did not exit:\n" + self.log())
            self._reader.join(2)
            return
        if not self.ports:
            rc = self.proc.poll()
            self._reader.join(2)
            raise UmbraError("umbra exited (status %s) before listening:\n%s" % (rc, self.log()))
        self.port = self.ports[0]

    def _cleanup(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            if self._reader is not None:
                self._reader.join(2)
            if self.proc.stderr:
                self.proc.stderr.close()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- accessors --------------------------------------------------------------------

    def log(self):
        """Everything the process has written to stderr so far."""
        with self._lock:
            return "".join(self._lines)

    def log_lines(self, text, count, timeout=5.0):
        """The lines of the log that contain text, once there are count of them (the log is
        read by a thread: a line written as an answer went out may come a moment after it),
        or the ones there are after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [line for line in self.log().splitlines() if text in line]
            if len(lines) >= count or time.monotonic() >= deadline:
                return lines
            time.sleep(0.02)

    def path(self, rel):
        """Absolute path of rel under the temp dir."""
        return os.path.join(self.dir, rel)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Sends sig and waits for the exit, then for stderr to its end (a sanitizer's leak
        report comes after the exit), so log() has every line; returns the return code
        (None on timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._reader is not None:
            self._reader.join(10)
        return rc

    def cpu_seconds(self):
        """User + system CPU time the process has used, from /proc/PID/stat."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- clients ----------------------------------------------------------------------------

def connect(port, timeout=5):
    """A TCP connection to 127.0.0.1:port with a timeout on every operation."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def recv_all(sock, timeout=5, limit=64 << 20):
    """Reads until the peer closes, timeout seconds pass, or limit bytes arrive."""
    deadline = time.monotonic() + timeout
    chunks = []
    total = 0
    while total < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            break
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not data:
            break
        chunks.append(data)
        total += len(data)
    return b"".join(chunks)


def exchange(port, raw, timeout=5, half_close=False):
    """Sends raw bytes on a new connection; returns (bytes read, closed) where closed says
    whether the server closed the connection (EOF or reset) before timeout seconds."""
    if isinstance(raw, str):
        raw = raw.encode()
    deadline = time.monotonic() + timeout
    chunks = []
    with connect(port, timeout) as s:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b"".join(chunks), False
            r, _, _ = select.select([s], [], [], left)
            if not r:
                return b"".join(chunks), False
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return b"".join(chunks), True
            if not data:
                return b"".join(chunks), True
            chunks.append(data)


def request(port, raw, timeout=5, half_close=False):
    """Sends raw bytes on a new connection and returns all bytes read until the server
    closes or timeout seconds pass."""
    if isinstance(raw, str):
        raw = raw.encode()
    with connect(port, timeout) as s:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return recv_all(s, timeout)


def peer_closed(sock, timeout=3):
    """True when the peer closes (EOF or reset) within timeout; bytes read are discarded."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([sock], [], [], left)
        if not r:
            return False
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True


def http_get(port, path, headers=None, method="GET", body=None, timeout=5):
    """One request with http.client; returns (status, HTTPMessage headers, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


def req(target, method="GET", headers=(), body=None, host="umbra.test", close=True):
    """A raw HTTP/1.1 request: the request line, Host (none when host is None), headers (a
    sequence of (name, value)), a Content-Length for body (bytes) unless headers carry
    Content-Length or Transfer-Encoding, Connection: close when close, then body."""
    lines = ["%s %s HTTP/1.1" % (method, target)]
    if host is not None:
        lines.append("Host: %s" % host)
    lines += ["%s: %s" % h for h in headers]
    names = {h[0].lower() for h in headers}
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        lines.append("Content-Length: %d" % len(body))
    if close:
        lines.append("Connection: close")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return raw + (body or b"")


def fetch(port, raw, timeout=10, head=False):
    """Sends raw on a new connection and reads until the server closes (AssertionError if it
    has not closed within timeout seconds); the one parsed response (head: it answers a
    HEAD, so has no body)."""
    data, closed = exchange(port, raw, timeout=timeout)
    if not closed:
        raise AssertionError("connection still open after %ss: %r" % (timeout, data[:300]))
    return parse_response(data, head=head)


def fetch_req(port, target, method="GET", headers=(), body=None, host="umbra.test", timeout=10):
    """fetch() of req(target, ...) with Connection: close; a HEAD's response has no body."""
    return fetch(port, req(target, method, headers, body, host), timeout, head=method == "HEAD")


# -- raw response parsing ---------------------------------------------------------------

def h2_call(port, path, method="POST", headers=(), body=b"", trailers=None, timeout=10):
    """One request over HTTP/2 with prior knowledge (body under 64 KiB, then trailers if
    given): (status, headers dict, body, trailers as a list of pairs). Needs python3-h2
    (Debian's, for /usr/bin/python3: the tests that use it run under that)."""
    import h2.config
    import h2.connection
    import h2.events
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                              header_encoding="utf-8"))
    c.initiate_connection()
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, [(":method", method), (":scheme", "http"), (":authority", "localhost"),
                         (":path", path)] + list(headers), end_stream=not body and not trailers)
    if body:
        c.send_data(sid, body, end_stream=not trailers)
    if trailers:
        c.send_headers(sid, trailers, end_stream=True)
    s.sendall(c.data_to_send())
    head, data, tail, ended = None, b"", [], False
    try:
        while not ended:
            chunk = s.recv(65536)
            if not chunk:
                break
            for ev in c.receive_data(chunk):
                if isinstance(ev, h2.events.ResponseReceived):
                    head = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    data += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.TrailersReceived):
                    tail = list(ev.headers)
                elif isinstance(ev, h2.events.StreamEnded):
                    ended = True
                elif isinstance(ev, h2.events.StreamReset):
                    raise AssertionError("stream reset: %r" % ev.error_code)
            s.sendall(c.data_to_send())
    finally:
        s.close()
    if head is None or not ended:
        raise AssertionError("no complete answer")
    return int(head[":status"]), head, data, tail



class Response:
    """One parsed response: .status, .reason, .version, .headers (list of (name, value)),
    .body (bytes), .raw_head (bytes); .header(name) gives the first value or None."""

    def __init__(self, version, status, reason, headers, body, raw_head):
        self.version, self.status, self.reason = version, status, reason
        self.headers, self.body, self.raw_head = headers, body, raw_head

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    # Lets callers unpack: status, headers, body = resp
    def __iter__(self):
        return iter((self.status, self.headers, self.body))

    def __repr__(self):
        return "<Response %d %r, %d body bytes>" % (self.status, self.headers, len(self.body))


class ParseError(Exception):
    pass


def parse_responses(data, head_methods=(), strict=True):
    """Splits data into responses.

    head_methods: for each response in order, whether it answers a HEAD (no body); a
    sequence of booleans or of method names ("HEAD"). Responses past its end are taken as
    answering GET. 1xx, 204 and 304 never have a body. A body is Content-Length bytes,
    chunked, or (neither) everything up to the end of data. With strict, a truncated last
    response raises ParseError; otherwise it is returned as far as it goes.
    """
    flags = [m is True or (isinstance(m, str) and m.upper() == "HEAD") for m in head_methods]
    out = []
    pos = 0
    idx = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            raise ParseError("incomplete head at byte %d: %r" % (pos, data[pos:pos + 200]))
        raw_head = data[pos:end + 4]
        lines = data[pos:end].split(b"\r\n")
        m = re.match(rb"(HTTP/\d\.\d) (\d{3}) ?(.*)$", lines[0])
        if not m:
            raise ParseError("bad status line: %r" % lines[0])
        version, status, reason = m.group(1).decode(), int(m.group(2)), m.group(3).decode("latin-1")
        headers = []
        for line in lines[1:]:
            if b":" not in line:
                raise ParseError("bad header line: %r" % line)
            k, v = line.split(b":", 1)
            headers.append((k.decode("latin-1"), v.strip().decode("latin-1")))
        pos = end + 4
        hdr = {k.lower(): v for k, v in headers}
        is_head = idx < len(flags) and flags[idx]
        if 100 <= status < 200:
            body = b""  # interim: does not use up an entry of head_methods
            out.append(Response(version, status, reason, headers, body, raw_head))
            continue
        idx += 1
        if is_head or status in (204, 304):
            body = b""
        elif "transfer-encoding" in hdr and "chunked" in hdr["transfer-encoding"].lower():
            body, pos = _read_chunked(data, pos, strict)
        elif "content-length" in hdr:
            n = int(hdr["content-length"])
            body = data[pos:pos + n]
            if len(body) < n and strict:
                raise ParseError("body truncated: %d of %d bytes" % (len(body), n))
            pos += n
        else:
            body = data[pos:]
            pos = len(data)
        out.append(Response(version, status, reason, headers, body, raw_head))
    return out


def _read_chunked(data, pos, strict):
    body = []
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            if strict:
                raise ParseError("truncated chunked body")
            return b"".join(body), len(data)
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            end = data.find(b"\r\n\r\n", pos - 2)
            return b"".join(body), (end + 4 if end >= 0 else len(data))
        body.append(data[pos:pos + size])
        pos += size + 2


def parse_response(data, head=False):
    """The first final (non-1xx) response in data."""
    for r in parse_responses(data, head_methods=[head], strict=True):
        if r.status >= 200:
            return r
    raise ParseError("no final response in %r" % data[:200])


def read_response(sock, head=False, timeout=5):
    """Reads one final response from a keep-alive socket, exactly as far as it goes
    (Content-Length framing only, interim 1xx skipped; the socket stays usable). Bytes
    past the response are an error: use Client when responses are pipelined."""
    c = Client(None, sock=sock)
    r = c.read_response(head, timeout)
    if c.buf:
        raise ParseError("unexpected bytes after response: %r" % c.buf[:200])
    return r


class Client:
    """A keep-alive connection to 127.0.0.1:port (or the open socket sock) that keeps bytes
    read past one response in .buf for the next."""

    def __init__(self, port, timeout=5, sock=None):
        self.sock = sock if sock is not None else connect(port, timeout)
        self.buf = b""

    def send(self, raw):
        self.sock.sendall(raw.encode() if isinstance(raw, str) else raw)

    def read_response(self, head=False, timeout=5):
        """One final response (Content-Length framing, 1xx skipped). What a read that
        times out got stays in .buf."""
        deadline = time.monotonic() + timeout
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                r = parse_responses(self.buf[:end + 4], head_methods=[True])[0]
                if 100 <= r.status < 200:
                    self.buf = self.buf[end + 4:]
                    continue
                n = 0 if head or r.status in (204, 304) else int(r.header("content-length", "0"))
                while len(self.buf) < end + 4 + n:
                    self._recv(deadline)
                r.body = self.buf[end + 4:end + 4 + n]
                self.buf = self.buf[end + 4 + n:]
                return r
            self._recv(deadline)

    def _recv(self, deadline):
        self.buf += _recv_some(self.sock, deadline)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _recv_some(sock, deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("no complete response before the deadline")
    r, _, _ = select.select([sock], [], [], left)
    if not r:
        raise socket.timeout("no complete response before the deadline")
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("connection closed before the response was complete")
    return data


def class_context(cls, cm):
    """Enters the context manager cm (an Umbra, an Origin) for the unittest.TestCase class
    cls and returns what it gives; unittest exits it after tearDownClass, or as soon as
    setUpClass fails later, in the reverse order of entry. (TestCase.enterClassContext
    from Python 3.11.)"""
    entered = cm.__enter__()
    cls.addClassCleanup(cm.__exit__, None, None, None)
    return entered


def wait_until(pred, timeout=5, interval=0.02):
    """Polls pred() until it is true or timeout seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def port_is_free(port):
    """True when nothing accepts connections on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except OSError:
        return True


# -- assertions -------------------------------------------------------------------------

_IMF_FIXDATE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" \d{4} \d{2}:\d{2}:\d{2} GMT$")


class HttpAssertions:
    """Mixin for unittest.TestCase with checks every response must pass."""

    def assertCommonHeaders(self, resp, body_framed=True):
        """HTTP/1.1 status line, one IMF-fixdate Date, a non-empty Server, and (for
        responses that carry a body or are final and not 304/HEAD) a Content-Length."""
        self.assertEqual(resp.version, "HTTP/1.1", resp.raw_head)
        dates = resp.header_all("Date")
        self.assertEqual(len(dates), 1, "one Date header: %r" % resp.raw_head)
        self.assertRegex(dates[0], _IMF_FIXDATE)
        self.assertTrue(resp.header("Server"), "Server header: %r" % resp.raw_head)
        if body_framed:
            self.assertIsNotNone(resp.header("Content-Length"),
                                 "Content-Length: %r" % resp.raw_head)


# -- the scripted test origin (tests/origin/origin.c) -------------------------------------

_ORIGIN_RE = re.compile(r"listening on (\S+):(\d+)")
ORIGIN_PATTERN = b"0123456789abcdef"


def origin_bin():
    """Path of umbra-test-origin: $UMBRA_TEST_ORIGIN, else tests/ beside the umbra binary."""
    return os.environ.get("UMBRA_TEST_ORIGIN") or os.path.join(
        os.path.dirname(umbra_bin()), "tests", "umbra-test-origin")


def origin_body(size, offset=0):
    """The body the origin sends for size=N (from byte offset): "0123456789abcdef" repeated."""
    start = offset % 16
    reps = (start + size) // 16 + 1
    return (ORIGIN_PATTERN * reps)[start:start + size]


def echoed(resp):
    """What the origin's /echo saw, from its response: (request line, [(name, value)] in
    the order received, body bytes)."""
    n = int(resp.header("X-Echo-Head-Length"))
    head, body = resp.body[:n], resp.body[n:]
    lines = head.decode("latin-1").split("\r\n")
    fields = []
    for line in lines[1:]:
        if line:
            k, v = line.split(":", 1)
            fields.append((k, v.strip()))
    return lines[0], fields, body


def values(fields, name):
    """The values of the fields named name (in any case), in order, from [(name, value)]."""
    return [v for k, v in fields if k.lower() == name.lower()]


class Origin:
    """Context manager running one umbra-test-origin on an ephemeral 127.0.0.1 port.

    tls=(cert, key) serves HTTPS; record=True makes it append one line per request to a
    file in its own temp dir, read back with records(). .port, .url ("http://127.0.0.1:N"),
    .pid. The query parameters are listed by `umbra-test-origin -h`.

        with Origin() as o, Umbra(upstream_config(o.url)) as u:
            http_get(u.port, "/x?status=404")
    """

    def __init__(self, args=(), tls=None, record=True, threads=1, start_timeout=10.0):
        self.args = list(args)
        self.tls = tls
        self.record = record
        self.threads = threads
        self.start_timeout = start_timeout
        self.proc = None
        self.dir = None
        self.port = None
        self.record_path = None

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    @property
    def pid(self):
        return self.proc.pid

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="umbra-origin-")
        cmd = [origin_bin(), "-l", "127.0.0.1:0", "-t", str(self.threads)] + self.args
        if self.tls:
            cmd += ["--tls", self.tls[0], self.tls[1]]
        if self.record:
            self.record_path = os.path.join(self.dir, "record.txt")
            open(self.record_path, "w").close()
            cmd += ["--record", self.record_path]
        try:
            # stderr is inherited: the origin writes there only when something is wrong
            # (and sanitizer reports land in the test's output).
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            r, _, _ = select.select([self.proc.stdout], [], [], self.start_timeout)
            line = self.proc.stdout.readline().decode("utf-8", "replace") if r else ""
            m = _ORIGIN_RE.search(line)
            if not m:
                self.proc.kill()
                raise UmbraError("umbra-test-origin did not start (%r; its stderr is above)"
                                 % line)
            self.port = int(m.group(2))
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self._cleanup()
        return False

    def stop(self, timeout=10):
        """SIGTERM, then waits; returns the exit status (None on timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _cleanup(self):
        if self.proc is not None:
            if self.stop(5) is None:
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
            self.proc.stdout.close()
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def records(self):
        """The requests received so far: a list of (method, target, body length)."""
        out = []
        with open(self.record_path, "rb") as f:
            for line in f.read().decode("latin-1").splitlines():
                line = line.split(" range=", 1)[0]
                method, target, n = line.rsplit(" ", 2)
                out.append((method, target, int(n)))
        return out

    def ranges(self):
        """The Range value of each request received so far ("" without one), in order."""
        with open(self.record_path, "rb") as f:
            return [(line.split(" range=", 1) + [""])[1]
                    for line in f.read().decode("latin-1").splitlines()]

    def _control(self, path):
        raw = ("GET %s HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n" % path).encode()
        s = connect(self.port)
        if self.tls:
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s)
        with s:
            s.sendall(raw)
            return parse_response(recv_all(s, 5)).body.decode()

    def count(self):
        """Requests received so far (GET /__count, which is not counted itself)."""
        return int(self._control("/__count"))

    def stats(self):
        """Counters from GET /__stats: requests, accepted, open (this query's connection
        included), active (responses not finished), aborted (responses whose peer left)."""
        return {k: int(v) for k, v in
                (line.split() for line in self._control("/__stats").splitlines())}


def make_cert(dirpath, cn="127.0.0.1", san="IP:127.0.0.1"):
    """Generates a self-signed P-256 certificate with the openssl command; returns
    (cert path, key path) under dirpath."""
    cert = os.path.join(dirpath, "cert.pem")
    key = os.path.join(dirpath, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=" + cn,
                    "-addext", "subjectAltName=" + san, "-keyout", key, "-out", cert],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    return cert, key


def free_port():
    """A 127.0.0.1 port free now, for a server the test starts (bound once, then released:
    another process could take it meanwhile, which is why a dead server's port comes from
    closed_port() instead)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_held_ports = []


def closed_port():
    """A 127.0.0.1 port nothing listens on, and nothing can: the socket stays bound, without
    listening, for the life of the test process (connects to it are refused). A port bound
    once and released could be taken again by an ephemeral connection or by another server
    meanwhile, which made the dead-origin tests flaky."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _held_ports.append(s)
    return s.getsockname()[1]


def release_port(port):
    """Lets a server bind a port from closed_port() (a dead server coming back)."""
    for s in list(_held_ports):
        if s.getsockname()[1] == port:
            _held_ports.remove(s)
            s.close()


def vm_rss_kb(pid):
    """Resident set size of process pid in kB, from /proc/PID/status."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise UmbraError("no VmRSS for pid %d" % pid)


# -- TLS: a test PKI and TLS clients -------------------------------------------------------

class CertAuthority:
    """A small PKI made with the openssl command under dirpath (ECDSA P-256 throughout): a
    root CA, an intermediate CA signed by the root, and leaf certificates signed by the
    intermediate. .root is the root's PEM file, the only thing clients should trust, so a
    server that does not send the intermediate fails verification.

        ca = CertAuthority(d)
        crt, key = ca.leaf("example", ["example.com", "*.example.com"])
        ctx = tls_context(ca.root)
    """

    def __init__(self, dirpath, days=2):
        self.dir = dirpath
        self.days = days
        self._serial = 1000
        os.makedirs(dirpath, exist_ok=True)
        self.root = os.path.join(dirpath, "root.crt")
        self.root_key = self._key("root")
        self._run(["req", "-x509", "-new", "-key", self.root_key, "-subj", "/CN=Umbra Test Root",
                   "-days", str(days), "-addext", "basicConstraints=critical,CA:TRUE",
                   "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", self.root])
        self.intermediate_key = self._key("intermediate")
        self.intermediate = self._sign("intermediate", "/CN=Umbra Test Intermediate",
                                       self.intermediate_key, self.root, self.root_key,
                                       "basicConstraints=critical,CA:TRUE,pathlen:0\n"
                                       "keyUsage=critical,keyCertSign,cRLSign\n")

    def _run(self, args):
        subprocess.run(["openssl"] + args, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=30)

    def _key(self, name):
        path = os.path.join(self.dir, name + ".key")
        self._run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                   "-out", path])
        return path

    def _sign(self, name, subj, key, ca_crt, ca_key, ext):
        csr = os.path.join(self.dir, name + ".csr")
        extfile = os.path.join(self.dir, name + ".ext")
        out = os.path.join(self.dir, name + ".pem")
        with open(extfile, "w") as f:
            f.write(ext)
        self._serial += 1
        self._run(["req", "-new", "-key", key, "-subj", subj, "-out", csr])
        self._run(["x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key,
                   "-set_serial", str(self._serial), "-days", str(self.days),
                   "-extfile", extfile, "-out", out])
        return out

    def leaf(self, name, hosts, org=None, chain=True):
        """A server certificate for hosts (DNS names; the first is also the CN), with O=org
        if given (to tell two certificates for the same names apart). Writes NAME.crt (the
        leaf, then the intermediate when chain) and NAME.key under the CA's folder; returns
        (crt path, key path), and .serial(NAME) gives its serial number."""
        key = self._key(name)
        subj = "/CN=%s" % hosts[0] + ("/O=%s" % org if org else "")
        ext = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
               "extendedKeyUsage=serverAuth\nsubjectAltName=%s\n"
               % ",".join("DNS:" + h for h in hosts))
        pem = self._sign(name + "-leaf", subj, key, self.intermediate, self.intermediate_key, ext)
        crt = os.path.join(self.dir, name + ".crt")
        with open(crt, "wb") as out:
            for part in ([pem, self.intermediate] if chain else [pem]):
                with open(part, "rb") as f:
                    out.write(f.read())
        return crt, key

    def read(self, name):
        """{"NAME.crt": bytes, "NAME.key": bytes}: the pair as Umbra's files= takes it."""
        out = {}
        for ext in ("crt", "key"):
            with open(os.path.join(self.dir, "%s.%s" % (name, ext)), "rb") as f:
                out["%s.%s" % (name, ext)] = f.read()
        return out


def tls_context(cafile=None, minimum=None, maximum=None, alpn=None, tickets=True):
    """A client SSLContext that verifies the chain against cafile (or, without cafile,
    verifies nothing). Host names are not checked by the context: tests look at the
    certificate with peer_cert_names. minimum/maximum: ssl.TLSVersion; alpn: a list of
    protocol names to offer; tickets=False asks for no session tickets."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if cafile:
        ctx.load_verify_locations(cafile)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if minimum is not None:
        ctx.minimum_version = minimum
    if maximum is not None:
        ctx.maximum_version = maximum
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if not tickets:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def tls_connect(port, ctx, server_name=None, session=None, timeout=5):
    """A TLS connection to 127.0.0.1:port with the handshake done; server_name is sent as
    SNI (None: no SNI), session is offered for resumption. Every operation has a timeout."""
    raw = connect(port, timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=server_name, session=session)
    except BaseException:
        raw.close()
        raise


def peer_cert_names(sock):
    """(CN, [DNS names of the SAN], O or None, serial number as a hex string) of the
    certificate the server sent; the connection must verify (tls_context with a cafile)."""
    cert = sock.getpeercert()
    subject = dict(kv for rdn in cert["subject"] for kv in rdn)
    sans = [v for k, v in cert.get("subjectAltName", ()) if k == "DNS"]
    return subject.get("commonName"), sans, subject.get("organizationName"), cert["serialNumber"]


def tls_recv_all(sock, timeout=5, limit=64 << 20):
    """Reads a TLS socket until the peer closes, timeout seconds pass, or limit bytes
    arrive. Returns (bytes, how) where how is "close_notify" (a clean TLS close), "eof" (the
    TCP connection ended without close_notify), "reset", "timeout" or "limit"."""
    import ssl
    deadline = time.monotonic() + timeout
    chunks = []
    total = 0
    while total < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), "timeout"
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return b"".join(chunks), "timeout"
        except ssl.SSLEOFError:
            return b"".join(chunks), "eof"
        except (ConnectionResetError, BrokenPipeError):
            return b"".join(chunks), "reset"
        if not data:
            return b"".join(chunks), "close_notify"
        chunks.append(data)
        total += len(data)
    return b"".join(chunks), "limit"


class TlsClient(Client):
    """A keep-alive TLS connection that keeps bytes read past one response for the next
    (a Client). .sock is the SSLSocket (for .version(), .session, getpeercert())."""

    def __init__(self, port, ctx, server_name=None, session=None, timeout=5):
        super().__init__(port, sock=tls_connect(port, ctx, server_name, session, timeout))

    def get(self, path, host="example.com", headers=(), timeout=5):
        """Sends one GET (keep-alive) and reads its response."""
        lines = ["GET %s HTTP/1.1" % path, "Host: %s" % host] + ["%s: %s" % h for h in headers]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        return self.read_response(timeout=timeout)

    def _recv(self, deadline):
        # A timeout on the socket, not select(): the SSL object may already hold the bytes.
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no complete response before the deadline")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed before the response was complete")
        self.buf += data


def client_hello(server_name=None, ctx=None):
    """The bytes of a TLS ClientHello (as the ssl module would send it), for tests that send
    part of one by hand."""
    import ssl
    ctx = ctx or tls_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def log_lines_with(umbra, needle):
    """The lines of umbra's log that contain needle."""
    return [line for line in umbra.log().splitlines() if needle in line]


# -- the admin listener's metrics -----------------------------------------------------------

_ADMIN_RE = re.compile(r"admin: serving /metrics and /status on 127\.0\.0\.1:(\d+)")
_SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def admin_port(umbra):
    """The port of umbra's admin listener, from its last "admin: serving" log line (a
    config with admin = { listen = "127.0.0.1:0" })."""
    m = _ADMIN_RE.findall(umbra.log())
    if not m:
        raise AssertionError("no admin line in the log:\n" + umbra.log())
    return int(m[-1])


def scrape(umbra, path="/metrics"):
    """The text of GET path on umbra's admin listener (AssertionError unless 200)."""
    status, headers, body = http_get(admin_port(umbra), path)
    if status != 200:
        raise AssertionError("%s: %d %r" % (path, status, body))
    return body.decode()


def parse_metrics(text):
    """{(name, frozenset of (label, value)): float} from the Prometheus text format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise AssertionError("not a sample line: %r" % line)
        labels = frozenset(_LABEL_RE.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(samples, name, **labels):
    """The value of the sample name{labels} in parse_metrics' result, or None."""
    return samples.get((name, frozenset(labels.items())))


# -- several nodes ----------------------------------------------------------------------

def free_ports(n):
    """n distinct 127.0.0.1 TCP ports that were free a moment ago (bound to port 0 together,
    then released): for configs that must name their ports before the processes start, as
    the nodes of a cluster name each other. Another process may take one meanwhile; the
    caller's start then fails loudly (UmbraError), never silently."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class UmbraCluster:
    """Context manager running n Umbra processes that form one ring (README "Cluster") on
    127.0.0.1 ports chosen by free_ports. body(i, ports) gives node i's config body (without
    `listen` and `cluster`, which are added: node i listens on ports[i] and names every
    node as a peer, itself included, with the shared secret; a list gives each node its
    own, for tests of nodes that do not trust each other). .nodes is the list of Umbra
    objects (each with its own temp dir and process), .ports their ports. Starting retries
    twice with new ports when one was taken meanwhile."""

    def __init__(self, n, body, secret="integration-secret-0123456789", workers=None,
                 attempts=3):
        self.n = n
        self.body = body
        self.secret = secret
        self.workers = workers
        self.attempts = attempts
        self.nodes = []
        self.ports = []

    def config(self, i):
        peers = ", ".join('"127.0.0.1:%d"' % p for p in self.ports)
        return ('listen = { "127.0.0.1:%d" }\n%s\ncluster = { self = "127.0.0.1:%d", '
                'peers = { %s }, secret = "%s" }\n'
                % (self.ports[i], self.body(i, self.ports), self.ports[i], peers,
                   self.secret if isinstance(self.secret, str) else self.secret[i]))

    def __enter__(self):
        for attempt in range(self.attempts):
            self.ports = free_ports(self.n)
            self.nodes = []
            try:
                for i in range(self.n):
                    node = Umbra(self.config(i), workers=self.workers)
                    node.__enter__()
                    self.nodes.append(node)
                return self
            except UmbraError:
                self._stop_all()
                if attempt == self.attempts - 1:
                    raise
        return self

    def _stop_all(self):
        for node in self.nodes:
            node._cleanup()
        self.nodes = []

    def __exit__(self, *exc):
        reports = []
        for node in self.nodes:
            try:
                node.__exit__(*exc)
            except SanitizerReport as e:
                reports.append(str(e))
        self.nodes = []
        if reports and exc[0] is None:
            raise SanitizerReport("\n".join(reports))
        return False
