-- refund.lua: gives back units charged earlier: leased units an edge did not spend,
-- the charged segments of a decision another slot denied (Redis Cluster), and
-- released concurrency leases. Each algorithm undoes its charge only while it still
-- counts (the same window, the same logged instant), and never below zero; expiries
-- are kept.
--
-- ARGV[1]: the policies, packed as for decide.lua. ARGV[2]: the items, packed
-- doubles: their number, then per item: policy index, key index (into KEYS), units,
-- a1…a4, the index in ARGV of the item's string (0: none). ARGV[3…]: those strings.

local A, P, Q = ARGV, ARGV[1], ARGV[2]

local pols = readPolicies(P)
local pos

local n
n, pos = sunpack('>d', Q, 1)
for _ = 1, n do
  local pi, ki, units, a1, a2, a3, a4, si
  pi, ki, units, a1, a2, a3, a4, si, pos = sunpack('>dddddddd', Q, pos)
  local pol = pols[pi]
  if units > 0 then
    pol.alg.refund(KEYS[ki], pol, units, si > 0 and A[si] or '', a1, a2, a3, a4)
  end
end
return 1
