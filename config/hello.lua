-- Hello world: every request gets a fixed 200 "Hello, World!".
listen = { "127.0.0.1:8080" }

function on_request(req)
  return umbra.respond(200, "Hello, World!")
end

routes = { { path = "/" } }
