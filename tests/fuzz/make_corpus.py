#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/ (run from anywhere).

Seeds are written here rather than by hand because most targets read control bytes first:
fuzz_http1 takes [limits byte][split byte] before the request, fuzz_chunked takes a
[piece-size byte] before the body, fuzz_upstream_head and fuzz_h1_response a [flags byte]
before the response, fuzz_response a [max-head byte][split byte] before it,
fuzz_cachepolicy a [status byte] before the fields. Re-running
rewrites these seeds and leaves any other file in the corpus directories alone (e.g.
inputs merged back from a long run).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("latin-1")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def write_all(target, seeds, suffix=""):
    """Writes each seed of the dict seeds (name: data) as corpus/<target>/<name><suffix>."""
    for name, data in seeds.items():
        write(target, name + suffix, data)


# --- fuzz_http1 ---------------------------------------------------------------------------
# Byte 0: b % 4 in {0, 1} default limits (8192, 16384); 2: max_line 4 + b/4; 3: max_head
# 4 + 4 * (b/4). Byte 1: split at len * b / 255.
DEFAULT = "0"  # 0x30: default limits
TIGHT_LINE = "R"  # 0x52: max_line 24, max_head 96
TIGHT_HEAD = "S"  # 0x53: max_line 8192, max_head 84

