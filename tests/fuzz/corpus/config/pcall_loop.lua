pcall(function() while true do end end)
routes = {}
