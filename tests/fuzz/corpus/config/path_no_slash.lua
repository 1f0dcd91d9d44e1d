routes = {{ path = "static", root = "/" }}