H = "Host: example.com\r\n"
http1 = {
    "get": "GET /index.html HTTP/1.1\r\n" + H + "\r\n",
    "get_query": "GET /a/b?x=1&y=%20 HTTP/1.1\r\n" + H + "Accept: */*\r\n\r\n",
    "head_10": "HEAD / HTTP/1.0\r\n\r\n",
    "http10_keepalive": "GET / HTTP/1.0\r\nConnection: Keep-Alive, TE\r\n\r\n",
    "conn_close": "GET / HTTP/1.1\r\n" + H + "Connection: upgrade, close\r\n\r\n",
    "post_cl": "POST /form HTTP/1.1\r\n" + H + "Content-Length: 11\r\n\r\nhello world",
    "post_chunked": "POST / HTTP/1.1\r\n" + H
    + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "te_case_ows": "POST / HTTP/1.1\r\n" + H + "transfer-encoding:\tChunked \r\n\r\n",
    "expect": "PUT /u HTTP/1.1\r\n" + H + "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    "absolute": "GET http://Example.com:8080/a?q HTTP/1.1\r\nHost: other\r\n\r\n",
    "absolute_nopath": "GET https://h HTTP/1.1\r\nHost: h\r\n\r\n",
    "absolute_query_only": "GET http://h?q=1 HTTP/1.1\r\nHost: h\r\n\r\n",
    "absolute_ipv6": "GET http://[::1]:80/ HTTP/1.0\r\n\r\n",
    "connect": "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    "options_star": "OPTIONS * HTTP/1.1\r\n" + H + "\r\n",
    "other_method": "PURGE /x HTTP/1.1\r\n" + H + "\r\n",
    "leading_crlf": "\r\nGET / HTTP/1.1\r\n" + H + "\r\n",
    "pipelined": "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: b\r\n\r\n",
    "host_ipv6_port": "GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\n\r\n",
    "empty_host": "GET / HTTP/1.1\r\nHost:\r\n\r\n",
    "obs_text": "GET / HTTP/1.1\r\n" + H + "X-Name: caf\xc3\xa9\xff\r\n\r\n",
    "dup_headers": "GET / HTTP/1.1\r\n" + H + "X-A: 1\r\nx-a: 2\r\nAccept: b\r\n\r\n",
    # Refused: smuggling and framing ambiguities.
    "cl_and_te": "POST / HTTP/1.1\r\n" + H
    + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX",
    "te_and_cl": "POST / HTTP/1.1\r\n" + H
    + "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n",
    "two_cl": "POST / HTTP/1.1\r\n" + H + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n",
    "cl_list": "POST / HTTP/1.1\r\n" + H + "Content-Length: 5, 5\r\n\r\n",
    "cl_plus": "POST / HTTP/1.1\r\n" + H + "Content-Length: +5\r\n\r\n",
    "cl_huge": "POST / HTTP/1.1\r\n" + H + "Content-Length: 99999999999999999999\r\n\r\n",
    "te_space_colon": "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding : chunked\r\n\r\n",
    "te_vtab": "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding:\x0bchunked\r\n\r\n",
    "te_gzip_chunked": "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: gzip, chunked\r\n\r\n",
    "te_chunked_gzip": "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: chunked, gzip\r\n\r\n",
    "te_twice": "POST / HTTP/1.1\r\n" + H
    + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    "te_empty_elem": "POST / HTTP/1.1\r\n" + H + "Transfer-Encoding: ,chunked\r\n\r\n",
    "te_http10": "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "obs_fold": "GET / HTTP/1.1\r\n" + H + "X-A: 1\r\n  folded\r\n\r\n",
    "ws_first_line": "GET / HTTP/1.1\r\n " + H + "\r\n",
    "bare_lf": "GET / HTTP/1.1\n" + H + "\n",
    "bare_cr": "GET / HTTP/1.1\r\nX: a\rb\r\n" + H + "\r\n",
    "lf_in_value": "GET / HTTP/1.1\r\nX: a\nb\r\n" + H + "\r\n",
    "nul_in_value": "GET / HTTP/1.1\r\nX: a\x00b\r\n" + H + "\r\n",
    "two_hosts": "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "no_host": "GET / HTTP/1.1\r\n\r\n",
    "host_userinfo": "GET / HTTP/1.1\r\nHost: user@evil.com\r\n\r\n",
    "abs_userinfo": "GET http://user@h/ HTTP/1.1\r\nHost: h\r\n\r\n",
    "http2": "GET / HTTP/2.0\r\n" + H + "\r\n",
    "http12": "GET / HTTP/1.2\r\n" + H + "\r\n",
    "lower_version": "GET / http/1.1\r\n" + H + "\r\n",
    "fragment": "GET /a#frag HTTP/1.1\r\n" + H + "\r\n",
    "two_spaces": "GET  / HTTP/1.1\r\n" + H + "\r\n",
    "connect_no_port": "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
    "get_star": "GET * HTTP/1.1\r\n" + H + "\r\n",
    "tls_hello": "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "h2_preface": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "partial": "GET /index.html HTTP/1.1\r\nHo",
    "many_headers": "GET / HTTP/1.1\r\n" + H + "".join("X-%d: v\r\n" % i for i in range(101))
    + "\r\n",
}
for name, req in http1.items():
    write("http1", name, DEFAULT + "M" + req)
# The same requests under tight limits and other split points.
for name in ("get", "post_chunked", "absolute", "leading_crlf", "bare_lf", "obs_text"):
    write("http1", name + "_tight_line", TIGHT_LINE + "\x80" + http1[name])
    write("http1", name + "_tight_head", TIGHT_HEAD + "\xf0" + http1[name])
write("http1", "long_line", TIGHT_LINE + "\x10" + "GET /" + "a" * 40 + " HTTP/1.1\r\n" + H + "\r\n")
write("http1", "long_line_bare_lf", TIGHT_LINE + "\x10" + "GET /" + "a" * 40 + "\n")
write("http1", "long_line_bare_cr", TIGHT_LINE + "\xff" + "GET /" + "a" * 10 + "\rb" + "c" * 40
      + " HTTP/1.1\r\n" + H + "\r\n")

