-- fixed_window.lua: fixed_window (code f). Mirrors limiter/step.go fixed. State: t =
-- window start in ns, n = units this window.
--
-- Policy fields: quota.
-- Request fields: a1, a2 = start of now's window (hi, lo); a3 = ms until its end.
-- Refund fields: a1, a2 = start of the window the units were charged in.

DEF.f = function() return {
  fields = { 'quota' },
  load = loadPacked,
  step = function(pol, st, cost, a1, a2)
    if diff(a1, a2, st.hi, st.lo) > 0 then
      st.hi, st.lo, st.n, st.p = a1, a2, 0, 0
    end
    if cost == 0 then return true end
    if cost > pol.quota then return false end
    if st.n + cost <= pol.quota then
      st.n = st.n + cost
      return true
    end
    return false
  end,
  out = outPacked,
  save = function(key, pol, st, a1, a2, a3)
    if st.hi == a1 and st.lo == a2 then
      redis.call('SET', key, encode(st), 'PX', a3 + MARGIN)
    else -- a later window stored by an edge whose clock is ahead: keep its expiry
      redis.call('SET', key, encode(st), 'KEEPTTL')
    end
  end,
  -- load, step, outPacked and save above, with the state in locals
  one = function(key, pol, cost, a1, a2, a3, o, i)
    local v = redis.call('GET', key)
    local hi, lo, n, p = 0, 0, 0, 0
    if v then hi, lo, n, p = sunpack('>dddd', v) end
    -- A key holding this window's state expires at the window's end plus the margin:
    -- the write that begins the window (fresh) sets that, so later ones keep it.
    local fresh = (a1 - hi) * R32 + (a2 - lo) > 0
    if fresh then
      hi, lo, n, p = a1, a2, 0, 0
    end
    local ok = cost == 0 or cost <= pol.quota and n + cost <= pol.quota
    replyOne(o, i, ok, ok and cost or 0, v)
    if ok and cost > 0 then
      local s = spack('>dddd', hi, lo, n + cost, p)
      if fresh then
        redis.call('SET', key, s, 'PX', a3 + MARGIN)
      else
        redis.call('SET', key, s, 'KEEPTTL')
      end
    end
  end,
  refund = function(key, pol, units, s, a1, a2)
    local st = loadPacked(key)
    if st.hi ~= a1 or st.lo ~= a2 then return end -- that window is over
    st.n = math.max(st.n - units, 0)
    redis.call('SET', key, encode(st), 'KEEPTTL')
  end,
} end
