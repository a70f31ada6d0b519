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
-- holding the scores from their bound to the next bucket's, indexed by the
-- sorted set '<prefix>:<g>:p<p>' of bucket numbers scored by their bound
-- (distinct: equal scores never span two buckets). The hash
-- '<prefix>:<g>:count' holds each pool's size (field p) and the last bucket
-- number handed out ('next').
local function Mirror(prefix, g)
  local base = prefix .. ':' .. g .. ':'
  local counts = base .. 'count'
  local M = {entries = {}, writes = {}, deltas = {0, 0, 0, 0}}
  local function index(p) return base .. 'p' .. p end
  local function bucket(p, b) return base .. 'p' .. p .. ':' .. b end
  M.index, M.bucket, M.counts_key = index, bucket, counts

  function M.entry_key(id)
    local n = tonumber(id)
    return base .. math.floor(n / BUCKET), n % BUCKET
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

  -- The bucket of pool p whose range holds `score`, and its bound; the first
  -- bucket for a score below every bound; nil for an empty pool.
  local function find(p, score)
    local got = redis.call('ZRANGE', index(p), score, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')
    if got[1] then return got[1], got[2] end
    got = redis.call('ZRANGE', index(p), 0, 0, 'WITHSCORES')
    return got[1], got[2]
  end

  -- Split a bucket of n members: the members above its middle member's score
  -- move to a new bucket bounded by the lowest of them; when the middle
  -- member's run of equal scores reaches the end, that run moves instead. A
  -- bucket of one score cannot split: Redis turns it into a skiplist past
  -- 128 members. Only the part that moves is read.
  local function split(p, key, n)
    local middle = redis.call('ZRANGE', key, math.floor(n / 2), math.floor(n / 2), 'WITHSCORES')[2]
    local moved = redis.call('ZRANGE', key, '(' .. middle, '+inf', 'BYSCORE', 'WITHSCORES')
    if #moved == 0 then
      local lowest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
      if lowest == middle then return end
      moved = redis.call('ZRANGE', key, middle, '+inf', 'BYSCORE', 'WITHSCORES')
    end
    local new = redis.call('HINCRBY', counts, 'next', 1)
    -- highest first: Redis inserts each at the listpack's head, no scan
    local members = {}
    for k = #moved - 1, 1, -2 do
      members[#members + 1] = moved[k + 1]
      members[#members + 1] = moved[k]
    end
    bulk('ZADD', bucket(p, new), members)
    redis.call('ZREMRANGEBYRANK', key, n - #moved / 2, -1)
    redis.call('ZADD', index(p), moved[2], new)
  end

  function M.add(p, id, score)
    local b, bound = find(p, score)
    if not b then
      b = redis.call('HINCRBY', counts, 'next', 1)
      redis.call('ZADD', index(p), score, b)
    elseif tonumber(score) < tonumber(bound) then
      -- below every bound: the first bucket's bound goes down to it
      redis.call('ZADD', index(p), score, b)
    end
    local key = bucket(p, b)
    local added = redis.call('ZADD', key, score, id)
    M.deltas[p] = M.deltas[p] + added
    if added == 1 then
      local n = redis.call('ZCARD', key)
      if n > SPLIT then split(p, key, n) end
    end
  end

  -- Add origins that are in no bucket of pool p, given as {score number,
  -- score text, id}: sorted by score, those of one bucket's range go in with
  -- one ZADD (highest first), then the bucket splits as often as it must.
  -- Write sorted members i..last into buckets of STAGED members, a run of
  -- equal scores never cut: the first into bucket `first` (already indexed,
  -- its bound at most their lowest score), or a new one; the rest into new
  -- buckets. A bucket is written whole and never past 128 members (but a
  -- run), so that Redis creates it as a listpack: a sorted set once a
  -- skiplist stays one when it shrinks.
  local function cut(p, members, i, last, first)
    while i <= last do
      local e = math.min(i + STAGED - 1, last)
      if e < last and members[e + 1][1] == members[e][1] then
        local k = e
        while k > i and members[k][1] == members[k - 1][1] do k = k - 1 end
        if k > i then
          e = k - 1
        else
          while e < last and members[e + 1][1] == members[e][1] do e = e + 1 end
        end
      end
      local b = first
      first = nil
      if not b then
        b = redis.call('HINCRBY', counts, 'next', 1)
        redis.call('ZADD', index(p), members[i][2], b)
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

  function M.add_many(p, members)
    table.sort(members, function(x, y) return x[1] < y[1] end)
    local i = 1
    while i <= #members do
      local score = members[i][2]
      local b, bound = find(p, score)
      if not b then
        cut(p, members, i, #members)
        M.deltas[p] = M.deltas[p] + (#members - i + 1)
        return
      elseif members[i][1] < tonumber(bound) then
        bound = score
        redis.call('ZADD', index(p), score, b)
      end
      local above = redis.call('ZRANGE', index(p), '(' .. bound, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      local limit = above[2] and tonumber(above[2])
      local j = i
      while j < #members and (not limit or members[j + 1][1] < limit) do j = j + 1 end
      local key = bucket(p, b)
      local held = redis.call('ZCARD', key)
      if held + (j - i + 1) <= SPLIT or held > SPLIT then
        -- room enough; or a run of equal scores, a skiplist already: split
        -- once after, as M.add does
        local flat = {}
        for k = j, i, -1 do
          flat[#flat + 1] = members[k][2]
          flat[#flat + 1] = members[k][3]
        end
        bulk('ZADD', key, flat)
        if held > SPLIT then split(p, key, held + (j - i + 1)) end
      else
        -- too many for the bucket: it is written again, with its members,
        -- into as many buckets as they fill
        local merged = {}
        local old = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
        for k = 1, #old, 2 do merged[#merged + 1] = {tonumber(old[k + 1]), old[k + 1], old[k]} end
        for k = i, j do merged[#merged + 1] = members[k] end
        table.sort(merged, function(x, y) return x[1] < y[1] end)
        redis.call('DEL', key)
        cut(p, merged, 1, #merged, b)
      end
      M.deltas[p] = M.deltas[p] + (j - i + 1)
      i = j + 1
    end
  end

  -- Remove `id` from pool p, where its entry says it has `score`; 1 if it was there.
  function M.remove(p, id, score)
    local b = find(p, score)
    if not b then return 0 end
    local key = bucket(p, b)
    local removed = redis.call('ZREM', key, id)
    if removed == 1 then
      M.deltas[p] = M.deltas[p] - 1
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index(p), b) end
    end
    return removed
  end

  -- Whether `id` waits in pool p with `score`.
  function M.has(p, id, score)
    local b = find(p, score)
    return b ~= nil and redis.call('ZSCORE', bucket(p, b), id) ~= false
  end

  -- The n lowest members of pool p with their scores (ZRANGE 0 n-1 WITHSCORES).
  function M.head(p, n)
    local out = {}
    local offset = 0
    while #out < 2 * n do
      local buckets = redis.call('ZRANGE', index(p), offset, offset + INDEX_PAGE - 1)
      if #buckets == 0 then break end
      for _, b in ipairs(buckets) do
        local got = redis.call('ZRANGE', bucket(p, b), 0, n - #out / 2 - 1, 'WITHSCORES')
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
      local key = bucket(p, first)
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
