limits = { max_body_bytes = "12XB" }
routes = {{path="/",root="/"}}
