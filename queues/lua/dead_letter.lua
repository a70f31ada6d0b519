-- Requeue or drop one dead letter of a Dramatiq queue, atomically.
--
-- KEYS[1]  <ns>:<queue>.XQ        zset: dead message ids, scored by when they died
-- KEYS[2]  <ns>:<queue>.XQ.msgs   hash: dead message id -> encoded message
-- KEYS[3]  <ns>:<queue>           list: ids of messages waiting (Dramatiq pops the left end)
-- KEYS[4]  <ns>:<queue>.msgs      hash: message id -> encoded message
-- ARGV[1]  "requeue" (back at the end of the queue, as Dramatiq's enqueue puts it) or "drop"
-- ARGV[2]  message id
-- Returns 1 if the message was a dead letter, else 0.

local message = redis.call("hget", KEYS[2], ARGV[2])
if not message then
  return 0
end
redis.call("zrem", KEYS[1], ARGV[2])
redis.call("hdel", KEYS[2], ARGV[2])
if ARGV[1] == "requeue" then
  redis.call("hset", KEYS[4], ARGV[2], message)
  redis.call("rpush", KEYS[3], ARGV[2])
end
return 1
