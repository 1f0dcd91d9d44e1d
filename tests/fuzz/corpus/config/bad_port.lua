listen = "127.0.0.1:65536"
routes = {{path="/",root="/"}}
