routes = {{ path = "/\0", root = "/" }}
