local root = "/tmp"
local function route(p) return { path = p, root = root } end
routes = { route("/a/"), route("/") }
listen = "127.0.0.1:" .. tostring(8000 + 80)
