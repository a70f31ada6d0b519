-- Pop a batch of origins to visit, atomically, for one visit type.
--
-- KEYS[1] pool      zset  stats id -> next visit target (unix s)
-- KEYS[2] inflight  zset  stats id -> when it was scheduled (unix s)
-- KEYS[3] cooling   zset  stats id -> when it may be visited again (unix s)
-- KEYS[4] parked    hash  stats id -> next visit target while in flight or cooling
-- ARGV[1] now (unix s)
-- ARGV[2] how many origins to pop
-- ARGV[3] scheduled cooldown (s): an origin in flight longer than this is presumed lost
-- ARGV[4] at most this many origins move back from cooling / inflight per call
--
-- Returns {cooled, lost, {id1, target1, id2, target2, ...}}: how many origins
-- came back from cooling and from lost visits, then the popped origins, which
-- are now in flight with their target parked.

local pool, inflight, cooling, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local scheduled_cooldown = tonumber(ARGV[3])
local max_moves = tonumber(ARGV[4])

local function unpark(from, upto)
  local ids = redis.call('ZRANGEBYSCORE', from, '-inf', upto, 'LIMIT', 0, max_moves)
  for _, id in ipairs(ids) do
    local target = redis.call('HGET', parked, id)
    redis.call('ZADD', pool, target or now, id)
    redis.call('HDEL', parked, id)
    redis.call('ZREM', from, id)
  end
  return #ids
end

local cooled = unpark(cooling, now)
local lost = unpark(inflight, now - scheduled_cooldown)

local popped = {}
if n > 0 then
  popped = redis.call('ZPOPMIN', pool, n)
  for i = 1, #popped, 2 do
    redis.call('ZADD', inflight, now, popped[i])
    redis.call('HSET', parked, popped[i], popped[i + 1])
  end
end
return {cooled, lost, popped}
