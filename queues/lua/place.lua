-- Put origins where Postgres says they belong, atomically, for one visit type,
-- unless the mirror already holds a place derived from a newer stats row.
--
-- KEYS[1] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[2] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[3] prefix       of the keys of a generation (bulk.lua's Mirror): the
--                            version buckets, hashes '<prefix>:<generation>:<id div
--                            256>', field id mod 256 -> the origin's entry
--                            '<version>[ <pool index> <score>]' (the
--                            origin_visit_stats.version its place is from, and the
--                            pool it is in or returns to), and the bucketed pools
-- KEYS[4..6]           the same three keys of a rebuild in progress (staging; its
--                            generation keys share the prefix, under its own generation)
-- KEYS[7] staging meta       exists while a rebuild is in progress, so that it
--                            cannot swap an older place over a placement:
--                            'bulk <token>' while the rebuild writes the staging keys
--                            without looking (the origins placed are then only
--                            added to KEYS[8], which it reads again from
--                            Postgres after); any other value once it has
--                            written them (placements are then applied to the
--                            staging keys too, keeping the newest version)
-- KEYS[8] staging touched    set: the origins placed during the 'bulk' phase
-- KEYS[9] meta of KEYS[1..3]: the live meta, hash whose 'versions' names the
--                            live generation ('0' before any rebuild); or, when
--                            KEYS[1..3] are a rebuild's staging keys, its marker.
-- ARGV[1] mode: 'force' moves every origin; 'repair' too, and also looks for
--         it in its pool when it was in flight or cooling (an origin found in
--         two places: ``mirror repair``), where 'force' trusts that an origin
--         is in one place; 'keep_inflight' leaves an origin
--         that Redis has in flight where it is (a listing must not undo a pop
--         whose Postgres bookkeeping is still under way) and only updates
--         where it returns to; 'new' puts origins that cannot be in the
--         mirror yet (just created in Postgres, no rebuild in progress) in
--         their place without looking for an older one
-- ARGV[2..] groups of five: id, version (0: unknown, placed whatever the
--         mirror holds, and the version kept), place (1-4 a pool, 5 inflight,
--         6 cooling, 0 absent), score in that place, '<pool index>|<pool
--         score>' it returns to (kept for 5 and 6)
--
-- A placement whose version is lower than the one recorded for the origin is
-- skipped: it was derived from a stats row that a later transaction changed,
-- and that transaction's placement has been or will be applied. An equal
-- version is applied again (a replayed batch re-placing the same row). The
-- origin's entry says the one pool bucket it may be in: the move removes it
-- from there (and from inflight and cooling) before putting it in its place.
--
-- Returns how many origins were moved in the live keys.

local mode = ARGV[1]
local repairing = mode == 'repair'
local phase = redis.call('GET', KEYS[7])
local touching = phase and string.sub(phase, 1, 5) == 'bulk '
local rebuilding = phase and not touching

local function keyset(base, meta)
  local m = Mirror(KEYS[base + 3], generation(meta))
  m.inflight, m.cooling = KEYS[base + 1], KEYS[base + 2]
  return m
end
local live = keyset(0, KEYS[9])
local staged = rebuilding and keyset(3, KEYS[7])

-- Apply one placement to a key set; true if it moved.
local function apply(m, id, version, where, score, back)
  local stored, pool, at = m.entry(id)
  local number = tonumber(version)
  if number > 0 and stored and tonumber(stored) > number then return false end
  if number == 0 then version = stored or '0' end
  if mode == 'keep_inflight' and redis.call('ZSCORE', m.inflight, id) then
    if where >= 1 then
      local sep = string.find(back, '|', 1, true)
      pool, at = tonumber(string.sub(back, 1, sep - 1)), string.sub(back, sep + 1)
    end
    m.set_entry(id, version, pool, at)
    return false
  end
  if where == 5 or where == 6 then
    local into, other = m.inflight, m.cooling
    if where == 6 then into, other = other, into end
    -- Already there (the scheduler confirming its pop), or taken out of the
    -- other resting place (a final status ending a flight): in no pool, since
    -- an origin is in one place ('repair' looks all the same).
    local fresh = redis.call('ZADD', into, score, id) == 1
    local rested = redis.call('ZREM', other, id) == 1
    if fresh and pool >= 1 and (repairing or not rested) then m.remove(pool, id, at) end
    local sep = string.find(back, '|', 1, true)
    m.set_entry(id, version, tonumber(string.sub(back, 1, sep - 1)), string.sub(back, sep + 1))
    return true
  end
  local rested = redis.call('ZREM', m.inflight, id) + redis.call('ZREM', m.cooling, id) > 0
  if pool >= 1 and (repairing or not rested) then m.remove(pool, id, at) end
  if where >= 1 then
    m.add(where, id, score)
    m.set_entry(id, version, where, score)
  else
    m.set_entry(id, version)
  end
  return true
end

-- A new origin: nothing to look for or remove.
local function add(m, id, version, where, score, back)
  if where >= 1 and where <= 4 then
    m.add(where, id, score)
    m.set_entry(id, version, where, score)
  elseif where == 5 or where == 6 then
    redis.call('ZADD', where == 5 and m.inflight or m.cooling, score, id)
    local sep = string.find(back, '|', 1, true)
    m.set_entry(id, version, tonumber(string.sub(back, 1, sep - 1)), string.sub(back, sep + 1))
  elseif version ~= '0' then
    m.set_entry(id, version)
  end
  return true
end

local ids, seen, again = {}, {}, false
for i = 2, #ARGV, 5 do
  ids[#ids + 1] = ARGV[i]
  again = again or seen[ARGV[i]]
  seen[ARGV[i]] = true
end
-- New origins, each once: a pool's go in by bucket (bulk.lua's add_many).
local new = mode == 'new' and not again
if not new then live.read_entries(ids) end
local moved = 0
local pooled = {{}, {}, {}, {}}
for i = 2, #ARGV, 5 do
  local id, version = ARGV[i], ARGV[i + 1]
  local where, score, back = tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  if new and where >= 1 and where <= 4 then
    local members = pooled[where]
    members[#members + 1] = {tonumber(score), score, id}
    live.set_entry(id, version, where, score)
    moved = moved + 1
  elseif new then
    if add(live, id, version, where, score, back) then moved = moved + 1 end
  elseif apply(live, id, version, where, score, back) then
    moved = moved + 1
  end
  if staged then apply(staged, id, version, where, score, back) end
end
for p = 1, 4 do
  if #pooled[p] > 0 then live.add_many(p, pooled[p]) end
end
live.flush()
if staged then staged.flush() end
if touching then
  bulk('SADD', KEYS[8], ids)
  -- Gone with the marker if the rebuild dies.
  local ttl = redis.call('PTTL', KEYS[7])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[8], ttl) end
end
return moved
