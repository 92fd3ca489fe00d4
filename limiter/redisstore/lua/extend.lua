-- extend.lua: renews a blob lock's lease only if it is still the caller's.
--
-- KEYS: the lock's key. ARGV: the holder's token, the new lease in ms. Returns 1 if
-- extended, 0 if the lock was not (or no longer) the caller's.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
