upstreams = { a = { servers = { "ftp://x/y" } } }
routes = {{ path = "/", upstream = "a" }}
