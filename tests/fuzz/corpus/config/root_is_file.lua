routes = {{ path = "/", root = "/etc/hostname" }}
