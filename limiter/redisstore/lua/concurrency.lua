-- concurrency.lua: concurrency with global scope (code c). State: a sorted set of
-- leases, one member per unit, scored by expiry (ms on the Redis clock); expired
-- leases are dropped before counting, so the units of a dead edge come back within
-- the lease TTL. Living edges renew their leases (renew.lua) and remove them on
-- release (refund).
--
-- Policy fields: quota, lease TTL (ms).
-- Request fields: s = the members' prefix (unique per acquisition): members are
-- prefix:1 … prefix:cost. Reply: the units held before the request (a double).
-- Refund fields: s = the members' prefix.

DEF.c = function() return {
  fields = { 'quota', 'ttl' },
  load = function(key, pol)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', NOWMS)
    local n = redis.call('ZCARD', key)
    return { n = n, n0 = n, p = 0, adds = {} }
  end,
  step = function(pol, st, cost, a1, a2, a3, a4, a5, a6, s)
    if cost == 0 then return true end
    if cost > pol.quota then return false end
    if st.n + cost <= pol.quota then
      st.n = st.n + cost
      st.adds[#st.adds + 1] = { s, cost }
      return true
    end
    return false
  end,
  out = function(key, pol, st, cost, ok, o)
    o[#o + 1] = spack('>d', st.n0)
  end,
  save = function(key, pol, st)
    local exp = NOWMS + pol.ttl
    for _, a in ipairs(st.adds) do
      local args = {}
      for i = 1, a[2] do
        args[#args + 1] = exp
        args[#args + 1] = a[1] .. ':' .. i
      end
      redis.call('ZADD', key, unpack(args))
    end
    local ms = pol.ttl + MARGIN
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
  end,
  refund = function(key, pol, units, s)
    local m = {}
    for i = 1, units do m[i] = s .. ':' .. i end
    redis.call('ZREM', key, unpack(m))
  end,
} end
