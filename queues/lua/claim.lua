-- Claim given origins for a visit, atomically, for one visit type: those that
-- wait in a pool move in flight; those resting or already in flight are left.
--
-- KEYS[1..4] pools     zset  stats id -> score in the pool (app.domain.placement.POOLS)
-- KEYS[5] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[6] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[7] parked       hash  stats id -> '<pool index>|<pool score>' to return to
-- ARGV[1] now (unix s)
-- ARGV[2] claim at most this many (negative: -n, only say which; nothing moves)
-- ARGV[3..] origin ids, in the order the policy wants them
--
-- Returns {id, pool index, score, ...} of the claimed origins.

local inflight, parked = KEYS[5], KEYS[7]
local now = ARGV[1]
local most = tonumber(ARGV[2])
local peek = most < 0
if peek then most = -most end
local claimed = {}
for i = 3, #ARGV do
  if #claimed >= 3 * most then break end
  local id = ARGV[i]
  for pool = 1, 4 do
    local score = redis.call('ZSCORE', KEYS[pool], id)
    if score then
      if not peek then
        redis.call('ZREM', KEYS[pool], id)
        redis.call('ZADD', inflight, now, id)
        redis.call('HSET', parked, id, pool .. '|' .. score)
      end
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = pool
      claimed[#claimed + 1] = score
      break
    end
  end
end
return claimed
