rootz = 1
routes = {{path="/",root="/"}}
