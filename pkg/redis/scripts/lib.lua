-- lib.lua is prepended to apply.lua and refund.lua when they are loaded
-- (see store.go), so both use one copy of the arithmetic their exactness
-- depends on. It defines no KEYS or ARGV of its own except that clock()
-- reads ARGV[1].
--
-- store.go puts before it one constant per limits.Algorithm, named after
-- the algorithm in capitals (FIXED_WINDOW = 0, ...), generated from the Go
-- table so the codes cannot drift; the scripts use only those names.
--
-- Lua numbers are doubles: integers are exact below 2^53, which
-- limits.Limit keeps every quantity under.
--
-- Each check comes in ARGV as one record of CHECK bytes, packed by
-- store.go's appendCheck in struct's format SPEC: algorithm, shadow (0 or
-- 1), requests, window µs, tick µs, burst, hits. Binary numbers cost the
-- script no decimal parsing.

local SPEC, CHECK = '<BBddddd', 42
local floor, min, max = math.floor, math.min, math.max
local spack, sunpack = struct.pack, struct.unpack

-- idiv is floor(a / b) for integers a >= 0, b > 0, corrected in case the
-- double division rounded up to the next integer.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceildiv(a, b)
  if a == 0 then
    return 0
  end
  return idiv(a - 1, b) + 1
end

-- str formats an integer without an exponent, for building strings:
-- Lua's own conversion gives only 14 digits. Numbers passed to
-- redis.call need no str: Redis formats them with 17 digits, exact for
-- every integer below 2^53.
local function str(x)
  return string.format('%.0f', x)
end

-- ttl converts µs to a PEXPIRE argument: whole ms, rounded up, at least 1.
local function ttl(us)
  return max(1, ceildiv(max(us, 0), 1000))
end

-- clock returns now in µs: ARGV[1] if a test set it, else Redis's TIME.
local function clock()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

