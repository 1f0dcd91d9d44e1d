routes = { [1] = { path = "/", root = "/tmp" }, [3] = {} }
