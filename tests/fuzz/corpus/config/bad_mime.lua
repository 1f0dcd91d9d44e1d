mime = { [".md"] = "text/markdown" }
routes = {{path="/",root="/"}}
