routes = {{ path = "/", root = "/", index = ".." }}
