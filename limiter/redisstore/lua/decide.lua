-- decide.lua: decides segments of requests, each all-or-nothing: if any request of a
-- segment is denied, nothing of that segment is stored. A segment is the part of one
-- edge decision whose keys share a Redis Cluster slot (all of it on a single Redis);
-- the edge batches several segments into one call.
--
-- ARGV[1]: the policies, packed (see readPolicies in common.lua). ARGV[2]: the segments, packed doubles: their number,
-- then per segment: nrequests, now (hi, lo), now (ms), the index in ARGV of now as 20
-- digits; then per request: policy index, key index (into KEYS), cost, want, a1…a6,
-- the index in ARGV of the request's string (0: none). ARGV[3…]: those strings.
-- A request asks for want units if they are admitted (lease mode), else for cost.
--
-- Reply: one binary string, the concatenation of: per segment a byte 1 or 0
-- (admitted or not), then per request a byte 1 or 0 (this request's own verdict), the
-- units granted (a double), and ALG[code].out's fields. (One string instead of an
-- array spares both Redis and the edge a reply object per field.)

local A, P, Q = ARGV, ARGV[1], ARGV[2]

local pols = readPolicies(P)
local pos

local out = {}
local ONE = { hi = 0, lo = 0, n = 0, p = 0, raw = '' } -- the one-request path's state
local nseg
nseg, pos = sunpack('>d', Q, 1)
for _ = 1, nseg do
  -- The segment's head and its first request in one unpacking (a segment has at least
  -- one request).
  local nreq, ns, _, pi, ki, cost, want, a1, a2, a3, a4, a5, a6, si, after
  nreq, _, _, NOWMS, ns, pi, ki, cost, want, a1, a2, a3, a4, a5, a6, si, after =
    sunpack('>dddddddddddddddd', Q, pos)
  NOW = ns > 0 and A[ns] or ''
  local head = #out + 1
  if nreq == 1 then
    -- The common case, one request: no bookkeeping of keys and charges, and for the
    -- algorithms that have one, the whole request in one function (ALG[code].one).
    pos = after
    local pol = pols[pi]
    local alg = pol.alg
    if alg.one and want == cost then
      alg.one(KEYS[ki], pol, cost, a1, a2, a3, out, head)
    else
      out[head] = '\0'
      local s = si > 0 and A[si] or ''
      local key = KEYS[ki]
      local st = alg.load(key, pol, s, ONE)
      local ok, granted = false, 0
      if want > cost then
        local c = copy(st)
        if alg.step(pol, c, want, a1, a2, a3, a4, a5, a6, s) then
          st, ok, granted = c, true, want
        end
      end
      if not ok then
        ok = alg.step(pol, st, cost, a1, a2, a3, a4, a5, a6, s)
        if ok then granted = cost end
      end
      out[#out + 1] = verdict(ok, granted)
      alg.out(key, pol, st, granted > 0 and granted or cost, ok, out)
      if ok then
        out[head] = '\1'
        if granted > 0 then
          local at = alg.save(key, pol, st, a1, a2, a3, a4, a5, a6)
          if at then out[#out] = spack('>B', #at) .. at end
        end
      end
    end
  else
    out[head] = '\0'
    pos = pos + 40 -- the head's five doubles: the requests are read below
    local states, order = {}, {}
    local admitted, charged = true, false
    for _ = 1, nreq do
      local rp = pos
      local pi, ki, cost, want, a1, a2, a3, a4, a5, a6, si
      pi, ki, cost, want, a1, a2, a3, a4, a5, a6, si, pos = sunpack('>ddddddddddd', Q, pos)
      local s = si > 0 and A[si] or ''
      local pol = pols[pi]
      local alg = pol.alg
      local key = KEYS[ki]
      local st = states[ki]
      if not st then
        st = alg.load(key, pol, s)
        states[ki] = st
        order[#order + 1] = ki
      end
      local ok, granted = false, 0
      if want > cost then
        local c = copy(st)
        if alg.step(pol, c, want, a1, a2, a3, a4, a5, a6, s) then
          st, ok, granted = c, true, want
          states[ki] = c
        end
      end
      if not ok then
        ok = alg.step(pol, st, cost, a1, a2, a3, a4, a5, a6, s)
        if ok then granted = cost end
      end
      if ok then
        if granted > 0 then
          st.charged, st.pol = rp, pol
          charged = true
        end
      else
        admitted = false
      end
      out[#out + 1] = verdict(ok, granted)
      alg.out(key, pol, st, granted > 0 and granted or cost, ok, out)
      if alg.logs then -- where save writes the logged instant
        st.logged = st.logged or {}
        st.logged[#st.logged + 1] = #out
      end
    end
    if admitted and charged then
      for _, ki in ipairs(order) do
        local st = states[ki]
        if st.charged then
          -- saved with the time fields of the last request that charged it (all of a
          -- segment's requests share the instant)
          local _, _, _, _, a1, a2, a3, a4, a5, a6 = sunpack('>dddddddddd', Q, st.charged)
          local at = st.pol.alg.save(KEYS[ki], st.pol, st, a1, a2, a3, a4, a5, a6)
          if at then
            for _, i in ipairs(st.logged) do out[i] = spack('>B', #at) .. at end
          end
        end
      end
    end
    if admitted then out[head] = '\1' end
  end
end
return table.concat(out)
