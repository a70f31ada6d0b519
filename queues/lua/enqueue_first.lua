-- Enqueue one Dramatiq message at the head of its queue, atomically: it is
-- served before every message already waiting (Dramatiq's Redis broker has no
-- priority within a queue). Used to move a visit that outlasted the express
-- lane to the front of the slow lane (seed 003).
--
-- KEYS[1]  <ns>:<queue>.msgs   hash: message id -> encoded message
-- KEYS[2]  <ns>:<queue>        list: ids of messages waiting (Dramatiq pops the left end)
-- ARGV[1]  message id (the message's redis_message_id option)
-- ARGV[2]  encoded message
-- Returns the queue's length after the push.

redis.call("hset", KEYS[1], ARGV[1], ARGV[2])
return redis.call("lpush", KEYS[2], ARGV[1])
