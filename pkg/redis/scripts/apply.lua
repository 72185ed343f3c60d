-- apply.lua decides every rate-limit check of one request as one atomic
-- unit. It mirrors limits.Limit.Evaluate line by line, for all five
-- algorithms, and limits.MemoryStore.Apply's all-or-nothing rule.
--
-- KEYS: the state keys of the checks, in check order: one per check, and
--   two for sliding_log (the log, then its sidecar). All in one hash slot.
--   A key may repeat: checks on one key see each other's hits.
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2]: "1" to reserve (one slot group of a cross-slot request): also
--   return, per check, its outcome should another group reject the
--   request, and a refund receipt for refund.lua.
-- ARGV[3]: the checks, one binary record each (lib.lua's SPEC).
--
-- Returns an array of integers: admitted (0 or 1), then per check over
-- (0 or 1), remaining, reset µs; when reserving, each check also has the
-- remaining and reset µs it reports if the request is rejected, and its
-- receipt (-1 if it consumed nothing).
--
-- Why a script: every check must be read, decided and written with no
-- other request in between, on one clock shared by every sidecar, in one
-- round trip. Nothing is written unless every enforced check passes.
--
-- Redis's cost is mostly per command the script calls and per value it
-- converts, so the script reads every key with one MGET, writes each key
-- once with SET ... PX (value and expiry in one command), takes its
-- numbers in binary, and keeps no table per check.
--
-- State: one string per key, of little-endian doubles (struct.pack), all
-- integers below 2^53:
--   fixed_window    '<dd': window start µs, hits in it. TTL to the
--                   window's end.
--   sliding_window  '<ddd': window start, hits, previous window's hits.
--                   TTL two windows from the window's start.
--   token_bucket,   '<ddd': tick of the last update, level (free level,
--   leaky_bucket    or backlog, scaled by the window in ticks), µs when
--                   the bucket is full again. TTL to that time.
--   sliding_log     zset of admitted requests, member "<seq>:<hits>",
--                   score µs; sidecar string '<ddd': the members' hits,
--                   the last seq, the greatest score. Both expire one
--                   window after the greatest score.
-- A value of another length or type (MGET reads a hash as nil) is a fresh
-- key, overwritten by the next write. So the hashes of earlier versions
-- start from zero once; a sliding log is recounted from its members.
--
-- While deciding, a check's state is four numbers s, c, p, e:
--   fixed_window    start, hits, 0, end of the window (after a hit)
--   sliding_window  start, hits, previous hits, start + 2 windows
--   buckets         tick, level, 0, full-again µs
--   sliding_log     0, hits in the window, seq, newest live entry µs (0:
--                   none)

local function loghits(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local now = clock()
local reserve = ARGV[2] == '1'
local spec = ARGV[3]
local n = #spec / CHECK
local vals = redis.call('MGET', unpack(KEYS))

-- Per sliding-log key index: whether the log holds entries to trim, and
-- its greatest score. Made on the first sliding log.
local logtrim, logtop

-- loadlog returns the state of the sliding log at KEYS[k] and notes what
-- its write needs in logtrim and logtop.
local function loadlog(k, lo)
  local key, v = KEYS[k], vals[k + 1]
  local count, seq, top, trim = 0, 0, 0, false
  local known = v and #v == 24
  if known then
    count, seq, top = sunpack('<ddd', v)
    if top <= lo then
      -- Every entry has left the window.
      count, trim = 0, true
    else
      -- Entries at or before lo have left the window; they stay stored
      -- until the next write trims them.
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', lo)) do
        count = count - loghits(m)
        trim = true
      end
      -- A live entry holds a hit, so count <= 0 means a stale sidecar.
      known = count > 0
    end
  end
  if not known then
    -- The sidecar was lost, or stale, or is an earlier version's hash:
    -- recount the log, and go on past every sequence number in it.
    local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    count, top, trim = 0, 0, false
    for i = 1, #all, 2 do
      local m, at = all[i], tonumber(all[i + 1])
      seq = max(seq, tonumber(string.match(m, '^(%d+):')))
      top = max(top, at)
      if at <= lo then
        trim = true
      else
        count = count + loghits(m)
      end
    end
  end
  if not logtrim then
    logtrim, logtop = {}, {}
  end
  logtrim[k], logtop[k] = trim, top
  if top <= lo then
    return 0, count, seq, 0
  end
  return 0, count, seq, top
end

-- logwait returns how long until need hits have left the window (lo, now]
-- of the log at key, oldest first: its stored entries, then this
-- request's earlier checks' hits, which all leave after a whole window.
local function logwait(key, lo, need, w)
  local freed, off = 0, 0
  local from = '(' .. str(lo)
  while true do
    local page = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', off, 32)
    for i = 1, #page, 2 do
      freed = freed + loghits(page[i])
      if freed >= need then
        return tonumber(page[i + 1]) + w - now
      end
    end
    if #page < 64 then
      return w
    end
    off = off + 32
  end
end

-- evaluate is limits.Limit.Evaluate: the verdict of a limit on state
-- s, c, p, e for hits (over, remaining, reset µs), and the state after
-- consuming them. k is the check's key index, for a sliding log.
local function evaluate(alg, req, w, tick, burst, hits, k, s, c, p, e)
  local probe = max(hits, 1)
  if req == 0 then
    return true, 0, idiv(now, w) * w + w - now, s, c, p, e
  end

  if alg == SLIDING_WINDOW then
    -- In ticks, with the estimate scaled by the window length W:
    -- E = prev * (W - elapsed) + cur * W.
    local start = idiv(now, w) * w
    if s == start - w then
      c, p = 0, c
    elseif s ~= start then
      c, p = 0, 0
    end
    local wt = idiv(w, tick)
    local elapsed = idiv(now - start, tick)
    local est = p * (wt - elapsed) + c * wt
    local cap = req * wt
    -- probe > req can never fit; testing it first keeps probe * wt from
    -- growing past 2^53 (the outcome is the same as the formula's).
    if probe > req or est + probe * wt > cap then
      local ticks
      if probe > req then
        ticks = 2 * wt - elapsed
      else
        local need = est + probe * wt - cap
        if p > 0 and ceildiv(need, p) <= wt - elapsed then
          ticks = ceildiv(need, p)
        elseif c + probe <= req then
          ticks = wt - elapsed
        elseif c > 0 and ceildiv((c + probe - req) * wt, c) <= wt then
          ticks = wt - elapsed + ceildiv((c + probe - req) * wt, c)
        else
          ticks = 2 * wt - elapsed
        end
      end
      return true, idiv(cap - min(est, cap), wt), ticks * tick, s, c, p, e
    end
    c = c + hits
    est = est + hits * wt
    local reset = 0
    if c > 0 then
      reset = start + 2 * w - now
    elseif p > 0 then
      reset = start + w - now
    end
    return false, idiv(cap - est, wt), reset, start, c, p, start + 2 * w
  end

  if alg == SLIDING_LOG then
    if c + probe > req then
      local reset = w
      if probe <= req then
        reset = logwait(KEYS[k], now - w, c + probe - req, w)
      end
      return true, req - min(c, req), reset, s, c, p, e
    end
    if hits > 0 then
      c, p, e = c + hits, p + 1, now
    end
    local reset = 0
    if e > 0 then
      reset = e + w - now
    end
    return false, req - c, reset, s, c, p, e
  end

  if alg == TOKEN_BUCKET or alg == LEAKY_BUCKET then
    -- In ticks, with levels scaled by the window length W in ticks: a
    -- bucket holds burst * W, a hit costs W and each tick drains (or
    -- refills) req. The token bucket stores the free level, the leaky
    -- bucket the backlog.
    local wt = idiv(w, tick)
    local t = idiv(now, tick)
    local cap = burst * wt
    local backlog = 0
    if e ~= 0 and e > now then
      if alg == TOKEN_BUCKET then
        backlog = cap - min(c, cap)
      else
        backlog = min(c, cap)
      end
      if t > s then
        local elapsed = t - s
        if elapsed >= ceildiv(backlog, req) then
          backlog = 0
        else
          backlog = backlog - elapsed * req
        end
      end
    end
    if probe > burst or backlog + probe * wt > cap then
      local ticks = ceildiv(backlog, req)
      if probe <= burst then
        ticks = ceildiv(backlog + probe * wt - cap, req)
      end
      return true, idiv(cap - backlog, wt), ticks * tick, s, c, p, e
    end
    backlog = backlog + hits * wt
    local full = ceildiv(backlog, req) * tick
    local rem, reset = idiv(cap - backlog, wt), max(0, full - (now - t * tick))
    if t * tick + full <= now then
      -- Full again already: the same as no state at all.
      return false, rem, reset, 0, 0, 0, 0
    end
    if alg == TOKEN_BUCKET then
      return false, rem, reset, t, cap - backlog, 0, t * tick + full
    end
    return false, rem, reset, t, backlog, 0, t * tick + full
  end

  -- FIXED_WINDOW
  local start = idiv(now, w) * w
  if s ~= start then
    c = 0
  end
  local reset = start + w - now
  if c + probe > req then
    return true, req - min(c, req), reset, s, c, p, e
  end
  c = c + hits
  return false, req - c, reset, start, c, 0, start + w
end

-- Decide every check in order on working copies of the state, so checks
-- on one key see each other's hits. X holds per check i, from
-- b = (i - 1) * 12:
--   b+1     index in KEYS of the key's first check's key
--   b+2..5  state before the check: s, c, p, e
--   b+6..9  state after it
--   b+10    1 if the check consumed hits
--   b+11    1 if it or an earlier check on its key consumed hits
--   b+12    1 if a later check has its key
local per = reserve and 6 or 3
local reply, X = {1}, {}
local admitted = true
local kk = 1
for i = 1, n do
  local alg, shadow, req, w, tick, burst, hits = sunpack(SPEC, spec, (i - 1) * CHECK + 1)
  local key = KEYS[kk]
  local b = (i - 1) * 12
  local k, s, c, p, e, any = kk, 0, 0, 0, 0, 0
  local j = i - 1
  while j > 0 and KEYS[X[(j - 1) * 12 + 1]] ~= key do
    j = j - 1
  end
  if j > 0 then
    local a = (j - 1) * 12
    k, s, c, p, e, any = X[a + 1], X[a + 6], X[a + 7], X[a + 8], X[a + 9], X[a + 11]
    X[a + 12] = 1
  elseif alg == SLIDING_LOG then
    s, c, p, e = loadlog(k, now - w)
  else
    local v = vals[k]
    if not v then
      -- A fresh key.
    elseif alg == FIXED_WINDOW then
      if #v == 16 then
        s, c = sunpack('<dd', v)
      end
    elseif #v == 24 then
      if alg == SLIDING_WINDOW then
        s, c, p = sunpack('<ddd', v)
      else
        s, c, e = sunpack('<ddd', v)
      end
    end
  end
  local over, rem, reset, s2, c2, p2, e2 = evaluate(alg, req, w, tick, burst, hits, k, s, c, p, e)
  local took = 0
  if over then
    s2, c2, p2, e2 = s, c, p, e
    if shadow == 0 then
      admitted = false
    end
  elseif hits > 0 then
    took, any = 1, 1
  end
  X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5] = k, s, c, p, e
  X[b + 6], X[b + 7], X[b + 8], X[b + 9] = s2, c2, p2, e2
  X[b + 10], X[b + 11], X[b + 12] = took, any, 0
  local r = 1 + (i - 1) * per
  reply[r + 1], reply[r + 2], reply[r + 3] = over and 1 or 0, rem, reset
  if reserve then
    reply[r + 4], reply[r + 5], reply[r + 6] = rem, reset, -1
  end
  if alg == SLIDING_LOG then
    kk = kk + 2
  else
    kk = kk + 1
  end
end

-- A rejected request consumes nothing, so the checks that would have
-- admitted it report their state without it.
if not admitted or reserve then
  for i = 1, n do
    local r = 1 + (i - 1) * per
    if reply[r + 1] == 0 then
      local alg, _, req, w, tick, burst = sunpack(SPEC, spec, (i - 1) * CHECK + 1)
      local b = (i - 1) * 12
      local _, rem, reset = evaluate(alg, req, w, tick, burst, 0, X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5])
      if reserve then
        reply[r + 4], reply[r + 5] = rem, reset
      end
      if not admitted then
        reply[r + 2], reply[r + 3] = rem, reset
      end
    end
  end
end

if not admitted then
  reply[1] = 0
  return reply
end

-- Write each key once, from the working copy of its last check, if any
-- of its checks consumed hits; a sliding log also gets one entry per
-- check that consumed.
for i = 1, n do
  local b = (i - 1) * 12
  if X[b + 11] == 1 then
    local alg, _, _, w, _, _, hits = sunpack(SPEC, spec, (i - 1) * CHECK + 1)
    local k = X[b + 1]
    local key = KEYS[k]
    local s, c, p, e = X[b + 6], X[b + 7], X[b + 8], X[b + 9]
    local receipt = s
    if alg == SLIDING_LOG then
      receipt = p
      if X[b + 10] == 1 then
        redis.call('ZADD', key, now, str(p) .. ':' .. str(hits))
      end
      if X[b + 12] == 0 then
        if logtrim[k] then
          redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
        end
        local top = max(logtop[k], now)
        local ms = ttl(top + w - now)
        redis.call('SET', KEYS[k + 1], spack('<ddd', c, p, top), 'PX', ms)
        redis.call('PEXPIRE', key, ms)
      end
    elseif X[b + 12] == 1 then
      -- A later check on the key writes it.
    elseif e <= now then
      -- A bucket back at full: the same as no state at all.
      redis.call('DEL', key)
      receipt = -1
    elseif alg == FIXED_WINDOW then
      redis.call('SET', key, spack('<dd', s, c), 'PX', ttl(e - now))
    elseif alg == SLIDING_WINDOW then
      redis.call('SET', key, spack('<ddd', s, c, p), 'PX', ttl(e - now))
    else
      redis.call('SET', key, spack('<ddd', s, c, e), 'PX', ttl(e - now))
    end
    if reserve and X[b + 10] == 1 then
      reply[(i - 1) * 6 + 7] = receipt
    end
  end
end
return reply
