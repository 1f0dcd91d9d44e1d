-- An API-key check: requests without a known X-Api-Key get a 401 and never reach the
-- origin; the others reach it with the caller's name instead of the key.
listen = { "127.0.0.1:8080" }

local keys = {
  ["k-7d1f0c2a"] = "alice",
  ["k-93be4410"] = "bob",
}

upstreams = { api = { servers = { "http://127.0.0.1:9001" } } }

routes = {
  { path = "/", upstream = "api", cache = false, on_request = function(req)
      local user = keys[req:header("X-Api-Key") or ""]
      if not user then
        return umbra.respond(401, "missing or unknown API key\n",
                             { ["WWW-Authenticate"] = 'ApiKey realm="api"' })
      end
      req:set_header("X-Api-Key", nil)
      req:set_header("X-Api-User", user)
    end },
}
