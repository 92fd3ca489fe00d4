-- unlock.lua: releases a blob lock only if it is still the caller's: a lock that
-- expired and was taken by another edge must not be deleted by the first holder.
--
-- KEYS: the lock's key. ARGV: the holder's token. Returns 1 if released, 0 if the
-- lock was not (or no longer) the caller's.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
