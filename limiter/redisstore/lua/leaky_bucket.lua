-- leaky_bucket.lua: leaky_bucket (code l). Mirrors limiter/step.go leaky: the backlog
-- is the work queued ahead of the next free slot; a request is admitted while it is
-- at most delayMax (MaxDelay in units).
--
-- Policy fields: perTick, perUnit, delayMax, quota, drainAll; the expiry (ttls).
-- Request and refund fields: as token_bucket.

DEF.l = function() return {
  fields = { 'perTick', 'perUnit', 'delayMax', 'quota', 'drainAll' },
  load = loadPacked,
  step = function(pol, st, cost, a1, a2)
    drain(pol, st, a1, a2)
    if cost == 0 then return true end
    if cost > pol.quota then return false end
    if st.n <= pol.delayMax then
      st.n = st.n + cost * pol.perUnit
      return true
    end
    return false
  end,
  out = outPacked,
  save = saveBucket,
  refund = refundBucket,
} end
