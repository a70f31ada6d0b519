-- Take or renew the scheduler lease of one visit type (one scheduler process
-- at a time feeds a visit type's queues; see actors/scheduler.py).
--
-- KEYS[1] lease        string '<token>|<holder>' while held; expires after the TTL
-- KEYS[2] lease_token  string counter: the last fencing token handed out
-- ARGV[1] holder: who asks (e.g. 'host:pid'), shown to operators
-- ARGV[2] the token the caller holds ('' if none)
-- ARGV[3] TTL (ms), or 'release' to give the lease back if the token holds it
--
-- The holder of the current token renews it (the TTL starts again). Anyone
-- else gets a new token only once the lease is free (expired or released);
-- tokens only grow, so a pop fenced with an older token is refused
-- (fence.lua). Returns the token held now, or false when another holds it.

local current = redis.call('GET', KEYS[1])
if current then
  local sep = string.find(current, '|', 1, true)
  local token = string.sub(current, 1, sep - 1)
  if token ~= ARGV[2] then return false end
  if ARGV[3] == 'release' then
    redis.call('DEL', KEYS[1])
    return false
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return token
end
if ARGV[3] == 'release' then return false end
local token = tostring(redis.call('INCR', KEYS[2]))
redis.call('SET', KEYS[1], token .. '|' .. ARGV[1], 'PX', ARGV[3])
return token
