#!/usr/bin/env python3
"""The README's benchmark section, made from the committed results files (issue 26).

    bench/readme.py           prints the section (what goes between the README's markers)
    bench/readme.py --write   rewrites the README's section in place
    bench/readme.py --check   exits 1 (showing the difference) when the README's section is
                              not what this script prints

Every figure of the section comes from a file under bench/results/: the run of every
scenario, bench/results/README.md (bench/run with no argument), and the reruns,
bench/results/reruns/*.md (bench/run --rerun SCENARIO...: one file per scenario, with its
command, commit and what it reran). A rerun's rows stand below the first run's, marked as
reruns; they never replace them. A row whose anchor reached one of its own limits in a
round (nginx's keepalive_requests: the requests of a round divided by its connections
reach half of it) shows no ratio: its figure is the limit's, and the row says so.

Python 3 standard library only; the README's test (tests/integration/test_benchreadme.py)
runs it.
"""

import difflib
import glob
import os
import re
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
BEGIN = "<!-- bench: begin -->"
END = "<!-- bench: end -->"
SCENARIOS = ("static", "proxy", "cache", "hit", "tls", "h2", "lua", "idle", "cgi", "purge",
             "ws", "compress", "l2", "cluster", "disk", "traffic", "acme", "h2up")


class Missing(Exception):
    """A figure the section needs is not in the results file."""


# ---- reading results files -------------------------------------------------------------


class Section:
    """One scenario's part of a results file: its bullets, tables and code blocks."""

    def __init__(self, name, lines):
        self.name = name
        self.lines = lines
        self.text = "\n".join(lines)
        self.tables = []
        self.code = []
        fence, block, table = None, [], None
        for ln in lines:
            if ln.startswith("```"):
                if fence is None:
                    fence, block = ln[3:].strip(), []
                else:
                    self.code.append((fence, "\n".join(block)))
                    fence = None
                continue
            if fence is not None:
                block.append(ln)
                continue
            if ln.startswith("|"):
                cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
                if table is None:
                    table = {"head": cells, "rows": []}
                    self.tables.append(table)
                elif not all(re.fullmatch(r"-+:?|:?-+:?", c) for c in cells):
                    table["rows"].append(dict(zip(table["head"], cells)))
            else:
                table = None

    def row(self, first, **match):
        """The first table row whose first cell is FIRST (or starts with it, when FIRST ends
        with '*') and whose other cells match (keys with '_' for ' ')."""
        for t in self.tables:
            for r in t["rows"]:
                v = r[t["head"][0]]
                ok = v.startswith(first[:-1]) if first.endswith("*") else v == first
                if ok and all(r.get(k.replace("_", " ")) == w for k, w in match.items()):
                    return r
        raise Missing("%s: no row %s %s" % (self.name, first, match))

    def bullet(self, key):
        """The text of the first bullet "- KEY: TEXT"."""
        for ln in self.lines:
            if ln.startswith("- %s: " % key):
                return ln[len(key) + 4:]
        raise Missing("%s: no bullet '%s'" % (self.name, key))

    def nginx_conf(self):
        for lang, text in self.code:
            if lang == "nginx":
                return text
        raise Missing("%s: no nginx.conf" % self.name)


