routes = { { path = "/", root = "/tmp" }
