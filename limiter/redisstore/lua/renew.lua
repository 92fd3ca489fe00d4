-- renew.lua: extends the concurrency leases an edge still holds. Members that are
-- gone (expired while the edge could not reach Redis) are not added back: that could
-- exceed the quota. Returns how many were gone.
--
-- KEYS: the leases' keys. ARGV: the new expiry (ms on the Redis clock), the keys'
-- expiry (ms from now), then per key: the number of members, the members.

local exp, keyttl = ARGV[1], tonumber(ARGV[2])
local argi, gone = 3, 0
for k = 1, #KEYS do
  local n = tonumber(ARGV[argi])
  argi = argi + 1
  local args = {}
  for i = 1, n do
    args[#args + 1] = exp
    args[#args + 1] = ARGV[argi]
    argi = argi + 1
  end
  local updated = redis.call('ZADD', KEYS[k], 'XX', 'CH', unpack(args))
  gone = gone + n - updated
  if redis.call('PTTL', KEYS[k]) < keyttl then
    redis.call('PEXPIRE', KEYS[k], ARGV[2])
  end
end
return gone
