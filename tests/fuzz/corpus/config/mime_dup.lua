mime = { md = "text/a", MD = "text/b" }
routes = {{path="/",root="/"}}
