-- Pop a weighted batch of origins to visit, atomically, for one visit type.
--
-- KEYS[1] inflight     zset  stats id -> when it was scheduled (unix s)
-- KEYS[2] cooling      zset  stats id -> when it may be visited again (unix s)
-- KEYS[3] prefix       of the generation's keys (bulk.lua's Mirror): the four
--                            bucketed pools (1-4: never_visited, lagging,
--                            no_last_update, up_to_date, app.domain.placement.POOLS)
--                            and the entries, which say the pool and score an
--                            origin in flight or cooling returns to
-- KEYS[4] meta         hash  'credit:<pool index>' -> share owed to a pool by past
--                            batches (weights hold over time, not per batch);
--                            only written while the mirror exists (meta present);
--                            'versions': the live generation
-- ARGV[1] now (unix s)
-- ARGV[2] how many origins to pop
-- ARGV[3] scheduled cooldown (s): an origin in flight longer than this is presumed lost
-- ARGV[4] at most this many origins move back from cooling / inflight per call
-- ARGV[5..8] weight of each pool, or 'auto' in ARGV[5] for seed 000's mixing:
--         r = #B / (#A + #B); (1 - r) n from no_last_update (group A) and
--         r n / 3 from each pool of group B (never_visited, lagging, up_to_date);
--         or 'due' in ARGV[5] for the age-optimal policy: the n origins due
--         first across all pools, where an origin's due time is its score
--         (never_visited: last_update; no_last_update, up_to_date: next visit
--         target; lagging: the due time of the reported change, or, for a
--         score -lag <= 0, now - lag: a change reported lag seconds after the
--         last visit counts as due that long).
--         up_to_date origins are taken only once due (the forge reports no
--         change since the last visit: an earlier visit would be useless).
--         With 'due', ARGV[6] is the share of each batch kept for first visits
--         (seed 000's first goal: every origin visited once as soon as
--         possible): that many never_visited origins (oldest last_update
--         first) are taken before the merge, however much other work is due
--         earlier; the fraction of a slot owed is carried to the next batch
--         (meta credit:first) while first visits wait.
--         With 'due', ARGV[7] is the floor's margin (s) of a visit type whose
--         multiplier is past the cap of known changes (the workers cannot
--         follow every reported change: quiet origins first), 0 otherwise.
--         Non-zero, an up_to_date origin counts as due now: a visit the forge says would
--         find nothing goes after every visit already due (reported changes,
--         guesses, first visits), before only those not due yet. (The
--         reported changes left behind then are due by their latest change,
--         not by a target: no backlog of targets shows how far behind they are.)
-- ARGV[9] 'peek' to only say what a pop would take (nothing moves, nothing
--         returns from cooling), anything else to pop
-- ARGV[10] optional, with 'due': 'rank' to take nothing and return
--         {cooled, lost, {}, dues, first}: how many never_visited origins it
--         would set apart for first visits, and the due times of the origins
--         the merge would take after them, in its order; a sharded pop
--         merges the shards' lists to share its batch out (queues.shards)
-- ARGV[11] optional, with 'due': the batch the first-visit share is of (n
--         when absent); a sharded pop gives each shard its part of the batch
--         by how many never visited origins it holds, whatever its part of
--         the origins due first
--
-- The batch is split by weight; the share of a pool that runs dry goes to the
-- others, and when every weighted pool is dry the pools of weight 0 are served
-- too, so no slot stays empty while any pool holds an origin. The fractions a
-- weighted pool is owed are carried to the next batch (meta credit:<i>), so a
-- pool of weight 2 beside two of 49 gets 2 % of the visits over time even when
-- batches hold 8 origins.
--
-- Returns {cooled, lost, {pool index, {id, score, ...}, ...}}: how many origins
-- came back from cooling and from lost visits, then, for each pool popped from
-- (in pool order), its index and its origins with their scores in the order
-- ZPOPMIN gave them (a compact reply: no pool index repeated per origin). They
-- are now in flight; their entries still say the pool and score they return to.

local inflight, cooling, meta = KEYS[1], KEYS[2], KEYS[4]
local pools = Mirror(KEYS[3], generation(meta))
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local scheduled_cooldown = tonumber(ARGV[3])
local max_moves = tonumber(ARGV[4])

local function unpark(from, upto)
  local ids = redis.call('ZRANGEBYSCORE', from, '-inf', upto, 'LIMIT', 0, max_moves)
  pools.read_entries(ids)
  for _, id in ipairs(ids) do
    local version, pool, score = pools.entry(id)
    if pool == 0 then
      -- no entry says where it returns: up_to_date, due now
      pool, score = 4, string.format('%.17g', now)
      pools.set_entry(id, version or '0', pool, score)
    end
    pools.add(pool, id, score)
  end
  bulk('ZREM', from, ids)
  return #ids
end

local peek = ARGV[9] == 'peek'
local rank = ARGV[10] == 'rank'
local cooled, lost = 0, 0
if not peek then
  cooled = unpark(cooling, now)
  lost = unpark(inflight, now - scheduled_cooldown)
end

local avail, weight = {}, {}
avail = pools.counts()
local take = {0, 0, 0, 0}

