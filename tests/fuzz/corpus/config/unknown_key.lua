routes = { { path = "/", root = "/tmp", roots = "/x" } }
