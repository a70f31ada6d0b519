-- Prelude run before pop.lua or claim.lua (the two are concatenated) when a
-- scheduler holds a visit type's lease: the move happens only if the lease
-- is still held with the caller's token, atomically with the move itself.
--
-- KEYS[#KEYS] lease    string '<token>|<holder>' (lease.lua); removed from
--                      KEYS before the script it guards runs
-- ARGV[#ARGV] token    the caller's fencing token; removed from ARGV likewise
--
-- Error 'LEASE_LOST' when the lease expired or another scheduler holds it.

local lease_key = table.remove(KEYS)
local lease_token = table.remove(ARGV)
local lease_value = redis.call('GET', lease_key)
if not lease_value or string.sub(lease_value, 1, #lease_token + 1) ~= lease_token .. '|' then
  return redis.error_reply('LEASE_LOST the visit type is scheduled by another process')
end
