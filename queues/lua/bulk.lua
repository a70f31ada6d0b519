-- Prelude of pop.lua, place.lua and claim.lua (concatenated before them): one
-- command over many arguments, and the bucketed pools with the entries that
-- say where each origin is.
local CHUNK = 7000
local function bulk(command, key, items)
  for from = 1, #items, CHUNK do
    redis.call(command, key, unpack(items, from, math.min(from + CHUNK - 1, #items)))
  end
end

-- The generation of a mirror's keys: for live keys, the one their meta names
-- ('0' before any rebuild); for a rebuild's staging keys, whose meta is its
-- marker '<phase> <token>', the end of the token (after its last ':').
local function generation(meta)
  if redis.call('TYPE', meta)['ok'] == 'string' then
    return string.match(redis.call('GET', meta), '([^: ]+)$')
  end
  return redis.call('HGET', meta, 'versions') or '0'
end

-- Stats ids per version bucket: the hash '<prefix>:<generation>:<id div 256>'
-- holds, in field id mod 256, the origin's entry: '<version>' or
-- '<version> <pool index> <score>', the pool (1-4) and score of the origin
-- there, or, while it is in flight or cooling, the pool and score it returns to.
local BUCKET = 256
-- A pool bucket past this many members splits (Redis keeps a sorted set of at
-- most 128, its zset-max-listpack-entries, as a compact listpack).
local SPLIT = 120
-- Members per bucket written at once into an empty pool (Mirror.stage's
-- STAGED_BUCKET): room for placements before a split.
local STAGED = 96
-- Pool buckets read at a time from a pool's index by head().
local INDEX_PAGE = 16
-- Redis keeps a sorted set of at most this many members as a listpack
-- (zset-max-listpack-entries); past it, as a skiplist for good.
local INDEX_LISTPACK = 128

-- version, pool index (0: none) and score text of an entry (nil: none)
local function parse_entry(raw)
  if not raw then return nil, 0, nil end
  local version, pool, score = string.match(raw, '^(%S+) (%d) (%S+)$')
  if version then return version, tonumber(pool), score end
  return raw, 0, nil
end

local function format_entry(version, pool, score)
  if pool and pool >= 1 then return version .. ' ' .. pool .. ' ' .. score end
  return version
end

-- The mirror's keys of one generation under a prefix: the entries, and each
-- pool p (1-4) split into buckets '<prefix>:<g>:p<p>:<n>', small sorted sets
-- holding the members from their bound (a score and a member) to the next
-- bucket's, indexed by the sorted set '<prefix>:<g>:p<p>' of entries
-- '<bound member> <n>' scored by the bound's score. The hash
-- '<prefix>:<g>:count' holds each pool's size (field p) and the last bucket
-- number handed out ('next').
local function Mirror(prefix, g)
  local base = prefix .. ':' .. g .. ':'
  local counts = base .. 'count'
  local M = {entries = {}, writes = {}, deltas = {0, 0, 0, 0}}
  local function index(p) return base .. 'p' .. p end
  local function bucket(p, b) return base .. 'p' .. p .. ':' .. b end
  M.index, M.bucket, M.counts_key = index, bucket, counts
  M.number = function(entry) return string.match(entry, ' (%d+)$') end

  local entry_keys = {}  -- by id div BUCKET: a string made once, not once an origin
  function M.entry_key(id)
    local n = tonumber(id)
    local b = math.floor(n / BUCKET)
    local key = entry_keys[b]
    if not key then
      key = base .. b
      entry_keys[b] = key
    end
    return key, n % BUCKET
  end

  -- The entries of `ids`, one HMGET per version bucket, kept for entry().
  function M.read_entries(ids)
    local grouped = {}
    for _, id in ipairs(ids) do
      local key, field = M.entry_key(id)
      local group = grouped[key]
      if not group then
        group = {ids = {}, fields = {}}
        grouped[key] = group
      end
      group.ids[#group.ids + 1] = id
      group.fields[#group.fields + 1] = field
    end
    for key, group in pairs(grouped) do
      local got = redis.call('HMGET', key, unpack(group.fields))
      for n, id in ipairs(group.ids) do M.entries[id] = got[n] or false end
    end
  end

  function M.entry(id)
    local raw = M.entries[id]
    if raw == nil then
      local key, field = M.entry_key(id)
      raw = redis.call('HGET', key, field) or false
      M.entries[id] = raw
    end
    return parse_entry(raw or nil)
  end

  -- Entries are written once per version bucket, by flush().
  function M.set_entry(id, version, pool, score)
    local raw = format_entry(version, pool, score)
    M.entries[id] = raw
    local key, field = M.entry_key(id)
    local writes = M.writes[key]
    if not writes then
      writes = {}
      M.writes[key] = writes
    end
    writes[field] = raw
  end

  -- Buckets are ordered as Redis orders a sorted set's members: by score,
  -- then by member. Each index entry is '<bound member> <bucket number>',
  -- scored by the bound's score: among equal scores the index orders its
  -- entries by their bound members (a space sorts before any digit), so a
  -- run of equal scores splits like any other.
  local function number(entry) return string.match(entry, ' (%d+)$') end
  local function bound_of(entry) return string.match(entry, '^(%S+) ') end
  local function entry_of(id, b) return id .. ' ' .. b end

  -- (score, id) before (bound score, bound member)?
  local function before(score, id, bound, member)
    local s, t = tonumber(score), tonumber(bound)
    return s < t or (s == t and id < member)
  end

  -- The index entry of the bucket of pool p whose range holds (score, id),
  -- and its bound score: the greatest bound at or below it, the first bucket
  -- below every bound; nil for an empty pool.
  local function find(p, score, id)
    local idx = index(p)
    local got = redis.call('ZRANGE', idx, score, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
    if not got[1] then
      got = redis.call('ZRANGE', idx, 0, 0, 'WITHSCORES')
      return got[1], got[2]
    end
    if tonumber(got[2]) < tonumber(score) or bound_of(got[1]) <= id then return got[1], got[2] end
    -- among the buckets bounded at this very score: the last bound <= id
    if redis.call('ZCARD', idx) > INDEX_LISTPACK then
      -- Redis finds it: a probe member sorts right after every entry bounded
      -- by id or less ('<bound> <n>': a space sorts before '!') and before
      -- any other, so the entry before it is the one. The index is a skiplist
      -- already, so the probe, taken out at once, leaves it as it was.
      local probe = id .. '!'
      redis.call('ZADD', idx, score, probe)
      local rank = redis.call('ZRANK', idx, probe)
      redis.call('ZREM', idx, probe)
      local r = rank > 0 and rank - 1 or 0
      got = redis.call('ZRANGE', idx, r, r, 'WITHSCORES')
      return got[1], got[2]
    end
    local high = redis.call('ZRANK', idx, got[1])
    local low = high - redis.call('ZCOUNT', idx, score, score) + 1
    local a, z, found = low, high - 1, nil
    while a <= z do
      local m = math.floor((a + z) / 2)
      local e = redis.call('ZRANGE', idx, m, m, 'WITHSCORES')
      if bound_of(e[1]) <= id then
        found, a = e, m + 1
      else
        z = m - 1
      end
    end
    if not found then
      local r = low > 0 and low - 1 or 0
      found = redis.call('ZRANGE', idx, r, r, 'WITHSCORES')
    end
    return found[1], found[2]
  end

  -- Split a bucket of n members past SPLIT at its middle member: the upper
  -- half moves to a new bucket bounded by it (highest first: Redis inserts
  -- each at the listpack's head, no scan).
  local function split(p, key, n)
    local half = math.floor(n / 2)
    local moved = redis.call('ZRANGE', key, half, -1, 'WITHSCORES')
    local new = redis.call('HINCRBY', counts, 'next', 1)
    local members = {}
    for k = #moved - 1, 1, -2 do
      members[#members + 1] = moved[k + 1]
      members[#members + 1] = moved[k]
    end
    bulk('ZADD', bucket(p, new), members)
    redis.call('ZREMRANGEBYRANK', key, half, -1)
    redis.call('ZADD', index(p), moved[2], entry_of(moved[1], new))
  end

  -- Lower the bound of the first bucket (entry) to (score, id).
  local function lower(p, entry, score, id)
    redis.call('ZREM', index(p), entry)
    entry = entry_of(id, number(entry))
    redis.call('ZADD', index(p), score, entry)
    return entry
  end

  function M.add(p, id, score)
    local entry, bound = find(p, score, id)
    if not entry then
      entry = entry_of(id, redis.call('HINCRBY', counts, 'next', 1))
      redis.call('ZADD', index(p), score, entry)
    elseif before(score, id, bound, bound_of(entry)) then
      entry = lower(p, entry, score, id)
    end
    local key = bucket(p, number(entry))
    local added = redis.call('ZADD', key, score, id)
    M.deltas[p] = M.deltas[p] + added
    if added == 1 then
      local n = redis.call('ZCARD', key)
      if n > SPLIT then split(p, key, n) end
    end
  end

  -- Write sorted members i..last into buckets of STAGED members: the first
  -- into the bucket of index entry `first` (its bound at most their lowest),
  -- or a new one; the rest into new buckets. A bucket is written whole and
  -- never past 128 members, so that Redis creates it as a listpack: a sorted
  -- set once a skiplist stays one when it shrinks.
  local function cut(p, members, i, last, first)
    while i <= last do
      local e = math.min(i + STAGED - 1, last)
      local b = first and number(first)
      first = nil
      if not b then
        b = redis.call('HINCRBY', counts, 'next', 1)
        redis.call('ZADD', index(p), members[i][2], entry_of(members[i][3], b))
      end
      local flat = {}
      for k = e, i, -1 do
        flat[#flat + 1] = members[k][2]
        flat[#flat + 1] = members[k][3]
      end
      bulk('ZADD', bucket(p, b), flat)
      i = e + 1
    end
  end

  -- {score number, score text, id} members sorted as Redis orders them: by
  -- score, then id as a string. Grouped by score first (a listing brings long
  -- runs of equal scores), so that the sorts compare plain values in C
  -- instead of calling a Lua comparator n log n times.
  local function sorted(members)
    local ids, scores = {}, {}
    for _, m in ipairs(members) do
      local group = ids[m[1]]
      if not group then
        group = {text = m[2]}
        ids[m[1]] = group
        scores[#scores + 1] = m[1]
      end
      group[#group + 1] = m[3]
    end
    table.sort(scores)
    local out = {}
    for _, score in ipairs(scores) do
      local group = ids[score]
      local text = group.text
      table.sort(group)
      for _, id in ipairs(group) do out[#out + 1] = {score, text, id} end
    end
    return out
  end

  -- Add origins that are in no bucket of pool p, given as {score number,
  -- score text, id}: sorted as Redis orders them, those of one bucket's
  -- range go in with one ZADD, or, past SPLIT, with the bucket's members into
  -- as many buckets as they fill.
  function M.add_many(p, members)
    members = sorted(members)
    local i = 1
    while i <= #members do
      local entry, bound = find(p, members[i][2], members[i][3])
      if not entry then
        cut(p, members, i, #members)
        M.deltas[p] = M.deltas[p] + (#members - i + 1)
        return
      elseif before(members[i][2], members[i][3], bound, bound_of(entry)) then
        entry = lower(p, entry, members[i][2], members[i][3])
      end
      local rank = redis.call('ZRANK', index(p), entry)
      local next = redis.call('ZRANGE', index(p), rank + 1, rank + 1, 'WITHSCORES')
      -- the members below the next bucket's bound (read once, not once a member)
      local j, last = i, #members
      if not next[1] then
        j = last
      else
        local bound_score, bound_member = tonumber(next[2]), bound_of(next[1])
        while j < last do
          local m = members[j + 1]
          if not (m[1] < bound_score or (m[1] == bound_score and m[3] < bound_member)) then
            break
          end
          j = j + 1
        end
      end
      local key = bucket(p, number(entry))
      local held = redis.call('ZCARD', key)
      if held + (j - i + 1) <= SPLIT then
        local flat = {}
        for k = j, i, -1 do
          flat[#flat + 1] = members[k][2]
          flat[#flat + 1] = members[k][3]
        end
        bulk('ZADD', key, flat)
      else
        local merged = {}
        local old = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
        for k = 1, #old, 2 do merged[#merged + 1] = {tonumber(old[k + 1]), old[k + 1], old[k]} end
        for k = i, j do merged[#merged + 1] = members[k] end
        merged = sorted(merged)
        redis.call('DEL', key)
        cut(p, merged, 1, #merged, entry)
      end
      M.deltas[p] = M.deltas[p] + (j - i + 1)
      i = j + 1
    end
  end

  -- Remove `id` from pool p, where its entry says it has `score`; 1 if it was there.
  function M.remove(p, id, score)
    local entry = find(p, score, id)
    if not entry then return 0 end
    local key = bucket(p, number(entry))
    local removed = redis.call('ZREM', key, id)
    if removed == 1 then
      M.deltas[p] = M.deltas[p] - 1
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index(p), entry) end
    end
    return removed
  end

  -- Whether `id` waits in pool p with `score`.
  function M.has(p, id, score)
    local entry = find(p, score, id)
    return entry ~= nil and redis.call('ZSCORE', bucket(p, number(entry)), id) ~= false
  end

  -- The n lowest members of pool p with their scores (ZRANGE 0 n-1 WITHSCORES).
  function M.head(p, n)
    local out = {}
    local offset = 0
    while #out < 2 * n do
      local entries = redis.call('ZRANGE', index(p), offset, offset + INDEX_PAGE - 1)
      if #entries == 0 then break end
      for _, entry in ipairs(entries) do
        local got = redis.call('ZRANGE', bucket(p, number(entry)), 0, n - #out / 2 - 1, 'WITHSCORES')
        for _, x in ipairs(got) do out[#out + 1] = x end
        if #out >= 2 * n then break end
      end
      offset = offset + INDEX_PAGE
    end
    return out
  end

  -- Pop the n lowest members of pool p (ZPOPMIN), dropping emptied buckets.
  function M.pop(p, n)
    local out = {}
    while n > 0 do
      local first = redis.call('ZRANGE', index(p), 0, 0)[1]
      if not first then break end
      local key = bucket(p, number(first))
      local got = redis.call('ZPOPMIN', key, n)
      for _, x in ipairs(got) do out[#out + 1] = x end
      n = n - #got / 2
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index(p), first) end
    end
    M.deltas[p] = M.deltas[p] - #out / 2
    return out
  end

  -- How many origins each pool holds.
  function M.counts()
    local got = redis.call('HMGET', counts, 1, 2, 3, 4)
    local sizes = {}
    for p = 1, 4 do sizes[p] = (tonumber(got[p]) or 0) + M.deltas[p] end
    return sizes
  end

  -- Write the entries and pool sizes changed.
  function M.flush()
    for key, writes in pairs(M.writes) do
      local flat = {}
      for field, raw in pairs(writes) do
        flat[#flat + 1] = field
        flat[#flat + 1] = raw
      end
      bulk('HSET', key, flat)
    end
    M.writes = {}
    for p = 1, 4 do
      if M.deltas[p] ~= 0 then redis.call('HINCRBY', counts, p, M.deltas[p]) end
      M.deltas[p] = 0
    end
  end

  return M
end