# --- fuzz_chunked -------------------------------------------------------------------------
# Byte 0: b % 4 = 0 feeds one byte at a time; 1, 2, 3 random pieces up to 2, 16, 128 bytes.
chunked = {
    "simple": "5\r\nhello\r\n0\r\n\r\n",
    "two_chunks": "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "hex_upper": "A\r\n0123456789\r\n0\r\n\r\n",
    "hex_lower_zeros": "000a\r\n0123456789\r\n00\r\n\r\n",
    "ext": "5;name=value\r\nhello\r\n0;last\r\n\r\n",
    "ext_quoted": '5;a="q \\"x\\" \\\\";b=tok\r\nhello\r\n0\r\n\r\n',
    "ext_bws": "5 ; a = b ;c\r\nhello\r\n0\r\n\r\n",
    "trailers": "5\r\nhello\r\n0\r\nX-Checksum: abc\r\nExpires: never\r\n\r\n",
    "empty": "0\r\n\r\n",
    "next_message": "3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "binary_data": "4\r\n\r\n\x00\xff\r\n0\r\n\r\n",
    "max_digits": "000000000000000f\r\n0123456789abcde\r\n0\r\n\r\n",
    "huge_size": "ffffffffffffffff\r\nabc",
    # Refused.
    "too_many_digits": "00000000000000005\r\nhello\r\n0\r\n\r\n",
    "bare_lf_size": "5\nhello\r\n0\r\n\r\n",
    "bare_lf_data": "5\r\nhello\n0\r\n\r\n",
    "bare_cr": "5\rhello\r\n0\r\n\r\n",
    "data_too_long": "5\r\nhelloX\r\n0\r\n\r\n",
    "no_digits": ";a\r\n\r\n",
    "negative": "-5\r\nhello\r\n0\r\n\r\n",
    "hex_prefix": "0x5\r\nhello\r\n0\r\n\r\n",
    "ext_lf": "5;a=b\nc\r\nhello\r\n0\r\n\r\n",
    "ext_bad_quote": '5;a="b\r\nhello\r\n0\r\n\r\n',
    "ext_empty_name": "5;=b\r\nhello\r\n0\r\n\r\n",
    "trailer_fold": "0\r\nX: a\r\n b\r\n\r\n",
    "trailer_no_colon": "0\r\nX a\r\n\r\n",
    "trailer_empty_name": "0\r\n: a\r\n\r\n",
    "space_before_size": " 5\r\nhello\r\n0\r\n\r\n",
}
for i, (name, body) in enumerate(chunked.items()):
    write("chunked", name, "0123"[i % 4] + body)
write("chunked", "long_ext", "2" + "1;" + "a" * 4100 + "\r\nx\r\n0\r\n\r\n")

# --- fuzz_field ---------------------------------------------------------------------------
field = {
    "date_imf": "Sun, 06 Nov 1994 08:49:37 GMT",
    "date_rfc850": "Sunday, 06-Nov-94 08:49:37 GMT",
    "date_asctime": "Sun Nov  6 08:49:37 1994",
    "date_asctime_2digit_day": "Thu Feb 29 23:59:60 2024",
    "date_leap": "Tue, 29 Feb 2000 12:00:00 GMT",
    "date_not_leap": "Mon, 29 Feb 1900 12:00:00 GMT",
    "date_leap_second": "Sat, 31 Dec 2016 23:59:60 GMT",
    "date_min": "Mon, 01 Jan 0001 00:00:00 GMT",
    "date_max": "Fri, 31 Dec 9999 23:59:59 GMT",
    "date_year0": "Sat, 01 Jan 0000 00:00:00 GMT",
    "date_ows": " \tWed, 21 Oct 2015 07:28:00 GMT \t",
    "date_rfc850_2000": "Tuesday, 29-Feb-00 00:00:00 GMT",
    "date_rfc850_future": "Friday, 31-Dec-99 23:59:59 GMT",
    "date_bad_month": "Sun, 06 Foo 1994 08:49:37 GMT",
    "date_utc": "Sun, 06 Nov 1994 08:49:37 UTC",
    "range_first_last": "bytes=0-499",
    "range_suffix": "bytes=-500",
    "range_open": "bytes=9500-",
    "range_zero_suffix": "bytes=-0",
    "range_multi": "bytes=0-0,-1",
    "range_empty_elems": "bytes=, ,0-1 ,",
    "range_upper": "BYTES=1-2",
    "range_other_unit": "items=0-1",
    "range_ws_after_eq": "bytes= 0-1",
    "range_reversed": "bytes=5-3",
    "range_overflow": "bytes=99999999999999999999999-",
    "range_overflow_last": "bytes=0-99999999999999999999999",
    "range_no_dash": "bytes=5",
    "etag_star": "*",
    "etag_list": '"a", W/"b" ,"c"',
    "etag_comma_inside": '"a,b", "c"',
    "etag_list_vs_tag": '"xyz", W/"abc"\n"abc"',
    "etag_weak_vs_strong": 'W/"abc"\nW/"abc"',
    "etag_comma_tag": '"a,b"\n"a,b"',
    "etag_bad_list": '"a" "b"\n"a"',
    "etag_unquoted": "abc\n\"abc\"",
    "etag_empty_opaque": '""\n""',
}
write_all("field", field)

