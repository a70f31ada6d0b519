-- End a rebuild of one visit type: its staging keys replace the live ones,
-- atomically (a reader sees the old mirror or the new one, never a mix).
--
-- KEYS[1..8]  live keys: the four pools, inflight, cooling, parked, version
-- KEYS[9..16] the staging keys written by the rebuild, in the same order
-- KEYS[17]    live meta      hash: 'rebuilt_at' and 'origins' are set
-- KEYS[18]    staging meta   the rebuild-in-progress marker (deleted)
-- KEYS[19]    staging touched  origins placed while it staged (deleted)
-- ARGV[1] rebuilt_at (unix s)
-- ARGV[2] the rebuild's token: nothing is swapped unless the marker still
--         names it (a rebuild whose marker expired was taken over by another)
--
-- Returns how many origins the new mirror holds (in a pool, in flight or cooling).

local held = redis.call('GET', KEYS[18])
local token = ' ' .. ARGV[2]
if not held or string.sub(held, -#token) ~= token then
  return redis.error_reply('REBUILD_LOST the marker is ' .. tostring(held))
end

local origins = 0
for i = 9, 14 do origins = origins + redis.call('ZCARD', KEYS[i]) end
-- UNLINK, not DEL: the old mirror is gone at once, but its memory (a whole
-- visit type's origins) is freed in the background instead of blocking Redis
-- for seconds inside this script.
for i = 1, 8 do
  redis.call('UNLINK', KEYS[i])
  if redis.call('EXISTS', KEYS[8 + i]) == 1 then
    redis.call('RENAME', KEYS[8 + i], KEYS[i])
  end
end
redis.call('DEL', KEYS[18], KEYS[19])
redis.call('HSET', KEYS[17], 'rebuilt_at', ARGV[1], 'origins', origins)
return origins
