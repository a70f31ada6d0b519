-- Claim given origins for a visit, atomically, for one visit type: those that
-- wait in a pool move in flight; those resting or already in flight are left.
--
-- KEYS[1] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[2] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[3] prefix       of the generation's keys (bulk.lua's Mirror): the pools
--                            and the entries saying which pool bucket an origin is in
-- KEYS[4] meta         hash  'versions': the live generation
-- ARGV[1] now (unix s)
-- ARGV[2] claim at most this many (negative: -n, only say which; nothing moves)
-- ARGV[3..] origin ids, in the order the policy wants them
--
-- Returns {id, pool index, score, ...} of the claimed origins.

local inflight = KEYS[1]
local pools = Mirror(KEYS[3], generation(KEYS[4]))
local now = ARGV[1]
local most = tonumber(ARGV[2])
local peek = most < 0
if peek then most = -most end
local claimed = {}
for i = 3, #ARGV do
  if #claimed >= 3 * most then break end
  local id = ARGV[i]
  local _, pool, score = pools.entry(id)
  if pool >= 1 then
    local found
    if peek then
      found = pools.has(pool, id, score)
    else
      found = pools.remove(pool, id, score) == 1
      if found then redis.call('ZADD', inflight, now, id) end
    end
    if found then
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = pool
      claimed[#claimed + 1] = score
    end
  end
end
pools.flush()
return claimed