# --- fuzz_path ----------------------------------------------------------------------------
paths = {
    "empty": "",
    "root": "/",
    "file": "index.html",
    "nested_dir": "a/b/c/",
    "double_slash": "a//b///c",
    "dots": "./a/./b/.",
    "dotdot": "../etc/passwd",
    "dotdot_inner": "a/b/../../../etc/passwd",
    "enc_dotdot": "%2e%2e/%2E%2e/etc/passwd",
    "enc_dot_mixed": ".%2e/x",
    "enc_slash": "a%2fb%2F..",
    "double_enc": "%252e%252e/%252f",
    "overlong_utf8": "%c0%ae%c0%ae/%c0%af",
    "nul": "a%00b",
    "backslash": "a\\..\\b",
    "enc_backslash": "..%5c..%5cwin.ini",
    "bad_escape": "a%zz",
    "short_escape": "a%4",
    "lone_percent": "%",
    "utf8": "caf%C3%A9/na\xc3\xafve.txt",
    "three_dots": "a/.../b/....",
    "ctrl": "a\x01b",
    "del": "a%7fb",
    "space": "a%20b/c d",
    "query_like": "a?b=c/d",
    "long": "/".join(["seg%02d" % i for i in range(60)]),
}
write_all("path", paths)

# --- fuzz_config --------------------------------------------------------------------------
config = {
    "minimal": 'routes = { { path = "/", root = "/tmp" } }\n',
    "bundled": open(os.path.join(HERE, "..", "..", "config.lua"), encoding="latin-1").read(),
    "full": """-- every setting
listen = { "127.0.0.1:8080", "[::1]:8443", "*:0", "localhost:65535" }
workers = 2
routes = {
  { host = "Example.COM", path = "/static/", root = "/tmp", index = false },
  { path = "/", root = "/", index = "index.html" },
}
limits = { max_connections = 100, max_header_bytes = "16KB", max_request_line = 8192,
           max_body_bytes = "1GB" }
timeouts = { header = 10, idle = 60.5, send = 30, shutdown = 1 }
mime = { wasm = "application/wasm", MD = "text/markdown; charset=utf-8" }
log_level = "debug"
function on_request(r) return r end
""",
    "helpers": """local root = "/tmp"
local function route(p) return { path = p, root = root } end
routes = { route("/a/"), route("/") }
listen = "127.0.0.1:" .. tostring(8000 + 80)
""",
    "long_strings": """--[==[ a long
comment ]] still ]==]
routes = {
  { path = [[/]], root = [=[/tmp]=] },  -- trailing
  ["x"] = 1,
}
""",
    "shebang_bom": "\xef\xbb\xbf#!/usr/bin/env umbra\nroutes = {{path=\"/\",root=\"/tmp\"}}\n",
    "unknown_key": 'routes = { { path = "/", root = "/tmp", roots = "/x" } }\n',
    "hole": 'routes = { [1] = { path = "/", root = "/tmp" }, [3] = {} }\n',
    "bad_listen": 'listen = { "8080" }\nroutes = { { path = "/", root = "/tmp" } }\n',
    "ipv6_unbracketed": 'listen = "::1:80"\nroutes = { { path = "/", root = "/tmp" } }\n',
    "dup_listen": 'listen = { "127.0.0.1:1", "127.0.0.1:1" }\nroutes = {{path="/",root="/"}}\n',
    "bad_port": 'listen = "127.0.0.1:65536"\nroutes = {{path="/",root="/"}}\n',
    "workers_zero": 'workers = 0\nroutes = {{path="/",root="/"}}\n',
    "workers_frac": 'workers = 1.5\nroutes = {{path="/",root="/"}}\n',
    "bad_size": 'limits = { max_body_bytes = "12XB" }\nroutes = {{path="/",root="/"}}\n',
    "size_overflow": 'limits = { max_body_bytes = "99999999999999999999GB" }\n'
    'routes = {{path="/",root="/"}}\n',
    "neg_timeout": 'timeouts = { idle = -1 }\nroutes = {{path="/",root="/"}}\n',
    "nan_timeout": 'timeouts = { idle = 0/0 }\nroutes = {{path="/",root="/"}}\n',
    "bad_log_level": 'log_level = "verbose"\nroutes = {{path="/",root="/"}}\n',
    "bad_mime": 'mime = { [".md"] = "text/markdown" }\nroutes = {{path="/",root="/"}}\n',
    "mime_dup": 'mime = { md = "text/a", MD = "text/b" }\nroutes = {{path="/",root="/"}}\n',
    "unknown_global": 'rootz = 1\nroutes = {{path="/",root="/"}}\n',
    "no_routes": 'listen = "127.0.0.1:8080"\n',
    "relative_root": 'routes = {{ path = "/", root = "does/not/exist" }}\n',
    "root_is_file": 'routes = {{ path = "/", root = "/etc/hostname" }}\n',
    "path_no_slash": 'routes = {{ path = "static", root = "/" }}\n',
    "nul_in_string": 'routes = {{ path = "/\\0", root = "/" }}\n',
    "index_dotdot": 'routes = {{ path = "/", root = "/", index = ".." }}\n',
    "syntax_error": "routes = { { path = \"/\", root = \"/tmp\" }\n",
    "runtime_error": 'error("boom")\n',
    "error_table": "error({})\n",
    "metatable": 'setmetatable(_G, nil)\nroutes = setmetatable({}, { __index = function() '
    'return {path="/",root="/"} end })\n',
    "pcall_loop": "pcall(function() while true do end end)\nroutes = {}\n",
    "nested": "routes = {{path='/',root='/',host={a={b={c={d={}}}}}}}\n",
    "crlf_lines": 'listen = "127.0.0.1:1"\r\nroutes = {\r\n{path="/",\r\nroot=1}}\r\n',
}
write_all("config", config, ".lua")

