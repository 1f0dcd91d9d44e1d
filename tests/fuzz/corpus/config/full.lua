-- every setting
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
