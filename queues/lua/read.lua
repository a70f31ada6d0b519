-- Read one shard of a visit type's mirror atomically (after bulk.lua), for
-- `mirror check` and its repair.
--
-- KEYS[1] inflight, KEYS[2] cooling, KEYS[3] the prefix of the generation's
-- keys, KEYS[4] meta (bulk.lua's Mirror)
-- ARGV[1] 'snapshot': returns {pool 1, .., pool 4, inflight, cooling, backs},
--         each a flat list of id, score (every member of every bucket of a
--         pool), backs the entries of the origins in flight or cooling (id,
--         entry); 'recount': sets each pool's size to what its buckets hold
--         (after a hand-made change), drops the index's buckets that are
--         gone, and returns the sizes

local m = Mirror(KEYS[3], generation(KEYS[4]))
if ARGV[1] == 'recount' then
  local sizes = {}
  for p = 1, 4 do
    local n = 0
    for _, b in ipairs(redis.call('ZRANGE', m.index(p), 0, -1)) do
      local card = redis.call('ZCARD', m.bucket(p, m.number(b)))
      if card == 0 then redis.call('ZREM', m.index(p), b) end
      n = n + card
    end
    redis.call('HSET', m.counts_key, p, n)
    sizes[p] = n
  end
  return sizes
end

local out = {}
for p = 1, 4 do
  local members = {}
  for _, b in ipairs(redis.call('ZRANGE', m.index(p), 0, -1)) do
    for _, x in ipairs(redis.call('ZRANGE', m.bucket(p, m.number(b)), 0, -1, 'WITHSCORES')) do
      members[#members + 1] = x
    end
  end
  out[p] = members
end
out[5] = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
out[6] = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local ids = {}
for k = 5, 6 do
  for j = 1, #out[k], 2 do ids[#ids + 1] = out[k][j] end
end
m.read_entries(ids)
local backs = {}
for _, id in ipairs(ids) do
  local raw = m.entries[id]
  if raw then
    backs[#backs + 1] = id
    backs[#backs + 1] = raw
  end
end
out[7] = backs
return out
