routes = {{ path = "/", root = "does/not/exist" }}
