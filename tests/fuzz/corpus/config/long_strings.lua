--[==[ a long
comment ]] still ]==]
routes = {
  { path = [[/]], root = [=[/tmp]=] },  -- trailing
  ["x"] = 1,
}
