workers = 1.5
routes = {{path="/",root="/"}}
