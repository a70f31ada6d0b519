-- The rebuild of one shard of a visit type's mirror, one step per call. A
-- rebuild writes a staging copy of the live keys, then swaps it in; its
-- marker says which phase it is in, for place.lua:
--
--   (none) --begin--> 'bulk <token>' --direct--> 'direct <token>' --swap--> (none)
--   any phase --abort--> (none)
--
-- 'bulk': the rebuild writes the staging keys without looking; a placement
-- meanwhile only adds its origin to the touched set, which the rebuild reads
-- again from PostgreSQL. 'direct': placements reach the staging keys too,
-- keeping the newest version. Every step but 'begin' acts only while the
-- marker names the rebuild's token: a rebuild whose marker lapsed (no write
-- for its time to live) and was taken over leaves the newer one alone.
--
-- KEYS[1..3]   live keys: inflight, cooling, and the prefix of the keys of a
--              generation (bulk.lua's Mirror: the version buckets and the
--              bucketed pools), which is also the name of the single version
--              hash of mirrors built before the version buckets
-- KEYS[4..6]   the staging keys, in the same order (the same prefix: the
--              rebuild's keys are told apart by their generation, the end of
--              its token after its last ':')
-- KEYS[7]      live meta        hash: 'rebuilt_at', 'origins', 'shards',
--                               'versions' (the generation of the keys under
--                               the prefix) and 'layout' set by 'swap'
-- KEYS[8]      staging meta     the marker: '<phase> <token>'
-- KEYS[9]      staging touched  set: origins placed during the 'bulk' phase
-- KEYS[10..]   keys of the layout before the bucketed pools (a sorted set per
--              pool, the parked hash), deleted by 'swap'
-- ARGV[1] the step: 'begin', 'direct', 'swap' or 'abort'
-- ARGV[2] the rebuild's token
-- ARGV[3] 'begin', 'direct': the marker's time to live (s); 'swap': rebuilt_at (unix s)
-- ARGV[4] 'begin': 'nx' to refuse while another rebuild holds the marker,
--         anything else to take it over (the shards after the first);
--         'swap': how many shards the visit type is split into
--
-- Returns: 'begin' nil once begun, or the marker of the rebuild in progress;
-- 'direct', 'abort' 1, or 0 when the marker is not this rebuild's; 'swap' how
-- many origins the new mirror holds, or the error 'REBUILD_LOST'.

local step, token = ARGV[1], ARGV[2]
local staging = {KEYS[4], KEYS[5], KEYS[8], KEYS[9]}

if step == 'begin' then
  -- Emptying the staging keys and setting the marker in one step: no
  -- placement is noted between the two and then lost.
  if ARGV[4] == 'nx' then
    local held = redis.call('GET', KEYS[8])
    if held then return held end
  end
  redis.call('DEL', unpack(staging))
  redis.call('SET', KEYS[8], 'bulk ' .. token, 'EX', ARGV[3])
  return false
end

local held = redis.call('GET', KEYS[8])
local mine = held and string.sub(held, -(#token + 1)) == ' ' .. token

if step == 'direct' then
  if held ~= 'bulk ' .. token then return 0 end
  redis.call('SET', KEYS[8], 'direct ' .. token, 'EX', ARGV[3])
  return 1
end

if step == 'abort' then
  if not mine then return 0 end
  redis.call('DEL', unpack(staging))
  return 1
end

-- 'swap': the staging keys replace the live ones, atomically (a reader sees
-- the old mirror or the new one, never a mix), the rebuild's version buckets
-- become the live ones, and the live meta says how many shards the mirror is
-- built in (the mirror is built once every shard's meta says the count
-- configured: no step after the swaps is needed). The buckets of the older
-- generation are garbage, which the rebuild deletes after the swap.
if not mine then
  return redis.error_reply('REBUILD_LOST the marker is ' .. tostring(held))
end
local generation = string.match(token, '([^: ]+)$')
local origins = redis.call('ZCARD', KEYS[4]) + redis.call('ZCARD', KEYS[5])
local counts = redis.call('HMGET', KEYS[6] .. ':' .. generation .. ':count', 1, 2, 3, 4)
for p = 1, 4 do origins = origins + (tonumber(counts[p]) or 0) end
-- UNLINK, not DEL: the old mirror is gone at once, but its memory (a whole
-- visit type's origins) is freed in the background instead of blocking Redis
-- for seconds inside this script.
for i = 1, 2 do
  redis.call('UNLINK', KEYS[i])
  if redis.call('EXISTS', KEYS[3 + i]) == 1 then
    redis.call('RENAME', KEYS[3 + i], KEYS[i])
  end
end
-- the single version hash of a mirror built before the version buckets
redis.call('UNLINK', KEYS[3])
for i = 10, #KEYS do redis.call('UNLINK', KEYS[i]) end
redis.call('DEL', KEYS[8], KEYS[9])
redis.call('HSET', KEYS[7], 'rebuilt_at', ARGV[3], 'origins', origins, 'shards', ARGV[4],
  'versions', generation, 'layout', 'buckets')
return origins
