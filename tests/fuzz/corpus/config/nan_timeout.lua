timeouts = { idle = 0/0 }
routes = {{path="/",root="/"}}
