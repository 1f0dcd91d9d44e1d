routes = {{ path = "/", upstream = "nope" }}
