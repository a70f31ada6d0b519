-- Hold or release the claim of the visit running an origin (actors/visiting.py):
-- one visit of an origin at a time, whatever the scheduler believed.
--
-- KEYS[1] visiting  string '<message id> <host>:<pid>:<run>' of the visit
--                   running the origin; expires unless its holder renews it
-- ARGV[1] the caller's value
-- ARGV[2] TTL (ms) to take or renew the claim; 0 to release it
--
-- A free claim, or the caller's own, is taken (or renewed) or released;
-- another's is left alone. Returns false when the caller holds the claim
-- (or has released it), else the value of the visit holding it.

local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return held end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
elseif held then
  redis.call('DEL', KEYS[1])
end
return false
