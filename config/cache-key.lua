-- A cache key that includes a request header, and a TTL override: the origin answers
-- in the client's language without sending Vary or any freshness information, so the
-- key carries the language and the hook says how long an answer stays fresh.
listen = { "127.0.0.1:8080" }

upstreams = { app = { servers = { "http://127.0.0.1:9001" } } }

routes = {
  { path = "/", upstream = "app", on_request = function(req)
      local lang = (req:header("Accept-Language") or ""):match("^%s*(%a+)") or "any"
      req.cache_key = req.host .. req.target .. " lang=" .. lang:lower()
      req.ttl = 60
    end },
}
