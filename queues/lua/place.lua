-- Put origins where Postgres says they belong, atomically, for one visit type.
--
-- KEYS[1] pool      zset  stats id -> next visit target (unix s)
-- KEYS[2] inflight  zset  stats id -> when it was scheduled (unix s)
-- KEYS[3] cooling   zset  stats id -> when it may be visited again (unix s)
-- KEYS[4] parked    hash  stats id -> next visit target while in flight or cooling
-- ARGV[1] mode: 'force' moves every origin; 'keep_inflight' leaves an origin
--         that Redis has in flight where it is (a listing must not undo a pop
--         whose Postgres bookkeeping is still under way)
-- ARGV[2..] groups of four: id, where ('pool', 'inflight', 'cooling', 'absent'),
--         score in that place, next visit target
--
-- Returns how many origins were moved.

local pool, inflight, cooling, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local keep_inflight = ARGV[1] == 'keep_inflight'
local moved = 0

for i = 2, #ARGV, 4 do
  local id, where, score, target = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if not (keep_inflight and redis.call('ZSCORE', inflight, id)) then
    redis.call('ZREM', pool, id)
    redis.call('ZREM', inflight, id)
    redis.call('ZREM', cooling, id)
    redis.call('HDEL', parked, id)
    if where == 'pool' then
      redis.call('ZADD', pool, score, id)
    elseif where == 'inflight' then
      redis.call('ZADD', inflight, score, id)
      redis.call('HSET', parked, id, target)
    elseif where == 'cooling' then
      redis.call('ZADD', cooling, score, id)
      redis.call('HSET', parked, id, target)
    end
    moved = moved + 1
  end
end
return moved
