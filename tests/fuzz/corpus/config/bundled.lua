-- Umbra's bundled configuration: serves the small site in config/www on 127.0.0.1:8080.
-- Every setting is described in README.md ("Configuration reference").

listen  = { "127.0.0.1:8080" }
-- workers = 2                -- default: one per CPU

routes = {                    -- first match wins
  { path = "/", root = "config/www", index = "index.html" },
}

limits   = { max_connections = 10000, max_header_bytes = 16384, max_body_bytes = "16MB" }
timeouts = { header = 10, idle = 60, send = 30 }   -- seconds