# Upstreams, the cache and TLS (settings added after the first seeds).
config_more = {
    "upstreams_cache": """upstreams = {
  app = { servers = { "http://127.0.0.1:9000", "https://[::1]:9443/" }, balance = "hash",
          connect_timeout = 0.5, timeout = 3, retries = 2, host = "backend.test",
          tls = { verify = false }, max_fails = 5, fail_timeout = 2.5 },
  b_2 = { servers = "http://localhost" },
}
cache = { memory = "64MB", max_object = "1MB", clean_interval = 1, default_ttl = 30,
          stale_if_error = 60, purge = { allow = { "127.0.0.1", "10.0.0.0/8", "::1" } } }
routes = {
  { path = "/api/", upstream = "app", cache = false },
  { host = "b.test", path = "/", upstream = "b_2", redirect_https = true },
}
""",
    "upstream_bad_url": 'upstreams = { a = { servers = { "ftp://x/y" } } }\n'
    'routes = {{ path = "/", upstream = "a" }}\n',
    "upstream_unknown": 'routes = {{ path = "/", upstream = "nope" }}\n',
    "cache_on_static": 'routes = {{ path = "/", root = "/", cache = true }}\n',
    "cache_tiny": 'cache = { memory = "1KB", max_object = "2MB" }\n'
    'upstreams = { a = { servers = "http://h" } }\nroutes = {{ path = "/", upstream = "a" }}\n',
    "purge_bad_cidr": 'cache = { purge = { allow = { "10.0.0.0/33", "::1/129" } } }\n'
    'routes = {{ path = "/", root = "/" }}\n',
    "tls": """listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }
tls = { { hosts = { "a.test", "*.b.test" }, cert = "/nonexistent.crt", key = "/nonexistent.key" },
        protocols = { "TLSv1.3" }, ciphers = "ECDHE+AESGCM", default = "a.test" }
routes = {{ path = "/", root = "/" }}
""",
}
write_all("config", config_more, ".lua")

