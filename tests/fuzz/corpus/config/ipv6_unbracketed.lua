listen = "::1:80"
routes = { { path = "/", root = "/tmp" } }
