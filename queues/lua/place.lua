-- Put origins where Postgres says they belong, atomically, for one visit type.
--
-- KEYS[1..4] pools     zset  stats id -> score in the pool (never_visited, lagging,
--                            no_last_update, up_to_date: app.domain.placement.POOLS)
-- KEYS[5] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[6] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[7] parked       hash  stats id -> '<pool index>|<pool score>' of origins in
--                            flight or cooling: where they return to
-- ARGV[1] mode: 'force' moves every origin; 'keep_inflight' leaves an origin
--         that Redis has in flight where it is (a listing must not undo a pop
--         whose Postgres bookkeeping is still under way) and only updates
--         where it returns to
-- ARGV[2..] groups of four: id, place (1-4 a pool, 5 inflight, 6 cooling,
--         0 absent), score in that place, '<pool index>|<pool score>' it
--         returns to (kept for 5 and 6)
--
-- Returns how many origins were moved.

local inflight, cooling, parked = KEYS[5], KEYS[6], KEYS[7]
local keep_inflight = ARGV[1] == 'keep_inflight'
local moved = 0

for i = 2, #ARGV, 4 do
  local id, where, score, back = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  if keep_inflight and redis.call('ZSCORE', inflight, id) then
    if where >= 1 then redis.call('HSET', parked, id, back) end
  else
    for k = 1, 6 do
      if k ~= where then redis.call('ZREM', KEYS[k], id) end
    end
    if where >= 1 then
      redis.call('ZADD', KEYS[where], score, id)
    end
    if where == 5 or where == 6 then
      redis.call('HSET', parked, id, back)
    else
      redis.call('HDEL', parked, id)
    end
    moved = moved + 1
  end
end
return moved
