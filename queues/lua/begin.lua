-- Begin a rebuild of one shard of a visit type's mirror: empty its staging
-- keys and set the rebuild-in-progress marker (place.lua's 'bulk' phase), in
-- one step, so that no placement is noted between the two and then lost.
--
-- KEYS[1..8] the staging keys: the four pools, inflight, cooling, parked, version
-- KEYS[9]    staging meta     the marker: '<phase> <token>'
-- KEYS[10]   staging touched  origins placed during the 'bulk' phase
-- ARGV[1] the marker's value ('bulk <token>')
-- ARGV[2] its time to live (s); the rebuild renews it while it writes
-- ARGV[3] 'nx' to refuse while another rebuild holds the marker (its value
--         is returned and nothing changes), anything else to take it over
--
-- Returns nil once begun, or the marker of the rebuild in progress.

if ARGV[3] == 'nx' then
  local held = redis.call('GET', KEYS[9])
  if held then return held end
end
redis.call('DEL', unpack(KEYS))
redis.call('SET', KEYS[9], ARGV[1], 'EX', ARGV[2])
return false
