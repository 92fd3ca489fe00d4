-- fleet.lua: an edge's heartbeat. Sets the edge's own key with an expiry and its
-- entry in the fleet's sorted set (scored by expiry), drops entries that expired,
-- and returns how many edges are alive.
--
-- KEYS: the fleet's sorted set, the edge's key. ARGV: the edge's id, now (ms on the
-- Redis clock), the heartbeat's lifetime (ms), a description of the edge.

local now, life = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%.0f', now + life), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('ZCARD', KEYS[1])
