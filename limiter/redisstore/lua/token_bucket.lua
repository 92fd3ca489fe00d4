-- token_bucket.lua: token_bucket and gcra (code b), and the drain shared with
-- leaky_bucket. Mirrors limiter/step.go bucket and drain. State: t = last update in
-- ticks, n = backlog in units (how far below full).
--
-- Policy fields: perTick, perUnit, capUnits, burst, drainAll; the expiry (ttls): how
-- long the fullest bucket takes to drain, plus the margin, in ms.
-- Request fields: a1, a2 = now in ticks (hi, lo).
-- Refund fields: none.

local function drain(pol, st, nhi, nlo)
  local e = diff(nhi, nlo, st.hi, st.lo)
  if e <= 0 then return end -- a clock stepping back drains nothing
  if e >= pol.drainAll or e * pol.perTick >= st.n then
    st.n = 0
  else
    st.n = st.n - e * pol.perTick
  end
  st.hi, st.lo = nhi, nlo
end

-- saveBucket stores the state for as long as the fullest backlog takes to drain: no
-- longer than a window after the last charge, and never shorter than the time until
-- this state is full again.
local function saveBucket(key, pol, st)
  redis.call('SET', key, encode(st), 'PX', pol.ttls)
end

local function refundBucket(key, pol, units)
  local st = loadPacked(key)
  if st.raw == '' then return end
  st.n = math.max(st.n - units * pol.perUnit, 0)
  redis.call('SET', key, encode(st), 'KEEPTTL')
end

ALG.b = {
  fields = { 'perTick', 'perUnit', 'capUnits', 'burst', 'drainAll' },
  load = loadPacked,
  step = function(pol, st, cost, a1, a2)
    drain(pol, st, a1, a2)
    if cost == 0 then return true end
    if cost > pol.burst then return false end
    -- admitted if the units missing for cost are fewer than one tick drains:
    -- n + cost*perUnit - capUnits < perTick, arranged to stay below 2^53
    if cost * pol.perUnit - (pol.capUnits - st.n) < pol.perTick then
      st.n = st.n + cost * pol.perUnit
      return true
    end
    return false
  end,
  out = outPacked,
  save = saveBucket,
  refund = refundBucket,
}
