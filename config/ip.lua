-- Client address echo: GET /ip answers the client's address as plain text, and nothing
-- else is served. Run: build/umbra config/ip.lua, then curl http://127.0.0.1:8080/ip
listen = { "127.0.0.1:8080" }

routes = {
  { path = "/", on_request = function(req)
      if req.path ~= "/ip" then
        return umbra.respond(404, "not found\n")
      end
      if req.method ~= "GET" and req.method ~= "HEAD" then
        return umbra.respond(405, "use GET\n", { Allow = "GET, HEAD" })
      end
      return umbra.respond(200, req.client_ip)
    end },
}
