-- End the 'bulk' phase of a rebuild on one shard: from now on place.lua
-- applies placements to the staging keys too (phase 'direct'). Only while the
-- marker is still this rebuild's: one whose marker lapsed and was taken over
-- by another rebuild must not switch (nor later swap) the newer one's keys.
--
-- KEYS[1] staging meta  the marker: '<phase> <token>'
-- ARGV[1] the rebuild's token
-- ARGV[2] the marker's time to live (s)
--
-- Returns 1 once switched, 0 when the marker is not this rebuild's.

if redis.call('GET', KEYS[1]) ~= 'bulk ' .. ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'direct ' .. ARGV[1], 'EX', ARGV[2])
return 1
