listen = { "127.0.0.1:0", { "127.0.0.1:0", tls = true } }
tls = { { hosts = { "a.test", "*.b.test" }, cert = "/nonexistent.crt", key = "/nonexistent.key" },
        protocols = { "TLSv1.3" }, ciphers = "ECDHE+AESGCM", default = "a.test" }
routes = {{ path = "/", root = "/" }}