-- Age-optimal: merge the heads of the four pools by due time.
local dues = {}
local function by_due(first)
  if n <= 0 then return end  -- ZRANGE 0 -1 would read whole pools
  local heads, pos = {}, {}
  for i = 1, 4 do
    heads[i] = pools.head(i, n)
    pos[i] = 1
  end
  take[1] = first
  pos[1] = 1 + 2 * first
  -- Overloaded: up_to_date origins wait for the rest.
  local defer = (tonumber(ARGV[7]) or 0) > 0
  for _ = first + 1, n do
    local best, best_due = nil, nil
    for i = 1, 4 do
      local score = heads[i][pos[i] + 1]
      if score then
        local due = tonumber(score)
        -- lagging: a due time (age_optimal's delay after the change), or
        -- -lag (<= 0, before the first multiplier): due lag seconds ago
        if i == 2 and due <= 0 then due = now + due end
        -- The forge says an up_to_date origin has not changed: visiting it
        -- before its target (the floor) could only be useless.
        local wait = i == 4 and due > now
        if i == 4 and defer and not wait then due = now end
        if not wait and (best == nil or due < best_due) then best, best_due = i, due end
      end
    end
    if best == nil then break end
    take[best] = take[best] + 1
    pos[best] = pos[best] + 2
    -- a string: Redis would truncate a Lua number to an integer
    if rank then dues[#dues + 1] = string.format('%.17g', best_due) end
  end
end

local credit = {0, 0, 0, 0}
local keep_credit = not peek and redis.call('EXISTS', meta) == 1
if ARGV[5] == 'due' then
  local first_share = tonumber(ARGV[6]) or 0
  local first = 0
  if first_share > 0 then
    local owed = keep_credit and tonumber(redis.call('HGET', meta, 'credit:first')) or 0
    local exact = (tonumber(ARGV[11]) or n) * first_share + owed
    first = math.min(math.floor(exact), n)
    local got = math.min(first, avail[1])
    if keep_credit and not rank then
      -- A pool left dry is owed nothing; one still waiting keeps the fraction.
      local carried = (avail[1] > got and got == first) and (exact - first) or 0
      redis.call('HSET', meta, 'credit:first', carried)
    end
    first = got
  end
  by_due(first)
  if rank then
    pools.flush()
    return {cooled, lost, {}, dues, first}
  end
  for i = 1, 4 do weight[i] = 0 end
elseif ARGV[5] == 'auto' then
  local b = avail[1] + avail[2] + avail[4]
  weight = {b / 3, b / 3, avail[3], b / 3}
else
  for i = 1, 4 do weight[i] = tonumber(ARGV[4 + i]) end
  local owed = redis.call('HMGET', meta, 'credit:1', 'credit:2', 'credit:3', 'credit:4')
  for i = 1, 4 do credit[i] = tonumber(owed[i]) or 0 end
end

-- Largest-remainder split of `remaining` over the pools with weight and
-- origins left; a pool's part beyond what it holds is split again among the
-- others on the next round.
local function share(remaining, owed)
  while remaining > 0 do
    local active, total = {}, 0
    for i = 1, 4 do
      if weight[i] > 0 and take[i] < avail[i] then
        active[#active + 1] = i
        total = total + weight[i]
      end
    end
    if total == 0 then return remaining end
    local parts, rest, given = {}, {}, 0
    local mean_owed = 0
    if owed then
      -- Credits are relative: centre them on the active pools so the round
      -- still shares exactly `remaining`.
      for _, i in ipairs(active) do mean_owed = mean_owed + owed[i] / #active end
    end
    local exact = {}
    for _, i in ipairs(active) do
      exact[i] = remaining * weight[i] / total + (owed and (owed[i] - mean_owed) or 0)
      if exact[i] < 0 then exact[i] = 0 end
      parts[i] = math.floor(exact[i])
      rest[i] = exact[i] - parts[i]
      given = given + parts[i]
    end
    table.sort(active, function(a, b) return rest[a] > rest[b] or (rest[a] == rest[b] and a < b) end)
    for k = 1, math.min(remaining - given, #active) do
      parts[active[k]] = parts[active[k]] + 1
      given = given + 1
    end
    while given > remaining do
      -- Clamped negative credits can over-share by a slot or two: trim the largest.
      local big = active[1]
      for _, i in ipairs(active) do if parts[i] > parts[big] then big = i end end
      parts[big] = parts[big] - 1
      given = given - 1
    end
    if owed then
      -- What each pool was owed this round minus what it gets: carried over.
      for i = 1, 4 do
        if exact[i] and weight[i] > 0 and avail[i] - take[i] > parts[i] then
          owed[i] = math.max(-1, math.min(1, exact[i] - parts[i]))
        else
          owed[i] = 0
        end
      end
      owed = nil
    end
    local placed = 0
    for _, i in ipairs(active) do
      local part = math.min(parts[i], avail[i] - take[i])
      take[i] = take[i] + part
      placed = placed + part
    end
    remaining = remaining - placed
  end
  return 0
end

if ARGV[5] ~= 'due' then
  local left = share(n, credit)
  if keep_credit and ARGV[5] ~= 'auto' then
    redis.call('HSET', meta, 'credit:1', credit[1], 'credit:2', credit[2],
               'credit:3', credit[3], 'credit:4', credit[4])
  end
  if left > 0 then
    -- Every weighted pool is dry: serve the others rather than leave slots empty.
    for i = 1, 4 do weight[i] = (weight[i] > 0) and 0 or 1 end
    share(left)
  end
end

-- Each pool's origins go in flight with one ZADD (bulk.lua).
-- The in-flight score, formatted once (%.17g reads back as the same double):
-- given the Lua number, Redis formatted it again for each origin.
local now_arg = string.format('%.17g', now)
local popped = {}
for i = 1, 4 do
  if take[i] > 0 then
    local got
    if peek then
      got = pools.head(i, take[i])
    else
      got = pools.pop(i, take[i])
      local times = {}
      for j = 1, #got, 2 do
        times[j], times[j + 1] = now_arg, got[j]
      end
      bulk('ZADD', inflight, times)
    end
    popped[#popped + 1] = i
    popped[#popped + 1] = got
  end
end
pools.flush()
return {cooled, lost, popped}
