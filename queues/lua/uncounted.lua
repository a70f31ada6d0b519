-- The messages of a Dramatiq queue that are not visits and that it still holds
-- (waiting, running or delayed); the ids of those it no longer holds are forgotten.
-- KEYS[1]: set of their ids (queues.keys.uncounted_messages)
-- KEYS[2]: the queue's messages hash; KEYS[3]: its delayed messages hash
local held = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('HEXISTS', KEYS[2], id) == 1 or redis.call('HEXISTS', KEYS[3], id) == 1 then
    held = held + 1
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return held
