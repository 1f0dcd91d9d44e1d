listen = { "8080" }
routes = { { path = "/", root = "/tmp" } }
