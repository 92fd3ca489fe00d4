-- common.lua: helpers shared by every algorithm; the algorithm files and a main file
-- (decide.lua or refund.lua) are appended to it to make one script.
--
-- Lua numbers are doubles, exact for integers below 2^53, while instants in ns since
-- the Unix epoch are near 2^61. So an instant is handled as two numbers, hi and lo
-- (t = hi×2^32 + lo), and only ever compared or subtracted (diff); every other
-- quantity the step functions use stays below 2^53 (limiter.Policy guarantees it).
-- The scripts never read a clock: the edge passes the instant, corrected to the
-- Redis clock.
--
-- The scripts decide many requests per call, so the hot path avoids what costs in
-- Lua: arguments arrive packed in binary (struct.unpack, no tonumber), states are
-- stored packed (struct.pack, no string formatting), replies are flat arrays.

local spack, sunpack = struct.pack, struct.unpack
local R32 = 4294967296
-- Every expiry gets this margin (ms): edges' corrected clocks and Redis's differ by a
-- few ms, and a key must never vanish while its state still matters.
local MARGIN = 1000

-- The instant being decided, in ms (concurrency's scores) and as 20 digits
-- (sliding_log's entries), set per segment by decide.lua.
local NOWMS, NOW = 0, ''

-- diff returns a - b for instants (ahi, alo) and (bhi, blo): exact while the
-- difference is below 2^53, and its sign is always right.
local function diff(ahi, alo, bhi, blo)
  return (ahi - bhi) * R32 + (alo - blo)
end

-- diffs is diff for instants written as 20 decimal digits (sliding_log's entries).
local sub = string.sub
local function diffs(a, b)
  if a == b then return 0 end
  return (tonumber(sub(a, 1, 11)) - tonumber(sub(b, 1, 11))) * 1e9
    + (tonumber(sub(a, 12)) - tonumber(sub(b, 12)))
end

-- ttl converts ns to whole ms, rounded up, at least 1, plus the margin.
local function ttl(ns)
  local m = math.ceil(ns / 1e6)
  if m < 1 then m = 1 end
  return m + MARGIN
end

-- The algorithms, by one-letter code. Each entry has:
--   fields  the names of the policy's parameters, in the order the edge sends them
--   load(key, pol, s)                   the key's stored state (s: the request's string)
--   step(pol, st, cost, a1, …, a6)      decide cost units on st (mutated), true if admitted
--   out(key, pol, st, cost, ok, o)      append the reply's fields for one request to o
--   save(key, pol, st, a1, …, a6)       store st, with an expiry; returns the logged instant
--   refund(key, pol, units, s, a1, …, a4)  give back units charged earlier
--   init(pol)                           optional: derives what one needs, once per call
--   one(key, pol, cost, a1, a2, a3, o, i)  optional: load, step, out and save of the
--     one request of a segment (no lease), the common case, with the state in locals
--     instead of a table and no calls between the steps; writes the segment's whole
--     reply from o[i] (replyOne). It must
--     decide, reply and store exactly as the four functions do (TestAgreesWithLocal
--     runs both paths against limiter.Local).
-- The request fields a1…a6 (numbers) and s (a string) are per algorithm, below.
--
-- Redis runs a script's top level on every call, and making all seven tables with their
-- functions costs more than several decisions: each file registers a constructor in
-- DEF instead, and ALG[code] makes the table on its first use in a call.
local DEF = {}
local ALG = setmetatable({}, { __index = function(t, code)
  local def = DEF[code]
  if def == nil then return nil end
  local a = def()
  t[code] = a
  return a
end })

-- Packed state: t (hi, lo), n, p as four doubles; see limiter/step.go for each
-- algorithm's meaning. The reply carries the stored value back as it is, after a
-- length byte (0 for a key never seen): the edge replays the exact integer step
-- functions on it to fill in the decision.
-- into, if given, is filled instead of a new table (decide.lua's one-request path
-- reuses one).
local function loadPacked(key, pol, s, into)
  local st = into or {}
  local v = redis.call('GET', key)
  if v then
    st.hi, st.lo, st.n, st.p = sunpack('>dddd', v)
    st.raw = v
  else
    st.hi, st.lo, st.n, st.p, st.raw = 0, 0, 0, 0, ''
  end
  return st
end

local function encode(st)
  return spack('>dddd', st.hi, st.lo, st.n, st.p)
end

local function outPacked(key, pol, st, cost, ok, o)
  local n = #o
  if st.raw == '' then
    o[n + 1] = '\0'
  else
    o[n + 1] = '\32' -- the length byte of a packed state
    o[n + 2] = st.raw
  end
end

-- outString appends a string field: a length byte and the string (at most 255).
local function outString(o, s)
  o[#o + 1] = spack('>B', #s) .. s
end

-- verdict packs a request's own verdict for decide.lua's reply: admitted or not, and
-- the units granted. The usual two are packed once.
local OK1, NO = spack('>Bd', 1, 1), spack('>Bd', 0, 0)
local function verdict(ok, granted)
  if ok then
    if granted == 1 then return OK1 end
    return spack('>Bd', 1, granted)
  end
  return NO
end

-- replyOne writes the reply of a segment of one request decided by ALG[code].one to
-- o[i] (and o[i + 1]): the segment's byte, the request's verdict and, for a packed state
-- v, its length byte (one string, made once for the usual cases), then v. The bytes
-- are those decide.lua writes piece by piece; fewer pieces cost less to concatenate.
local R_OK1_V, R_OK1_N = '\1' .. OK1 .. '\32', '\1' .. OK1 .. '\0'
local R_NO_V, R_NO_N = '\0' .. NO .. '\32', '\0' .. NO .. '\0'
local function replyOne(o, i, ok, granted, v)
  local h
  if ok and granted == 1 then
    h = v and R_OK1_V or R_OK1_N
  elseif not ok then
    h = v and R_NO_V or R_NO_N
  else
    h = '\1' .. verdict(true, granted) .. (v and '\32' or '\0')
  end
  o[i] = h
  if v then o[i + 1] = v end
end

local function copy(st)
  local c = {}
  for k, v in pairs(st) do c[k] = v end
  return c
end

-- readPolicies reads the policy table (ARGV[1]): their number, then per policy its
-- code (1 byte), 6 doubles (ALG[code].fields, padded) and a zero-terminated string
-- (the bucket family's expiry in ms, sent as text so Redis need not format a number).
local function readPolicies(P)
  local pols = {}
  local n, pos = sunpack('>d', P, 1)
  for i = 1, n do
    local code, f1, f2, f3, f4, f5, f6, ttls
    code, f1, f2, f3, f4, f5, f6, ttls, pos = sunpack('>c1dddddds', P, pos)
    local alg = ALG[code]
    local f = { f1, f2, f3, f4, f5, f6 }
    local pol = { alg = alg, ttls = ttls }
    for j = 1, #alg.fields do pol[alg.fields[j]] = f[j] end
    if alg.init then alg.init(pol) end
    pols[i] = pol
  end
  return pols
end
