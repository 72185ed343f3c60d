-- lib.lua is prepended to apply.lua and refund.lua when they are loaded
-- (see scripts.go), so both use one copy of the arithmetic their exactness
-- depends on. It defines no KEYS or ARGV of its own except that clock()
-- reads ARGV[1].
--
-- scripts.go's prelude puts before it the constants the scripts share
-- with Go, generated from Go so that they cannot drift: one per
-- limits.Algorithm, named after the algorithm in capitals (FIXED_WINDOW =
-- 0, ...); apply.lua's modes (MODE_APPLY, MODE_RESERVE, MODE_REPORT); and
-- SPEC and CHECK below. The scripts use only those names.
--
-- Lua numbers are doubles: integers are exact below 2^53, which
-- limits.Limit keeps every quantity under.
--
-- Each check comes in ARGV as one record of CHECK bytes, packed by
-- scripts.go's appendCheck in struct's format SPEC ('<BBddddddI4I4', 58
-- bytes): algorithm, mode (CHECK_ENFORCED, CHECK_SHADOW or CHECK_QUOTA),
-- requests, window µs, tick µs, burst, hits, extra (hits asked for a
-- lease), then for a quota check its group and its request's number of
-- quota groups (0 and 0 otherwise). Binary numbers cost the script no
-- decimal parsing.

local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local spack, sunpack = struct.pack, struct.unpack

-- Integer division is floor(a / b) and ceil(a / b), inline: a function
-- call costs more than the division. Both are exact for integers
-- 0 <= a < 2^53 and b >= 1, which every use has: the double a / b rounds
-- to an integer only from within (a / b) * 2^-53 of it, while a quotient
-- that is no integer lies at least 1 / b from every integer, which is
-- more as long as a < 2^53. (scripts_test.go checks the edge cases.)

-- str formats an integer without an exponent, for building strings:
-- Lua's own conversion gives only 14 digits. Numbers passed to
-- redis.call need no str: Redis formats them with 17 digits, exact for
-- every integer below 2^53, though slowly (%.17g), so apply.lua formats
-- the arguments of its hot path itself, with %d.
local function str(x)
  return string.format('%.0f', x)
end

-- backlogOf returns a bucket's backlog from its stored level c, both
-- scaled by the window in ticks: a token bucket stores its free level, a
-- leaky bucket its backlog, neither above cap (burst × window ticks).
-- A level below zero is debt (limits.State.Debt): the backlog is cap and
-- that much more, at most MAXCOUNT.
local function backlogOf(alg, c, cap)
  if c < 0 then
    return min(cap - c, MAXCOUNT)
  elseif alg == TOKEN_BUCKET then
    return cap - min(c, cap)
  end
  return min(c, cap)
end

-- The level a bucket stores for backlog b is backlogOf's inverse: cap - b
-- for a token bucket, b for a leaky bucket, and past cap, for both, the
-- debt negated (cap - b). It is written out where it is needed: every
-- local function here is a closure made afresh on every call of a
-- script.

-- clock returns now in µs: ARGV[1] if a test set it, else Redis's TIME.
local function clock()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- writeState writes a fixed or sliding window's or a bucket's state s, c,
-- p (apply.lua's four numbers, with e its end: a window's expiry, the
-- time a bucket is full again, after now) to key, where stored is what
-- the key held: a window's start, a bucket's expiry µs (-1: nothing).
-- A window over the window the key holds is overwritten in place:
-- SETRANGE keeps the expiry, and its integer reply costs Lua less than
-- SET's status. A bucket's key keeps its expiry while the bucket is full
-- again by then, else expires twice as far from now as the time it is
-- full again (at most a minute more), so that the writes of a busy
-- bucket keep that, while a bucket hit once expires about as soon as it
-- is full again. apply.lua and fast.lua write every such key with it,
-- once per key and call.
local function writeState(key, alg, s, c, p, e, stored, now)
  if alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
    local v
    if alg == FIXED_WINDOW then
      v = spack('<dd', s, c)
    else
      v = spack('<ddd', s, c, p)
    end
    if stored == s then
      redis.call('SETRANGE', key, '0', v)
    else
      redis.call('SET', key, v, 'PX', string.format('%d', ceil((e - now) / 1000)))
    end
  elseif stored >= e then
    redis.call('SETRANGE', key, '0', spack('<ddd', s, c, stored))
  else
    local x = e + min(e - now, 60000000)
    redis.call('SET', key, spack('<ddd', s, c, x), 'PX', string.format('%d', ceil((x - now) / 1000)))
  end
end

-- calwin returns the start and length (µs) of the calendar window that
-- holds t, from a calendar check's record (calendar.go's calendarFields):
-- w is minus the start of the window that holds the sidecar's clock,
-- tick its end, and burst packs the previous window's length and the
-- next one's, in seconds (CAL_SHIFT bits apart). Redis's clock may be a
-- window behind the sidecar's or ahead of it, no more: past that, which
-- only a clock off by about a day or more can cause, the call fails
-- rather than count in a window it cannot name.
local function calwin(t, w, tick, burst)
  local b1, b2 = -w, tick
  local pl = floor(burst / CAL_SPAN) * 1000000
  local nl = (burst % CAL_SPAN) * 1000000
  if t >= b2 then
    if t < b2 + nl then
      return b2, nl
    end
  elseif t >= b1 then
    return b1, b2 - b1
  elseif t >= b1 - pl then
    return b1 - pl, pl
  end
  return error('ratelimit-sidecar: calendar window: Redis TIME ' .. str(t) .. ' µs is more than a window from the sidecar clock')
end
