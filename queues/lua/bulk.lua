-- Prelude of pop.lua and place.lua (concatenated before them): one command over
-- many arguments, in chunks under Lua's limit on unpack()ed arguments.
local CHUNK = 7000
local function bulk(command, key, items)
  for from = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, from, math.min(from + CHUNK - 1, #items)))
  end
end