# --- fuzz_upstream_head -------------------------------------------------------------------
# Byte 0: flags (bit 0: the request was a HEAD); then the response as the origin sent it.
GET, HEAD = "\x00", "\x01"
upstream_head = {
    "ok": GET + "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
    "chunked": GET + "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "head": HEAD + "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
    "interim": GET + "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
    "connection_named": GET + "HTTP/1.1 200 OK\r\nConnection: x-secret, close\r\nX-Secret: 1\r\n"
    "Keep-Alive: timeout=5\r\nServer: origin\r\nX-Kept: 2\r\nContent-Length: 0\r\n\r\n",
    "two_cl_same": GET + "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    "two_cl_differ": GET + "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
    "cl_plus": GET + "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc",
    "cl_huge": GET + "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
    "bare_lf": GET + "HTTP/1.1 200 OK\nX-A: b\nContent-Length: 1\n\nx",
    "obs_fold": GET + "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\n\r\n",
    "space_before_colon": GET + "HTTP/1.1 200 OK\r\nX-A : b\r\n\r\n",
    "nul_value": GET + "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n",
    "cr_value": GET + "HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
    "reason_ctl": GET + "HTTP/1.1 404 Not\x01Found\r\n\r\n",
    "no_reason": GET + "HTTP/1.1 503\r\nRetry-After: 1\r\n\r\n",
    "status_600": GET + "HTTP/1.1 600 Odd\r\n\r\n",
    "status_short": GET + "HTTP/1.1 20 OK\r\n\r\n",
    "http10": GET + "HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\nbody",
    "http2_line": GET + "HTTP/2 200\r\nx-a: 1\r\n\r\n",
    "trailers": GET + "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
    "X-T: 1\r\n\r\n",
    "many_fields": GET + "HTTP/1.1 200 OK\r\n" + "".join("X-%d: v\r\n" % i for i in range(140))
    + "\r\n",
    "big_value": GET + "HTTP/1.1 200 OK\r\nX-Big: " + "a" * 70000 + "\r\n\r\n",
    "empty_value": GET + "HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Ws: \t \r\n\r\n",
    "garbage": GET + "\x16\x03\x01\x02\x00garbage\r\n\r\n",
}
write_all("upstream_head", upstream_head)

# --- fuzz_response ------------------------------------------------------------------------
# Byte 0: max_head (< 0x80: 64 KiB; else 16 + 8 * (b - 128)); byte 1: split at len * b / 255;
# then the response. The upstream_head seeds without their flags byte, split in the middle,
# and a few with a tight limit.
response = {name: "\x00\x80" + data[1:] for name, data in upstream_head.items()}
response.update({
    "tight_" + name: "\x90\x40" + upstream_head[name][1:]
    for name in ("ok", "interim", "connection_named", "many_fields")
})
response["split_in_crlf"] = "\x00\x3b" + "HTTP/1.1 200 OK\r\nA: b\r\n\r\n"
response["bare_cr_end"] = "\x00\x80" + "HTTP/1.1 200 OK\r\nA: b\r\r\n\r\n"
write_all("response", response)

