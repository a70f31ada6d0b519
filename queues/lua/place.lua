-- Put origins where Postgres says they belong, atomically, for one visit type,
-- unless the mirror already holds a place derived from a newer stats row.
--
-- KEYS[1..4] pools     zset  stats id -> score in the pool (never_visited, lagging,
--                            no_last_update, up_to_date: app.domain.placement.POOLS)
-- KEYS[5] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[6] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[7] parked       hash  stats id -> '<pool index>|<pool score>' of origins in
--                            flight or cooling: where they return to
-- KEYS[8] version      the prefix of the version buckets: hashes
--                            '<prefix>:<generation>:<id div 256>', field id mod 256
--                            -> origin_visit_stats.version its place is from (small
--                            hashes, which Redis keeps in its compact encoding)
-- KEYS[9..16]          the same eight keys of a rebuild in progress (staging; its
--                            version buckets share the prefix, under its own generation)
-- KEYS[17] staging meta      exists while a rebuild is in progress, so that it
--                            cannot rename an older place over a placement:
--                            'bulk <token>' while the rebuild writes the staging keys
--                            without looking (the origins placed are then only
--                            added to KEYS[18], which it reads again from
--                            Postgres after); any other value once it has
--                            written them (placements are then applied to the
--                            staging keys too, keeping the newest version)
-- KEYS[18] staging touched   set: the origins placed during the 'bulk' phase
-- KEYS[19] meta of KEYS[1..8]: the live meta, hash whose 'versions' names the
--                            generation of the live version buckets ('0' before
--                            any rebuild); or, when KEYS[1..8] are a rebuild's
--                            staging keys, its marker. A rebuild's generation is
--                            the end of its token (after its last ':'), the end
--                            of its marker.
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
local function generation(meta)
  if redis.call('TYPE', meta)['ok'] == 'string' then
    return string.match(redis.call('GET', meta), '([^: ]+)$')
  end
  return redis.call('HGET', meta, 'versions') or '0'
end
local generations = {[0] = generation(KEYS[19]), [8] = phase and generation(KEYS[17])}
local BUCKET = 256

-- The version bucket of an origin in the keys from KEYS[base + 1], and its field.
local function bucket(base, id)
  local n = tonumber(id)
  return KEYS[base + 8] .. ':' .. generations[base] .. ':' .. math.floor(n / BUCKET), n % BUCKET
end

-- Apply one placement to the eight keys from KEYS[base + 1]; true if it moved.
local function apply(base, id, version, where, score, back)
  local inflight, parked = KEYS[base + 5], KEYS[base + 7]
  if version > 0 then
    local versions, field = bucket(base, id)
    local stored = tonumber(redis.call('HGET', versions, field))
    if stored and stored > version then return false end
    redis.call('HSET', versions, field, version)
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

-- Most placements go in with one variadic command per key instead of a few
-- commands each (most of the time of the scheduler's confirmation of 1,000
-- picks and of a journal batch). Each command touches only its origin's
-- member or field, so, the origins being distinct, the order of the commands
-- does not change the result. A second placement of one origin in the same
-- call takes the one-by-one path (apply), after the bulk writes, in its
-- order. Versions are checked with one HMGET per version bucket: an older
-- placement is skipped as apply() does, and the origin is removed from the
-- other places.
local function place_in_bulk()
  local ids, buckets, fields, grouped = {}, {}, {}, {}
  for i = 2, #ARGV, 5 do
    local k = #ids + 1
    ids[k] = ARGV[i]
    local key, field = bucket(0, ARGV[i])
    buckets[k], fields[k] = key, field
    local group = grouped[key]
    if not group then
      group = {}
      grouped[key] = group
    end
    group[#group + 1] = k
  end
  local stored = {}
  for key, group in pairs(grouped) do
    local asked = {}
    for n, k in ipairs(group) do asked[n] = fields[k] end
    local got = redis.call('HMGET', key, unpack(asked))
    for n, k in ipairs(group) do stored[k] = got[n] end
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
        local writes = versions[buckets[k]]
        if not writes then
          writes = {}
          versions[buckets[k]] = writes
        end
        writes[#writes + 1] = fields[k]
        writes[#writes + 1] = version
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
  for key, writes in pairs(versions) do bulk('HSET', key, writes) end
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
