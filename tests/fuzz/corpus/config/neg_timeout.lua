timeouts = { idle = -1 }
routes = {{path="/",root="/"}}
