-- Abandon a failed rebuild of one shard: drop its staging keys and release
-- its marker, if the marker still names its token (else another rebuild
-- holds it, and nothing is touched).
--
-- KEYS[1..8] the staging keys: the four pools, inflight, cooling, parked, version
-- KEYS[9]    staging meta     the marker: '<phase> <token>'
-- KEYS[10]   staging touched  origins placed during the 'bulk' phase
-- ARGV[1] the rebuild's token
--
-- Returns 1 if released, 0 if the marker was gone or another's.

local held = redis.call('GET', KEYS[9])
local token = ' ' .. ARGV[1]
if not held or string.sub(held, -#token) ~= token then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
