limits = { max_body_bytes = "99999999999999999999GB" }
routes = {{path="/",root="/"}}
