workers = 0
routes = {{path="/",root="/"}}
