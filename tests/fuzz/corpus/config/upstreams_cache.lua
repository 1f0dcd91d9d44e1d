upstreams = {
  app = { servers = { "http://127.0.0.1:9000", "https://[::1]:9443/" }, balance = "hash",
          connect_timeout = 0.5, timeout = 3, retries = 2, host = "backend.test",
          tls = { verify = false }, max_fails = 5, fail_timeout = 2.5 },
  b_2 = { servers = "http://localhost" },
}
cache = { memory = "64MB", max_object = "1MB", clean_interval = 1, default_ttl = 30,
          stale_if_error = 60, purge = { allow = { "127.0.0.1", "10.0.0.0/8", "::1" } } }
routes = {
  { path = "/api/", upstream = "app", cache = false },
  { host = "b.test", path = "/", upstream = "b_2", redirect_https = true },
}