# --- fuzz_cachepolicy ---------------------------------------------------------------------
# Byte 0: status = 100 + 2 * byte ('2' = 0x32 -> 200, 'v' = 0x76 -> 336, 0x98 -> 404); then
# "Name: value" lines separated by LF, used as the response and as the request.
S200, S404 = "2", "\x98"
cachepolicy = {
    "max_age": S200 + "Cache-Control: public, max-age=60\nDate: Sun, 06 Nov 1994 08:49:37 GMT",
    "s_maxage": S200 + "Cache-Control: s-maxage=10, max-age=60, must-revalidate",
    "quoted": S200 + 'Cache-Control: private="Set-Cookie, X-A", no-cache="X-B", max-age="30"',
    "repeat": S200 + "Cache-Control: max-age=10\nCache-Control: max-age=20, max-age=5",
    "bad_args": S200 + "Cache-Control: max-age=-1, s-maxage=1e3, max-stale, min-fresh=\"\"",
    "overflow": S200 + "Cache-Control: max-age=99999999999999999999999, stale-if-error=4294967296",
    "swr": S200 + "Cache-Control: max-age=1, stale-while-revalidate=30, stale-if-error=60",
    "no_store": S200 + "Cache-Control: no-store, no-cache\nPragma: no-cache",
    "expires": S200 + "Date: Sun, 06 Nov 1994 08:49:37 GMT\nExpires: Sun, 06 Nov 1994 09:49:37 GMT",
    "expires_zero": S200 + "Expires: 0\nAge: 10",
    "heuristic": S200 + "Last-Modified: Sat, 01 Jan 1994 00:00:00 GMT\n"
    "Date: Sun, 06 Nov 1994 08:49:37 GMT\nETag: W/\"x\"",
    "age_bad": S200 + "Age: -5\nAge: 99999999999\nCache-Control: max-age=100",
    "vary": S200 + "Vary: Accept-Encoding, accept-language\nAccept-Encoding: GZIP , br;q=0.5,,\n"
    "Accept-Language: en-US, fr;q=0.8\nCache-Control: max-age=60",
    "vary_accept": S200 + "Vary: Accept\nAccept: Text/HTML; Q=0.9 ;charset=\"UTF-8\" , */*",
    "vary_cookie": S200 + "Vary: Cookie\nCookie: a=1;  ; b=2\nCookie: c=3",
    "vary_star": S200 + "Vary: *\nCache-Control: max-age=60",
    "vary_many": S200 + "Vary: " + ", ".join("X-%d" % i for i in range(20)),
    "vary_missing": S200 + "Vary: X-Absent\nCache-Control: max-age=60",
    "vary_quoted": S200 + "Vary: X-A\nX-A:  a   \"b   c\"  d ",
    "set_cookie": S200 + "Set-Cookie: a=1\nCache-Control: max-age=60",
    "auth": S200 + "Authorization: Basic eA==\nCache-Control: public, max-age=60",
    "negative": S404 + "Cache-Control: max-age=5",
    "only_if_cached": S200 + "Cache-Control: only-if-cached, max-stale=100, min-fresh=5",
    "garbage": S200 + "Cache-Control: ,,;=\"\\\n:\n:::\nVary: ,,\n\x00",
    "targeted": S200 + "Cache-Control: no-store\nCDN-Cache-Control: max-age=600;a=1, public\n"
    "Umbra-Cache-Control: MAX-AGE=1\nExpires: 0",
    "targeted_types": S200 + 'CDN-Cache-Control: max-age=1.5, s-maxage="3", private=("a" "b"), '
    "no-cache=?0, x=:AAA=:, y=*tok/en",
}
write_all("cachepolicy", cachepolicy)

