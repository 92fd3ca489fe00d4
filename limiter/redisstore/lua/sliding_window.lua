-- sliding_window.lua: sliding_window (code s). Mirrors limiter/step.go sliding. State:
-- t = window start in ns, n = units this window, p = units last window.
--
-- Policy fields: quota, windowTicks.
-- Request fields: a1, a2 = start of now's window; a3, a4 = start of the window
-- before it; a5 = ticks left in now's window; a6 = ms until the end of the window
-- after now's.
-- Refund fields: a1, a2 = start of the window the units were charged in; a3, a4 =
-- start of the window after it.

DEF.s = function() return {
  fields = { 'quota', 'wt' },
  load = loadPacked,
  step = function(pol, st, cost, a1, a2, a3, a4, a5)
    if diff(a1, a2, st.hi, st.lo) > 0 then
      if st.hi == a3 and st.lo == a4 then st.p = st.n else st.p = 0 end
      st.hi, st.lo, st.n = a1, a2, 0
    end
    local rest = pol.wt
    if st.hi == a1 and st.lo == a2 then rest = a5 end
    if cost == 0 then return true end
    if cost > pol.quota then return false end
    -- p*rest + (n+cost)*wt <= quota*wt, arranged to stay below 2^53
    local room = pol.quota - st.n - cost
    if room >= 0 and st.p * rest <= room * pol.wt then
      st.n = st.n + cost
      return true
    end
    return false
  end,
  out = outPacked,
  save = function(key, pol, st, a1, a2, a3, a4, a5, a6)
    if st.hi == a1 and st.lo == a2 then
      redis.call('SET', key, encode(st), 'PX', a6 + MARGIN)
    else
      redis.call('SET', key, encode(st), 'KEEPTTL')
    end
  end,
  refund = function(key, pol, units, s, a1, a2, a3, a4)
    local st = loadPacked(key)
    if st.hi == a1 and st.lo == a2 then
      st.n = math.max(st.n - units, 0)
    elseif st.hi == a3 and st.lo == a4 then
      st.p = math.max(st.p - units, 0)
    else
      return
    end
    redis.call('SET', key, encode(st), 'KEEPTTL')
  end,
} end
