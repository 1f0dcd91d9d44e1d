routes = { { path = "/", root = "/tmp" } }
