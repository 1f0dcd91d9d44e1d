log_level = "verbose"
routes = {{path="/",root="/"}}
