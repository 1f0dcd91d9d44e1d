listen = "127.0.0.1:1"
routes = {
{path="/",
root=1}}
