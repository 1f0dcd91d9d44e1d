setmetatable(_G, nil)
routes = setmetatable({}, { __index = function() return {path="/",root="/"} end })
