-- /etc/umbra/config.lua: Umbra as an edge cache on port 8080.
--
-- As installed it caches a small example site that it also serves itself, on
-- 127.0.0.1:8081, so that it answers out of the box:
--
--   curl -i http://127.0.0.1:8080/     (twice: Cache-Status says a miss, then a hit)
--
-- Put your origin in upstreams.origin.servers, drop the example site's route and its
-- listener, check with "umbra -t /etc/umbra/config.lua", then "systemctl reload umbra".
-- Every setting: man umbra.lua; more examples: /usr/share/umbra/examples/.

listen = { "*:8080", "127.0.0.1:8081" }

-- Started as root without systemd, Umbra binds its ports and reads its keys as root,
-- then becomes this user. (The systemd unit starts it as umbra already.)
user = "umbra"

-- The process ID, for logrotate's USR1 (/etc/logrotate.d/umbra) whoever started Umbra.
-- /run/umbra is the unit's RuntimeDirectory, also made at boot (tmpfiles.d) and on install.
pid = "/run/umbra/umbra.pid"

upstreams = {
  origin = { servers = { "http://127.0.0.1:8081" }, host = "origin.local" },
}

routes = {
  -- the example site, which the cache below fetches from 127.0.0.1:8081
  { host = "origin.local", path = "/", root = "/usr/share/umbra/www" },
  -- everything else: through the shared cache to the origin
  { path = "/", upstream = "origin" },
}

cache = { memory = "256MB", default_ttl = 60 }
-- A disk tier beneath the memory (kept across restarts), in the folder the package made:
-- cache.disk = { path = "/var/cache/umbra", size = "10GB" }

access_log = { path = "/var/log/umbra/access.log", format = "combined" }

-- Prometheus metrics and the status page on http://127.0.0.1:9145/status:
-- admin = { listen = "127.0.0.1:9145", allow = { "127.0.0.1", "::1" } }