# --- fuzz_h1_response ---------------------------------------------------------------------
# Byte 0: flags (bit 0: the request was a HEAD; bits 1-7: bit k + 1 set, the sink refuses
# the k-th body piece once); then the response as the origin sent it, followed by its close.
h1_response = {
    "length": GET + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "chunked": "\x06" + "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    "3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n",
    "close": GET + "HTTP/1.0 200 OK\r\nX: y\r\n\r\nclose-delimited body",
    "cut": GET + "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    "head": HEAD + "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
    "interim": GET + "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    "HTTP/1.1 204 No Content\r\n\r\n",
    # Both framings: the coding wins, and the bytes after the last chunk are not the body.
    "te_and_cl": GET + "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"
    "Content-Length: 3\r\n\r\n1\r\na\r\n0\r\n\r\nextra",
    "garbage": GET + "garbage\n\n",
}
write_all("h1_response", h1_response)

# --- fuzz_h2 ------------------------------------------------------------------------------
# Byte 0: the size of each write (1 + b * 64: "\x00" writes byte by byte, "\xff" all at
# once); then the frames after the client preface. (get_*, post_*, bad_*, many_*, reset_*
# and continuation_* were made by hand when the target was added.) These reach what the
# plain requests do not within a 60 s run: cookie crumbs joined (empty ones too), trailers,
# a head split over CONTINUATION frames, and HEADERS on a stream id the client skipped.


def h2_frame(ftype, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + \
        stream.to_bytes(4, "big") + payload


def h2_literal(name, value):
    """A field as a literal without indexing, new name, no Huffman (lengths below 127)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def h2_head(fields):
    return b"".join(h2_literal(n, v) for n, v in fields)


H2_SETTINGS = h2_frame(0x4, 0, 0)
H2_GET = [(":method", "GET"), (":scheme", "http"), (":authority", "a"), (":path", "/")]
H2_POST = [(":method", "POST"), (":scheme", "http"), (":authority", "a"), (":path", "/p")]
END_STREAM_HEADERS = 0x5  # END_STREAM | END_HEADERS
cookie_head = h2_head(H2_GET + [("cookie", "a=1"), ("x", "y"), ("cookie", ""),
                                ("cookie", "b=2")])
h2 = {
    "cookies": H2_SETTINGS + h2_frame(0x1, END_STREAM_HEADERS, 1, cookie_head),
    "trailers": H2_SETTINGS + h2_frame(0x1, 0x4, 1, h2_head(H2_POST)) +
    h2_frame(0x0, 0, 1, b"body") + h2_frame(0x1, END_STREAM_HEADERS, 1, h2_head([("x-t", "v")])),
    "continuation_cookies": H2_SETTINGS + h2_frame(0x1, 0x1, 1, cookie_head[:20]) +
    h2_frame(0x9, 0, 1, cookie_head[20:40]) + h2_frame(0x9, 0x4, 1, cookie_head[40:]),
    "skipped_id": H2_SETTINGS + h2_frame(0x1, END_STREAM_HEADERS, 7, h2_head(H2_GET)) +
    h2_frame(0x1, END_STREAM_HEADERS, 5, h2_head(H2_GET)),
}
write_all("h2", {k: "\x00" + v.decode("latin-1") for k, v in h2.items()}, "_0")
write_all("h2", {k: "\xff" + v.decode("latin-1") for k, v in h2.items()}, "_255")
# Issue #26: crumbs that are all empty joined into an empty buffer, whose NULL base went
# to memcpy (UBSan: server/conn_h2.c -> um_arena_strdup).
write("h2", "bug_empty_cookie_crumbs", b"\xff" + H2_SETTINGS + h2_frame(
    0x1, END_STREAM_HEADERS, 1, h2_head(H2_GET + [("cookie", ""), ("cookie", "")])))
