-- Host-based routing to two upstreams, and a path rewrite (Yunying's upstream_set
-- example, written in Umbra's style).
listen = { "127.0.0.1:8080" }

local blog_server = "http://127.0.0.1:9001"
local shop_server = "http://127.0.0.1:9002"

upstreams = {
  blog = { servers = { blog_server } },
  shop = { servers = { shop_server } },
}

routes = {
  { path = "/", upstream = "blog" },
}

function on_request(req)
  -- req.hostname: the Host header's name, lower case, without a port.
  if req.hostname == "shop.example.com" then
    req.upstream = "shop"
  end
  -- /docs/... is served by the blog's docs site, without the /docs prefix.
  local rest = req.path:match("^/docs(/.*)$")
  if rest then
    req.host = "docs.example.com"
    req.path = rest
  end
end
