-- A config written for the Yunying server runs unchanged: the same settings, with the
-- meaning they have there. It listens on every interface; run it on one address with
-- build/umbra -a 127.0.0.1:8080 config/yunying.lua
port = 8080
working_thread_num = 2

cache_size_bytes = 1 << 25
cache_default_max_age = 300
cache_clean_interval = 10

origin_type = "upstream"
upstream_host = "upstream.example"
upstream_domain = "127.0.0.1"
upstream_port = 9001
upstream_protocol = "http"

function upstream_set(req_path, req_method, req_host)
  if req_path:find("^/blog") then
    set_host("blog.example")
    set_path(req_path:sub(6))
  end
end
