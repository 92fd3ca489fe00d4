-- token_bucket.lua: token_bucket and gcra (code b), and the drain shared with
-- leaky_bucket. Mirrors limiter/step.go bucket and drain. State: t = last update in
-- ticks, n = backlog in units (how far below full).
--
-- Policy fields: perTick, perUnit, capUnits, burst, drainAll; the expiry (ttls): how
-- long the fullest bucket takes to drain, plus the margin, in ms.
-- Request fields: a1, a2 = now in ticks (hi, lo).
-- Refund fields: none.
--
-- p, which the algorithm does not use, holds a lower bound of the key's expiry (ms on
-- the Redis clock; 0: unknown). Updating a key's expiry costs Redis about as much as
-- the rest of a decision (the expiry is deleted and inserted again), so setBucket keeps
-- it (KEEPTTL) while it outlasts the stored backlog's drain by the margin, and otherwise
-- sets it afresh: a hot key's expiry moves about once per window, not on every request.
-- limiter/step.go ignores p for this family; leaky_bucket leaves it 0 (no msPerUnit).

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

-- setBucket stores a state (backlog n, expiry bound p) for as long as the fullest
-- backlog takes to drain: no longer than a window after the last charge, and never
-- shorter than the time until this state is full again — keeping the key's expiry while
-- p says it is long enough (see p above).
local function setBucket(key, pol, hi, lo, n, p)
  if pol.msPerUnit and p >= NOWMS + n * pol.msPerUnit + MARGIN then
    redis.call('SET', key, spack('>dddd', hi, lo, n, p), 'KEEPTTL')
  else
    if pol.ttln then p = NOWMS + pol.ttln end
    redis.call('SET', key, spack('>dddd', hi, lo, n, p), 'PX', pol.ttls)
  end
end

local function saveBucket(key, pol, st)
  setBucket(key, pol, st.hi, st.lo, st.n, st.p)
end

local function refundBucket(key, pol, units)
  local st = loadPacked(key)
  if st.raw == '' then return end
  st.n = math.max(st.n - units * pol.perUnit, 0)
  redis.call('SET', key, encode(st), 'KEEPTTL')
end

DEF.b = function() return {
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
  init = function(pol)
    pol.ttln = tonumber(pol.ttls)
    -- ms for one unit of backlog to drain, at least: ttls is the drain time of
    -- capUnits + perTick units plus two ticks, rounded up, plus the margin (keys.go)
    pol.msPerUnit = (pol.ttln - MARGIN) / (pol.capUnits + 2 * pol.perTick)
  end,
  -- load, drain, step, outPacked and saveBucket above, with the state in locals
  one = function(key, pol, cost, a1, a2, _, o, i)
    local v = redis.call('GET', key)
    local hi, lo, n, p = 0, 0, 0, 0
    if v then hi, lo, n, p = sunpack('>dddd', v) end
    local e = (a1 - hi) * R32 + (a2 - lo)
    if e > 0 then
      if e >= pol.drainAll or e * pol.perTick >= n then
        n = 0
      else
        n = n - e * pol.perTick
      end
      hi, lo = a1, a2
    end
    local ok = cost == 0 or cost <= pol.burst and cost * pol.perUnit - (pol.capUnits - n) < pol.perTick
    replyOne(o, i, ok, ok and cost or 0, v)
    if ok and cost > 0 then
      setBucket(key, pol, hi, lo, n + cost * pol.perUnit, p)
    end
  end,
} end
