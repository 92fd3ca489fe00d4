-- sliding_log.lua: sliding_log (code g). Mirrors limiter/step.go log and logAppend.
-- State: a list of admitted instants (20 decimal digits, oldest first), one per unit.
--
-- Policy fields: quota, window (ns).
-- Request fields: s = now minus the window (20 digits): instants up to it have left.
-- Reply: live units after the step and in the stored state (doubles), then as
-- strings the oldest live instant, the instant whose leaving admits the request
-- (denied), the oldest in the stored state, and the instant the units were logged
-- at (if charged); '' where there is none.
-- Refund fields: s = the instant the units were logged at.

-- logFirst returns the index (0-based) of the first instant in the list that is
-- later than ref - w, reading from the head in growing chunks: instants that left are
-- removed whenever the key is charged, so few are read.
local function logFirst(key, len, ref, w)
  local i, chunk = 0, 16
  while i < len do
    local els = redis.call('LRANGE', key, i, i + chunk - 1)
    for j = 1, #els do
      if diffs(els[j], ref) + w > 0 then return i + j - 1 end
    end
    if #els == 0 then break end
    i = i + #els
    chunk = chunk * 4
  end
  return len
end

-- logAt returns the i-th (0-based) oldest live instant, pending units (all at now)
-- last.
local function logAt(key, st, i)
  if i < st.n then return redis.call('LINDEX', key, st.first + i) end
  return NOW
end

DEF.g = function() return {
  logs = true, -- save returns the logged instant (decide.lua)
  fields = { 'quota', 'window' },
  load = function(key, pol, s)
    local len = redis.call('LLEN', key)
    local first = 0
    if len > 0 then first = logFirst(key, len, s, 0) end
    return { first = first, len = len, n = len - first, p = 0 }
  end,
  step = function(pol, st, cost)
    if cost == 0 then return true end
    if cost > pol.quota then return false end
    if st.n + st.p + cost <= pol.quota then
      st.p = st.p + cost
      return true
    end
    return false
  end,
  out = function(key, pol, st, cost, ok, o)
    local live = st.n + st.p
    o[#o + 1] = spack('>dd', live, st.n)
    outString(o, live > 0 and logAt(key, st, 0) or '')
    if not ok and cost <= pol.quota then
      outString(o, logAt(key, st, live + cost - pol.quota - 1))
    else
      outString(o, '')
    end
    -- a read of the stored state: the same list, nothing pending
    outString(o, st.n > 0 and logAt(key, st, 0) or '')
    outString(o, '') -- the logged instant, filled in by save
  end,
  save = function(key, pol, st)
    -- Units are logged at max(now, newest), so the list stays in order; instants
    -- that left the window as seen from there are dropped.
    local at, first = NOW, st.first
    if st.len > 0 then
      local newest = redis.call('LINDEX', key, -1)
      if diffs(newest, NOW) > 0 then
        at = newest
        first = logFirst(key, st.len, newest, pol.window)
      end
    end
    if first >= st.len then
      redis.call('DEL', key)
    elseif first > 0 then
      redis.call('LTRIM', key, first, -1)
    end
    local chunk = {}
    for i = 1, math.min(st.p, 1000) do chunk[i] = at end
    local left = st.p
    while left > 0 do
      local k = math.min(left, 1000)
      redis.call('RPUSH', key, unpack(chunk, 1, k))
      left = left - k
    end
    redis.call('PEXPIRE', key, ttl(pol.window + diffs(at, NOW)))
    return at
  end,
  refund = function(key, pol, units, s)
    redis.call('LREM', key, -units, s)
  end,
} end
