-- ban.lua: records a ban and announces it. The bans live in a sorted set (prefix →
-- end of the ban, ms on the Redis clock) and a hash (prefix → reason), so an edge
-- that starts loads the bans in force; both expire with the last ban. A shorter ban
-- never shortens a longer one in force. The announcement goes out on the channel.
--
-- KEYS: the sorted set, the hash. ARGV: prefix, until (ms), reason, now (ms), channel.

local prefix, untl, reason, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local cur = redis.call('ZSCORE', KEYS[1], prefix)
if cur and tonumber(cur) >= untl then
  untl = tonumber(cur)
  reason = redis.call('HGET', KEYS[2], prefix) or reason
else
  redis.call('ZADD', KEYS[1], ARGV[2], prefix)
  redis.call('HSET', KEYS[2], prefix, reason)
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(gone))
end
local top = redis.call('ZRANGE', KEYS[1], '-1', '-1', 'WITHSCORES')
if #top == 2 then
  local ms = string.format('%.0f', tonumber(top[2]) - tonumber(now) + 1000)
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', KEYS[2], ms)
end
redis.call('PUBLISH', ARGV[5], prefix .. ' ' .. string.format('%.0f', untl) .. ' ' .. reason)
return 1
