routes = {{ path = "/", root = "/", cache = true }}
