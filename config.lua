-- Umbra's bundled configuration: a caching reverse proxy in front of a small site, all on
-- this machine, with no network needed.
--
--   127.0.0.1:8080  the proxy: caches what the origin below answers
--   127.0.0.1:8081  the origin: serves the files in config/www
--
-- Try: curl -i http://127.0.0.1:8080/   (twice: Cache-Status says a miss, then a hit)
-- Every setting is described in README.md ("Configuration reference").

local proxy_port, origin_port = 8080, 8081

listen = { "127.0.0.1:" .. proxy_port, "127.0.0.1:" .. origin_port }
-- Started as root, Umbra serves only once the file names the user to become (README,
-- "Privileges"). This demo stays whoever starts it, so that it can read config/www wherever
-- the repository is; a deployment names an unprivileged user (the package's does: "umbra").
user = "root"
-- workers = 2                -- default: one per CPU

upstreams = {
  site = { servers = { "http://127.0.0.1:" .. origin_port }, host = "origin.local" },
}

routes = {                    -- first match wins
  -- the origin: requests the proxy sends (with Host: origin.local)
  { host = "origin.local", path = "/", root = "config/www", index = "index.html" },
  -- everything else goes through the cache to the origin
  { path = "/", upstream = "site" },
}

cache    = { memory = "64MB", default_ttl = 60 }
limits   = { max_connections = 10000, max_header_bytes = 16384, max_body_bytes = "16MB" }
timeouts = { header = 10, idle = 60, send = 30 }   -- seconds
-- Compression on the fly (off by default): zstd, br or gzip as the client accepts, for text,
-- JSON, JavaScript, SVG... of 1 KiB and more; the cache keeps one variant per coding.
-- compress = true               -- or { algorithms = { "br", "gzip" }, min_size = 1024 }

-- Operations (README.md, "Operations"): uncomment for Prometheus metrics and the status page
-- on http://127.0.0.1:9145/status, and an access log (SIGHUP reloads this file).
-- admin      = { listen = "127.0.0.1:9145", allow = { "127.0.0.1", "::1" } }
-- access_log = { path = "stderr", format = "combined" }
