-- Put origins where Postgres says they belong, atomically, for one visit type,
-- unless the mirror already holds a place derived from a newer stats row.
--
-- KEYS[1..4] pools     zset  stats id -> score in the pool (never_visited, lagging,
--                            no_last_update, up_to_date: app.domain.placement.POOLS)
-- KEYS[5] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[6] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[7] parked       hash  stats id -> '<pool index>|<pool score>' of origins in
--                            flight or cooling: where they return to
-- KEYS[8] version      hash  stats id -> origin_visit_stats.version its place is from
-- KEYS[9..16]          the same eight keys of a rebuild in progress (staging)
-- KEYS[17] staging meta      exists while a rebuild is in progress, so that it
--                            cannot rename an older place over a placement:
--                            'bulk <token>' while the rebuild writes the staging keys
--                            without looking (the origins placed are then only
--                            added to KEYS[18], which it reads again from
--                            Postgres after); any other value once it has
--                            written them (placements are then applied to the
--                            staging keys too, keeping the newest version)
-- KEYS[18] staging touched   set: the origins placed during the 'bulk' phase
-- ARGV[1] mode: 'force' moves every origin; 'keep_inflight' leaves an origin
--         that Redis has in flight where it is (a listing must not undo a pop
--         whose Postgres bookkeeping is still under way) and only updates
--         where it returns to
-- ARGV[2..] groups of five: id, version (0: unknown, placed whatever the
--         mirror holds, and the version kept), place (1-4 a pool, 5 inflight,
--         6 cooling, 0 absent), score in that place, '<pool index>|<pool
--         score>' it returns to (kept for 5 and 6)
--
-- A placement whose version is lower than the one recorded for the origin is
-- skipped: it was derived from a stats row that a later transaction changed,
-- and that transaction's placement has been or will be applied. An equal
-- version is applied again (a replayed batch re-placing the same row).
--
-- Returns how many origins were moved in the live keys.

local mode = ARGV[1]
local phase = redis.call('GET', KEYS[17])
local touching = phase and string.sub(phase, 1, 5) == 'bulk '
local rebuilding = phase and not touching

-- Apply one placement to the eight keys from KEYS[base + 1]; true if it moved.
local function apply(base, id, version, where, score, back)
  local inflight, parked, versions = KEYS[base + 5], KEYS[base + 7], KEYS[base + 8]
  local stored = nil
  if version > 0 then
    stored = tonumber(redis.call('HGET', versions, id))
    if stored and stored > version then return false end
    redis.call('HSET', versions, id, version)
  end
  if mode == 'keep_inflight' and redis.call('ZSCORE', inflight, id) then
    if where >= 1 then redis.call('HSET', parked, id, back) end
    return false
  end
  for k = 1, 6 do
    if k ~= where then redis.call('ZREM', KEYS[base + k], id) end
  end
  if where >= 1 then
    redis.call('ZADD', KEYS[base + where], score, id)
  end
  if where == 5 or where == 6 then
    redis.call('HSET', parked, id, back)
  else
    redis.call('HDEL', parked, id)
  end
  return true
end

-- Runs a command over a list of arguments in chunks under Lua's unpack limit.
local CHUNK = 7000
local function bulk(command, key, items)
  for from = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, from, math.min(from + CHUNK - 1, #items)))
  end
end

-- Most placements go in with one variadic command per key instead of a few
-- commands each (most of the time of the scheduler's confirmation of 1,000
-- picks and of a journal batch). Each command touches only its origin's
-- member or field, so, the origins being distinct, the order of the commands
-- does not change the result. A second placement of one origin in the same
-- call takes the one-by-one path (apply), after the bulk writes, in its
-- order. Every version is checked with one HMGET: an older placement is
-- skipped as apply() does, and the origin is removed from the other places.
local function place_in_bulk()
  local ids = {}
  for i = 2, #ARGV, 5 do ids[#ids + 1] = ARGV[i] end
  local stored = {}
  for from = 1, #ids, CHUNK do
    local got = redis.call('HMGET', KEYS[8], unpack(ids, from, math.min(from + CHUNK - 1, #ids)))
    for k = 1, #got do stored[from + k - 1] = got[k] end
  end
  local adds, rems = {{}, {}, {}, {}, {}, {}}, {{}, {}, {}, {}, {}, {}}
  local versions, backs, unparked, later, seen = {}, {}, {}, {}, {}
  local moved = 0
  for k = 1, #ids do
    local i = 2 + 5 * (k - 1)
    local id, version, where = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local again = seen[id]
    seen[id] = true
    local known = version > 0 and stored[k]
    if again then
      later[#later + 1] = i
    elseif not (known and tonumber(stored[k]) > version) then
      if version > 0 then
        versions[#versions + 1] = id
        versions[#versions + 1] = version
      end
      for place = 1, 6 do
        if place ~= where then
          local rem = rems[place]
          rem[#rem + 1] = id
        end
      end
      if where >= 1 then
        local add = adds[where]
        add[#add + 1] = ARGV[i + 3]
        add[#add + 1] = id
      end
      if where == 5 or where == 6 then
        backs[#backs + 1] = id
        backs[#backs + 1] = ARGV[i + 4]
      else
        unparked[#unparked + 1] = id
      end
      moved = moved + 1
    end
  end
  for place = 1, 6 do
    bulk('ZREM', KEYS[place], rems[place])
    bulk('ZADD', KEYS[place], adds[place])
  end
  bulk('HSET', KEYS[7], backs)
  bulk('HDEL', KEYS[7], unparked)
  bulk('HSET', KEYS[8], versions)
  for _, i in ipairs(later) do
    local id, version = ARGV[i], tonumber(ARGV[i + 1])
    local where, score, back = tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
    if apply(0, id, version, where, score, back) then moved = moved + 1 end
  end
  return moved
end

-- 'force' places the live keys in bulk; the staging keys of a rebuild are
-- apart from them, so applying to those afterwards, one by one, changes nothing.
local moved = 0
if mode == 'force' then moved = place_in_bulk() end
local touched = {}
for i = 2, #ARGV, 5 do
  local id, version = ARGV[i], tonumber(ARGV[i + 1])
  local where, score, back = tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  if mode ~= 'force' and apply(0, id, version, where, score, back) then moved = moved + 1 end
  if rebuilding then apply(8, id, version, where, score, back) end
  if touching then touched[#touched + 1] = id end
end
if touching then
  bulk('SADD', KEYS[18], touched)
  -- Gone with the marker if the rebuild dies.
  local ttl = redis.call('PTTL', KEYS[17])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[18], ttl) end
end
return moved
