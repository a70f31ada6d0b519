-- Dead-letter one message Dramatiq cannot run, atomically: a body that is not
-- a Dramatiq message, or an id with no body at all. Dramatiq's consumer fails
-- on both and leaves them in its acknowledgement set for ever.
--
-- KEYS[1]     <ns>:<queue>.msgs     hash: message id -> encoded message
-- KEYS[2]     <ns>:<queue>          list: ids of messages waiting
-- KEYS[3]     <ns>:<queue>.XQ       zset: dead message ids, scored by when (unix ms)
-- KEYS[4]     <ns>:<queue>.XQ.msgs  hash: dead message id -> encoded message
-- KEYS[5...]  <ns>:__acks__.<worker>.<queue>  sets: ids each worker holds unacked
-- ARGV[1]  "undecodable" (its body is moved) or "bodiless" (ARGV[4] is stored)
-- ARGV[2]  message id
-- ARGV[3]  now, unix ms
-- ARGV[4]  what to store as the body of a bodiless message
-- Returns 1 if the message was dead-lettered, else 0 (it changed meanwhile:
-- acknowledged, or given a body).

local id = ARGV[2]
local body
if ARGV[1] == "undecodable" then
  body = redis.call("hget", KEYS[1], id)
  if not body then
    return 0
  end
else
  if redis.call("hexists", KEYS[1], id) == 1 then
    return 0
  end
  body = redis.call("hget", KEYS[4], id) or ARGV[4]
end
local held = redis.call("lrem", KEYS[2], 0, id)
for i = 5, #KEYS do
  held = held + redis.call("srem", KEYS[i], id)
end
if ARGV[1] == "bodiless" and held == 0 then
  return 0
end
redis.call("hdel", KEYS[1], id)
redis.call("zadd", KEYS[3], ARGV[3], id)
redis.call("hset", KEYS[4], id, body)
return 1