class Results:
    """A results file: its scenario sections by name, and its header's bullets."""

    def __init__(self, path, root=ROOT):
        self.path = path
        self.rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        self.all = lines
        self.head = []
        self.sections = {}
        fence = False
        cur, level = None, None
        for ln in lines:
            if ln.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^(#+) ([a-z0-9]+): ", ln)
            if m and m.group(2) in SCENARIOS and (level is None or len(m.group(1)) <= level):
                level = len(m.group(1))
                cur = m.group(2)
                self.sections[cur] = []
                continue
            if not fence and cur and level and re.match(r"^#{1,%d} " % level, ln):
                cur = None
            if cur:
                self.sections[cur].append(ln)
            elif not self.sections:
                self.head.append(ln)
        self.sections = {k: Section(k, v) for k, v in self.sections.items()}

    def head_bullet(self, key, default=None):
        """The first bullet "- KEY: TEXT" of the file (its head, else its first section)."""
        for ln in self.all:
            if ln.startswith("- %s: " % key):
                return ln[len(key) + 4:]
        if default is not None:
            return default
        raise Missing("%s: no '%s' bullet" % (self.rel, key))

    def commit(self):
        """The commit measured: the "- commit:" bullet, else the "- umbra: ..., commit X"."""
        c = self.head_bullet("commit", "")
        if not c:
            m = re.search(r", commit (.*)$", self.head_bullet("umbra", ""))
            c = m.group(1) if m else "unknown"
        return c


# ---- numbers --------------------------------------------------------------------------


def f(v):
    try:
        return float(v)
    except ValueError as e:
        raise Missing("not a number: %r" % v) from e


def n0(v):
    """225270.19 -> 225,270"""
    return "{:,}".format(round(f(v)))


def n1(v):
    return "{:,.1f}".format(f(v))


def rounds(v):
    """The figures of a "per round" cell (a unit in brackets dropped)."""
    return [f(x) for x in re.sub(r"\(.*?\)", "", v).split()]


def krange(vals):
    """[226292.02, 380780.57] -> "226k to 381k" """
    return "%dk to %dk" % (round(min(vals) / 1000), round(max(vals) / 1000))


def first_num(text):
    m = re.search(r"[-+]?[0-9][0-9.]*", text)
    if not m:
        raise Missing("no number in %r" % text)
    return m.group(0)


# ---- limits reached ---------------------------------------------------------------------

H2_BODY = {"hit1m": 1048576}


def h2_capped(sec, case):
    """None, or what shows that nginx's rounds of h2/CASE reached its keepalive_requests
    (which in nginx 1.22 also caps an HTTP/2 connection, and h2load does not reopen it)."""
    m = re.search(r"h2load -t\d+ -c(\d+) -m\d+ -D(\d+)", sec.text)
    if not m:
        raise Missing("h2: h2load's -c and -D")
    conns, dur = int(m.group(1)), int(m.group(2))
    m = re.search(r"keepalive_requests (\d+);", sec.nginx_conf())
    if not m:
        return None
    cap = int(m.group(1))
    r = sec.row("h2/" + case, server="nginx")
    per_round = rounds(r["per round"])
    if r["unit"] == "MB/s":
        per_round = [x * 1e6 / H2_BODY[case] for x in per_round]
    per_conn = [x * dur / conns for x in per_round]
    top = max(per_conn)
    if top * 2 < cap:
        return None
    k = "{:,}".format(cap)
    if all(abs(x - cap) < 1 for x in per_conn):
        return "= %d connections x keepalive_requests %s in %d s, every round" % (conns, k, dur)
    if any(abs(x - cap) < 1 for x in per_conn):
        return "= %d connections x keepalive_requests %s in %d s in a round" % (conns, k, dur)
    return ("up to %s requests per connection a round, past half of keepalive_requests %s"
            % ("{:,}".format(round(top)), k))


# ---- the rows -------------------------------------------------------------------------
#
# Each row: (label, scenario, function of the scenario's Section giving the cells Umbra,
# nginx, Varnish, Umbra / nginx, Umbra / Varnish, target).


def r_static(case, unit, col, rcol):
    def cells(s):
        u, n = s.row("static/" + case, server="umbra"), s.row("static/" + case, server="nginx")
        return (n0(u[col]) + " " + unit, n0(n[col]) + " " + unit, "", u[rcol], "", "≥ 1.0")
    return cells


def r_proxy(case, target):
    def cells(s):
        k = "proxy/" + case
        u, n = s.row(k, server="umbra"), s.row(k, server="nginx")
        bound = " (%s of bound)" % u["of bound"] if u["of bound"] != "-" else ""
        t = target
        if "{backend}" in t:
            t = t.format(backend=s.row(k, server="backend")["of bound"])
        return (n0(u["median req/s"]) + " req/s" + bound, n0(n["median req/s"]) + " req/s", "",
                u["Umbra/nginx"], "", t)
    return cells


def r_cache(case, col, unit, target):
    def cells(s):
        k = "cache/" + case
        u, n, v = (s.row(k, server=x) for x in ("umbra", "nginx", "varnish"))
        return (n0(u[col]) + " " + unit, n0(n[col]) + " " + unit, n0(v[col]) + " " + unit,
                u["Umbra/nginx"], u["Umbra/Varnish"], target)
    return cells


def r_herd(s):
    out = []
    for x in ("umbra", "nginx", "varnish"):
        r = s.row("cache/herd", server=x)
        out.append("origin requests per round %s, median %s ms"
                   % (r["origin requests per round"], n1(r["median latency ms"])))
    return (out[0], out[1], out[2], "", "", "1 request, ≤ 70 ms")


def r_nostore(s):
    u, n, v = (s.row("cache/nostore", server=x) for x in ("umbra", "nginx", "varnish"))
    return (n0(u["median req/s"]) + " req/s (%s of bound)" % u["of bound"],
            n0(n["median req/s"]) + " req/s", n0(v["median req/s"]) + " req/s",
            u["Umbra/nginx"], u["Umbra/Varnish"], "≥ 0.95 of bound")


def r_sieve(s):
    sv, lru = s.row("sieve"), s.row("lru")
    return ("SIEVE " + sv["hit ratio"], "", "", "", "",
            "≥ LRU (%s): %s ×" % (lru["hit ratio"], sv["/ LRU"]))


def r_hit_nginx(s):
    u = s.row("hit/hit1k", server="umbra-hit", compared="x nginx")
    n = s.row("hit/hit1k", server="nginx")
    return (n0(u["median req/s"]) + " req/s", n0(n["median req/s"]) + " req/s", "", u["ratio"],
            "", "≥ 1.0")


def r_hit_respond(s):
    u = s.row("hit/hit1k", server="umbra-hit", compared="x umbra-respond")
    r = s.row("hit/hit1k", server="umbra-respond")
    return ("%s vs %s req/s" % (n0(u["median req/s"]), n0(r["median req/s"])), "", "", "", "",
            "≥ 0.95: %s" % u["ratio"])


def r_tls(case, unit, target):
    def cells(s):
        u, n = s.row("tls/" + case, server="umbra"), s.row("tls/" + case, server="nginx")
        return (n0(u["median"]) + unit, n0(n["median"]) + unit, "", u["Umbra/nginx"], "", target)
    return cells


def r_h2(case, unit, target):
    def cells(s):
        u, n = s.row("h2/" + case, server="umbra"), s.row("h2/" + case, server="nginx")
        capped = h2_capped(s, case)
        if capped:
            return (n0(u["median"]) + " " + unit,
                    "%s %s (%s): at or near nginx's limit, not a figure" % (n0(n["median"]), unit, capped),
                    "", "none: to be re-measured", "", target)
        return (n0(u["median"]) + " " + unit, n0(n["median"]) + " " + unit, "", u["Umbra/nginx"],
                "", target)
    return cells


def r_idle(case, target):
    def cells(s):
        u, n = s.row("idle/" + case, server="umbra"), s.row("idle/" + case, server="nginx")
        col = "median bytes per connection"
        return (n0(u[col]) + " B", n0(n[col]) + " B", "", u["Umbra/nginx"], "", target)
    return cells


def r_lua(case):
    def cells(s):
        u, n = s.row("lua/" + case, server="umbra"), s.row("lua/" + case, server="nginx")
        t = "≥ 1.2: %s" % u["met"]
        nr = rounds(n["req/s per round"])
        if max(nr) > 1.2 * min(nr):
            t += " (nginx's rounds ran %s)" % krange(nr)
        return (n0(u["median req/s"]) + " req/s", n0(n["median req/s"]) + " req/s", "",
                u["ratio"], "", t)
    return cells


def r_lua_hook(s):
    h, p = s.row("lua/hook-hit", server="umbra+hook"), s.row("lua/hook-hit", server="umbra")
    return ("%s vs %s req/s" % (n0(h["median req/s"]), n0(p["median req/s"])), "", "", "", "",
            "cost ≤ 10 %%: %s %%" % h["ratio"].lstrip("+").rstrip("%"))


def r_cgi(case):
    def cells(s):
        u, a = s.row("cgi/" + case, server="umbra"), s.row("cgi/" + case, server="apache")
        return (n0(u["median req/s"]) + " req/s", "Apache %s req/s" % n0(a["median req/s"]), "",
                "%s (× Apache)" % u["Umbra/Apache req/s"], "", "≥ 1.2 × Apache")
    return cells


def verdict_num(r):
    m = re.search(r": ([-+]?[0-9.]+%?) \(", r["verdict"]) or \
        re.search(r"costs ([-+]?[0-9.]+%)", r["verdict"])
    if not m:
        raise Missing("purge: no figure in %r" % r["verdict"])
    return m.group(1)


def r_purge_linear(s):
    big, small = s.row("us per object, 100000"), s.row("us per object, 10000")
    return ("%s µs vs %s µs" % (big["median"], small["median"]), "", "", "", "",
            "≤ 1.5 × (linear): %s" % verdict_num(big))


def r_purge_during(s):
    d, o = s.row("hits/s during the purge"), s.row("hits/s outside it")
    t = s.row("purge s, 100000 (purge-hits runs)")["median"]
    x = s.row("during / outside")
    return ("%s vs %s req/s (purge: %s s)" % (n0(d["median"]), n0(o["median"]), t), "", "", "", "",
            "≥ 0.8: %s" % x["median"])


def r_purge_tagged(s):
    t, u = s.row("req/s, tagged 1 KiB hit"), s.row("req/s, untagged 1 KiB hit")
    cost = verdict_num(t).lstrip("+").rstrip("%")
    met = "met" if f(cost) <= 3 else "not met"
    return ("%s vs %s req/s" % (n0(t["median"]), n0(u["median"])), "", "", "", "",
            "cost ≤ 3 %%: %s %%, %s" % (cost, met))


def r_ws(case, unit, target):
    def cells(s):
        u, n = s.row("ws/" + case, server="umbra"), s.row("ws/" + case, server="nginx")
        return (n0(u["median"]) + " " + unit, n0(n["median"]) + " " + unit, "",
                u["Umbra/nginx"], "", target)
    return cells


def r_gzip(s):
    u = s.row("compress/gzip100k", server="umbra-gzip")
    n = s.row("compress/gzip100k", server="nginx")
    return (n0(u["median req/s"]) + " req/s", n0(n["median req/s"]) + " req/s (`gzip on`)", "",
            u["ratio"], "", "≥ 1.0")


def r_chit(s):
    c = s.row("compress/hit", server="umbra-chit")
    i = s.row("compress/hit", server="umbra-ihit")
    return ("%s vs %s req/s" % (n0(c["median req/s"]), n0(i["median req/s"])), "", "", "", "",
            "≥ 0.95: %s" % c["ratio"])


def r_l2_lat(s):
    r = s.row("l2 hit latency")
    return ("%s ms vs %s ms" % (first_num(r["p50 / req/s"]), first_num(r["compared"].split("hit", 1)[1])),
            "", "", "", "", "≤ 3 ×: %s" % r["ratio"])


def r_l2_rps(s):
    r = s.row("hit1k with l2")
    return ("%s vs %s req/s" % (n0(r["p50 / req/s"]), n0(first_num(r["compared"].split("l2", 1)[1]))),
            "", "", "", "", "≥ 0.95: %s" % r["ratio"])


def r_disk(s):
    u, n = s.row("hit16k", server="umbra"), s.row("hit16k", server="nginx")
    return (n0(u["median"]) + " req/s", n0(n["median"]) + " req/s (`proxy_cache`)", "",
            u["Umbra/nginx"], "", "≥ 1.3")


def r_disk_vs(case, target):
    def cells(s):
        try:
            u, n = s.row(case, server="umbra"), s.row(case, server="umbra-nodisk")
        except Missing:
            return ("not measured in this run", "", "", "", "", target)
        return ("%s vs %s req/s" % (n0(u["median"]), n0(n["median"])), "", "", "", "",
                "%s: %s" % (target, u["with disk / without"]))
    return cells


def r_traffic(case, row, what, target):
    def cells(s):
        try:
            r, b = s.row("traffic/" + case, server=row), s.row("traffic/" + case, server="umbra")
        except Missing:
            return ("not measured in this run", "", "", "", "", target)
        return ("%s vs %s req/s (%s)" % (n0(r["median req/s"]), n0(b["median req/s"]), what), "", "",
                "", "", "%s: %s" % (target, r["ratio"]))
    return cells


def r_traffic_nginx(s):
    u, n = s.row("traffic/limit-vs-nginx", server="umbra"), s.row("traffic/limit-vs-nginx", server="nginx")
    return ("%s accepted/s (%s %%)" % (n0(u["accepted/s"]), u["accuracy %"]),
            "%s accepted/s (%s %%)" % (n0(n["accepted/s"]), n["accuracy %"]), "", u["ratio"], "",
            "≥ 1.0, accuracy ±5 %")


def r_acme_first(s):
    u, c = s.row("acme/first-cert", server="umbra"), s.row("acme/first-cert", server="caddy")
    return ("%s s vs Caddy 2.6 %s s" % (u["median s"], c["median s"]), "", "", "", "",
            "≤ 1.0 × Caddy: %s" % u["ratio"])


def r_acme_hs(s):
    try:
        o, i = s.row("acme/handshake-ordering"), s.row("acme/handshake-idle")
    except Missing:
        return ("not measured in this run", "", "", "", "", "≥ 0.95")
    return ("%s vs %s conn/s" % (n0(o["median conn/s"]), n0(i["median conn/s"])), "", "", "", "",
            "≥ 0.95: %s" % o["ratio"])


def r_h2up(case, target):
    def cells(s):
        try:
            u, h = s.row("h2up/" + case, server="umbra"), s.row("h2up/" + case, server="haproxy")
        except Missing:
            return ("not measured in this run", "", "", "", "", target)
        return ("%s req/s vs HAProxy 2.6 %s req/s" % (n0(u["median req/s"]), n0(h["median req/s"])),
                "", "", "", "", "%s: %s" % (target, u["Umbra/HAProxy"]))
    return cells


def r_ring(first, fmt, target, unit="", num=str):
    def cells(s):
        r = s.row(first)
        a, b = num(first_num(r["ring"])), num(first_num(r["compared"]))
        t = target.format(ratio=r["ratio"], met=r["met"])
        if unit:
            a, b = a + unit, b + unit
        return (fmt % (a, b), "", "", "", "", t)
    return cells


ROWS = [
    ("static 1 KiB, `wrk -t2 -c100`", "static", r_static("1k", "req/s", "median req/s", "Umbra/nginx req/s")),
    ("static 5 MiB, `wrk -t2 -c100`", "static", r_static("5m", "MB/s", "median MB/s", "Umbra/nginx MB/s")),
    ("proxy, 50 ms backend, `-c200`", "proxy", r_proxy("slow-c200", "≥ 0.95 of bound, ≥ 1.0")),
    ("proxy, 50 ms backend, `-c1000`", "proxy",
     r_proxy("slow-c1000", "≥ 0.95 of bound (the backend alone: {backend}), ≥ 1.0")),
    ("proxy, fast backend, 1 KiB, `-c100`, no cache", "proxy", r_proxy("fast-c100", "≥ 1.0")),
    ("cache hit 1 KiB, `wrk -t2 -c100`", "cache", r_cache("hit1k", "median req/s", "req/s", "≥ 1.5")),
    ("cache hit 5 MiB, `wrk -t2 -c100`", "cache",
     r_cache("hit5m", "median MB/s", "MB/s", "≥ 1.0 × the better")),
    ("cache hit 5 MiB, `ab -k -c100 -n300`", "cache",
     r_cache("hit5m-ab", "median MB/s", "MB/s", "≥ 1.0 × the better")),
    ("herd: 200 parallel requests, cold URL, 50 ms origin", "cache", r_herd),
    ("uncacheable (`no-store`), 50 ms origin, `-c100`", "cache", r_nostore),
    ("hit ratio, Zipf(0.9), 100,000 URLs, cache = 10 %", "cache", r_sieve),
    ("hit: 1 KiB cache hit vs nginx's `return 200` of the same body, `-c100`", "hit", r_hit_nginx),
    ("hit: the same hit vs Umbra's own `umbra.respond` of that body", "hit", r_hit_respond),
    ("TLS 1 KiB keep-alive, `wrk -t2 -c100`", "tls", r_tls("1k", " req/s", "≥ 1.0")),
    ("TLS full handshakes/s (ECDSA P-256), `ab -c50`", "tls", r_tls("handshake", "", "≥ 1.0")),
    ("TLS resumed sessions/s, `h2load`", "tls", r_tls("resume", "", "(for comparison)")),
    ("HTTP/2 over TLS, `h2load -c10 -m32`: client address echo", "h2", r_h2("echo", "req/s", "≥ 1.2")),
    ("HTTP/2: 1 KiB cache hit vs nginx's `proxy_cache`", "h2", r_h2("hit1k", "req/s", "≥ 1.5")),
    ("HTTP/2: 1 MiB cache hit", "h2", r_h2("hit1m", "MB/s", "≥ 1.0")),
    ("idle keep-alive connections (9,000), RSS per connection, plain", "idle",
     r_idle("plain", "≤ 1.0 (less is better), ≤ 1 KiB")),
    ("idle keep-alive connections (9,000), RSS per connection, TLS 1.3", "idle",
     r_idle("tls", "≤ 1.0 (less is better)")),
    ("Lua: address echo from a hook vs `return 200 \"$remote_addr\"`, `-c100`", "lua", r_lua("echo")),
    ("Lua: hello world from a hook vs `return 200 \"Hello, World!\"`, `-c100`", "lua", r_lua("hello")),
    ("Lua: 1 KiB cache hit with a host-routing hook vs without", "lua", r_lua_hook),
    ("CGI: empty script, `wrk -c32`, vs Apache httpd `mod_cgi` (prefork)", "cgi", r_cgi("empty")),
    ("CGI: script printing its environment, vs Apache", "cgi", r_cgi("env")),
    ("purge: tag purge, time per object at 100,000 vs at 10,000 objects", "purge", r_purge_linear),
    ("purge: 1 KiB hits during a 100,000-object purge vs outside it", "purge", r_purge_during),
    ("purge: 1 KiB hit on an object with tags vs untagged", "purge", r_purge_tagged),
    ("WebSocket: 64 KiB messages through one tunnel, vs nginx proxying the same echo backend", "ws",
     r_ws("throughput", "MB/s", "≥ 1.0")),
    ("WebSocket: 5,000 idle tunnels, RSS per tunnel", "ws",
     r_ws("idle", "B", "≤ 1.0 (less is better)")),
    ("gzip on the fly (level 6), 100 KiB JSON through an uncached proxy, `-c100`", "compress", r_gzip),
    ("a compressed (gzip) cache hit vs an identity hit of the same size", "compress", r_chit),
    ("Redis L2: p50 of a hit from Redis vs a memory hit (Umbra alone)", "l2", r_l2_lat),
    ("Redis L2: 1 KiB memory hits with `cache.l2` vs without", "l2", r_l2_rps),
    ("ring of 3 nodes: origin requests for a Zipf trace vs 1 node", "cluster",
     r_ring("origin requests for the trace", "%s vs %s", "≤ 1.05 ×: {ratio}, {met}", num=n0)),
    ("ring: p50 of a hit fetched through the owner vs a local hit, all processes on one CPU",
     "cluster", r_ring("the same, client and nodes on one CPU", "%s ms vs %s ms",
                       "≤ 2 ×: {ratio}, {met}")),
    ("ring: the same as the scheduler places the processes", "cluster",
     r_ring("p50 ms, hit through the owner vs local hit", "%s ms vs %s ms",
            "{ratio}: not a figure (below)")),
    ("ring: floor on one CPU, a do-nothing relay vs a do-nothing server, same client (`bench/hop.c`)",
     "cluster", r_ring("floor, one CPU*", "%s ms vs %s ms", "{ratio}")),
    ("ring: one loopback round trip across the two CPUs vs on one (`bench/hop.c`)", "cluster",
     r_ring("one round trip*", "%s vs %s", "{ratio}", " µs")),
    ("ring: 1 KiB local hits on a ring node vs no cluster", "cluster",
     r_ring("1 KiB local hits req/s*", "%s vs %s req/s", "≥ 0.95: {ratio}, {met}", num=n0)),
    ("disk tier: random 16 KiB hits over 8 × the memory cap, warm on disk", "disk", r_disk),
    ("disk tier: 1 KiB memory hits with a disk vs without", "disk", r_disk_vs("memhit", "≥ 0.97")),
    ("disk tier: misses (written behind) with a disk vs without", "disk",
     r_disk_vs("miss", "≥ 0.95")),
    ("a route with a rate limit it never reaches vs the same route without", "traffic",
     r_traffic("limit-never", "umbra+limit", "limited vs not", "≥ 0.95")),
    ("a route with basic auth, the right password vs the same route without", "traffic",
     r_traffic("auth-ok", "umbra+auth", "auth vs not", "≥ 0.95")),
    ("rate limit of 1000 r/s under load: requests let through vs nginx's `limit_req`", "traffic",
     r_traffic_nginx),
    ("ACME: start to the first verified handshake for two names (pebble)", "acme", r_acme_first),
    ("ACME: TLS handshakes while an order is in progress vs none", "acme", r_acme_hs),
    ("HTTP/2 upstream: 1 KiB answers, `h2load -c10 -m32`, beside HAProxy 2.6 `proto h2`", "h2up",
     r_h2up("1k", "≥ 1.0 × HAProxy")),
    ("HTTP/2 upstream: unary gRPC calls beside HAProxy 2.6", "h2up", r_h2up("grpc", "≥ 1.0 × HAProxy")),
]


# ---- the section ------------------------------------------------------------------------


def md_row(cells):
    return "| " + " | ".join(cells) + " |"


def rerun_files(results):
    return sorted(glob.glob(os.path.join(results, "reruns", "*.md")))


def rerun_label(rr):
    return "rerun ([%s](%s), %s)" % (os.path.basename(rr.path), rr.rel,
                                     rr.head_bullet("date", "date unknown")[:10])


def section(results=RESULTS):
    """The README's section made from the results files under RESULTS."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(results)))
    run = Results(os.path.join(results, "README.md"), root)
    reruns = [Results(p, root) for p in rerun_files(results)]
    S = run.sections
    out = []
    commit = run.commit().split(" ")[0]
    started = run.head_bullet("run")[:10]
    knobs = [ln for ln in run.head if re.match(r"^[A-Z_0-9]+=", ln)]
    hit = rounds(S["hit"].row("hit/hit1k", server="umbra-hit", compared="x nginx")["req/s per round"])
    untagged = rounds(S["purge"].row("req/s, untagged 1 KiB hit")["per round"])
    out += [
        "Made by `bench/readme.py` from the committed results files; edit those, not this section",
        "(`bench/readme.py --write`; `tests/integration/test_benchreadme.py` fails when they differ).",
        "See [bench/README.md](bench/README.md). Every figure below is from one `bench/run` of every",
        "scenario at commit %s (%s)%s, whose results are committed:" % (
            commit, started, ", with `%s`" % " ".join(knobs) if knobs else ""),
        "[bench/results/README.md](bench/results/README.md) (the per-round figures and the exact",
        "settings of every server), or from a rerun beside it, marked as such, whose results file is",
        "committed in [bench/results/reruns/](bench/results/reruns/) with its command and commit.",
        "Ratios are of medians on one 2-core machine, loopback, the load generator sharing the",
        "cores with the servers: differences under about 5 % are noise (in this run Umbra's own",
        "hit rounds ranged from %s req/s, and its untagged-hit rounds in the purge scenario from %s)."
        % (krange(hit), krange(untagged)),
        "",
        md_row(["scenario (`bench/run SCENARIO`)", "Umbra", "nginx", "Varnish", "Umbra / nginx",
                "Umbra / Varnish", "target"]),
        md_row(["---"] * 7),
    ]
    for label, scen, cells in ROWS:
        if scen in S:
            out.append(md_row([label] + list(cells(S[scen]))))
        else:  # a scenario newer than the run: its reruns alone
            out.append(md_row([label, "not in this run", "", "", "", "", ""]))
        for rr in reruns:
            if scen in rr.sections:
                out.append(md_row(["↳ " + rerun_label(rr)] + list(cells(rr.sections[scen]))))
    out.append("")

    # Reruns: their commands and commits.
    if reruns:
        out.append("Reruns (their rows stand below the first run's, which they do not replace):")
        out.append("")
        for rr in reruns:
            scen = ", ".join(sorted(rr.sections))
            machine = rr.head_bullet("machine", "unknown")
            same = machine == run.head_bullet("machine", "")
            out.append("- [%s](%s): %s; %s; command %s; commit %s; machine: %s%s" % (
                os.path.basename(rr.path), rr.rel, scen, rr.head_bullet("rerun"),
                rr.head_bullet("command"), rr.commit(), machine,
                "" if same else " (not the first run's: compare its rows with each other only)"))
        out.append("")

    # The rows whose anchor reached its own limit.
    h2 = S["h2"]
    capped = [c for c in ("echo", "hit1k", "hit1m") if h2_capped(h2, c)]
    if capped:
        m = re.search(r"keepalive_requests (\d+);", h2.nginx_conf())
        out += [
            "nginx's figures in the HTTP/2 rows %s of this run are its own limit, not its speed:"
            % " and ".join("`h2/%s`" % c for c in capped),
            "`keepalive_requests %s` also caps the requests of an HTTP/2 connection in nginx 1.22,"
            % m.group(1),
            "and h2load does not reopen a connection that nginx ended, so nginx's rounds stopped at",
            "the limit (%s). Those rows have no ratio%s: the limit is now far"
            % ("; ".join("`h2/%s`: %s" % (c, h2_capped(h2, c)) for c in capped),
               "; the reruns below them measured them with no limit within reach"
               if any("h2" in rr.sections for rr in reruns) else " and are to be re-measured"),
            "out of reach, and a round that reaches a server's limit is refused (bench/README.md,",
            "[Method](bench/README.md#method)).",
            "",
        ]

    # The ring's owner row, from the cluster scenario's figures.
    c = S["cluster"]
    one = c.row("the same, client and nodes on one CPU")
    placed = c.row("p50 ms, hit through the owner vs local hit")
    floor = c.row("floor, one CPU*")
    trip = c.row("one round trip*")
    out += [
        "A hit fetched through the owner passes four process hops (client, asking node, owner,",
        "asking node, client) where a local hit passes two. On this 2-vCPU virtual machine a",
        "loopback round trip costs %s µs when both ends share a CPU and %s µs when they are on"
        % (first_num(trip["compared"]), first_num(trip["ring"])),
        "different CPUs (`bench/hop.c`). As the scheduler places the processes, the medians jump",
        "between those two modes (this run's local-hit median: %s ms), so the %s of that row is"
        % (first_num(placed["compared"]), placed["ratio"]),
        "not a figure. With every process on one CPU the hops are plain switches; then a relay",
        "that does nothing (`bench/hop.c`: poll, read, write, no HTTP) in front of a server that",
        "does nothing costs %s × the direct path for the same Python client that measures Umbra,"
        % floor["ratio"],
        "which leaves %.2f × of the 2 × target for the HTTP work of two Umbra nodes; Umbra is at"
        % (2 - f(floor["ratio"])),
        "%s × (%s ms vs %s ms)." % (one["ratio"], first_num(one["ring"]), first_num(one["compared"])),
        "",
    ]

    # The anchors, as this run set them up.
    tls = S["tls"]
    hs_u = tls.row("tls/handshake", server="umbra")
    hs_n = tls.row("tls/handshake", server="nginx")
    lua = S["lua"]
    le_u, le_n = lua.row("lua/echo", server="umbra"), lua.row("lua/echo", server="nginx")
    lh_u, lh_n = lua.row("lua/hello", server="umbra"), lua.row("lua/hello", server="nginx")
    anchors = [ln[2:] for ln in run.head if ln.startswith("- nginx: master")]
    out += [
        "nginx 1.22 and Varnish 7.1 from Debian, each set up as its users would for the job; the",
        "results file lists every setting (this run's nginx: %s). A round with a socket error, a"
        % (anchors[0][len("nginx: "):].rstrip(";") if anchors else "see the results file"),
        "wrong status, a wrong body size or (for hits) a request that reached the origin is not a",
        "figure: it is repeated, and the run fails if it stays wrong. The handshake figure is bound",
        "by the single-threaded `ab` client (server CPU per handshake: Umbra %s µs, nginx %s µs)."
        % (hs_u["server CPU us per req/conn"], hs_n["server CPU us per req/conn"]),
        "For the answers a hook makes, `wrk` uses about %s %% of a CPU and Umbra's server CPU per"
        % le_u["CPU wrk %"],
        "request is %s µs (echo) and %s µs (hello) against nginx's %s µs and %s µs: the req/s"
        % (le_u["server us/req"], lh_u["server us/req"], le_n["server us/req"], lh_n["server us/req"]),
        "ratio cannot rise much above that on this machine.",
    ]
    return "\n".join(out) + "\n"


def readme_path():
    return os.path.join(ROOT, "README.md")


def split_readme(text):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        raise SystemExit("README.md has no %s ... %s section" % (BEGIN, END))
    return text[:b + len(BEGIN)] + "\n", text[b + len(BEGIN) + 1:e], text[e:]


def main(argv):
    gen = section()
    if not argv:
        sys.stdout.write(gen)
        return 0
    with open(readme_path(), encoding="utf-8") as fh:
        text = fh.read()
    head, cur, tail = split_readme(text)
    if argv == ["--write"]:
        if cur != gen:
            with open(readme_path(), "w", encoding="utf-8") as fh:
                fh.write(head + gen + tail)
        return 0
    if argv == ["--check"]:
        if cur == gen:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            cur.splitlines(True), gen.splitlines(True), "README.md (bench section)",
            "bench/readme.py"))
        return 1
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
