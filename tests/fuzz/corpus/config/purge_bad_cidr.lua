cache = { purge = { allow = { "10.0.0.0/33", "::1/129" } } }
routes = {{ path = "/", root = "/" }}
