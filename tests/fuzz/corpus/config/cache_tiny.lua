cache = { memory = "1KB", max_object = "2MB" }
upstreams = { a = { servers = "http://h" } }
routes = {{ path = "/", upstream = "a" }}
