-- apply.lua decides every rate-limit check of one request as one atomic
-- unit. It mirrors limits.Limit.Evaluate line by line, for all five
-- algorithms, and limits.MemoryStore.Apply's all-or-nothing rule.
--
-- KEYS: the state keys of the checks, in check order: one per check, and
--   two for sliding_log (the log, then its sidecar hash). All in one hash
--   slot. A key may repeat: checks on one key see each other's hits.
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2]: "1" to reserve (one slot group of a cross-slot request): also
--   return, per check, its outcome should another group reject the
--   request, and a refund receipt for refund.lua.
-- ARGV[3...]: 7 per check: algorithm (int(limits.Algorithm), named by
--   the prelude's constants), requests, window µs, tick µs, burst, hits,
--   shadow (0 or 1).
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
-- State, all integers (Lua numbers are doubles, exact below 2^53, and
-- limits.Limit keeps every quantity below that):
--   fixed_window    hash s (window start µs), c (hits in it); TTL to the
--                   window's end.
--   sliding_window  hash s, c, p (previous window's hits); TTL two windows
--                   from the window's start.
--   sliding_log     zset of admitted requests, member "<seq>:<hits>",
--                   score µs; sidecar hash <key>":h" with h (sum of the
--                   members' hits) and n (last seq). TTL one window after
--                   the newest entry.
--   token_bucket,   hash s (tick of the last update), c (free level, or
--   leaky_bucket    backlog, scaled by the window in ticks), e (µs when
--                   the bucket is full again); TTL to e.

local function loghits(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local now = clock()
local reserve = ARGV[2] == '1'

-- load returns the stored state of a check's key(s).
local function load(l, key, key2)
  if l.alg == SLIDING_LOG then
    local lo = now - l.w
    -- Entries at or before lo have left the window; they stay stored
    -- until the next write trims them.
    local expired = 0
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', lo)) do
      expired = expired + loghits(m)
    end
    local newest
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) > lo then
      newest = tonumber(last[2])
    end
    local count = tonumber(redis.call('HGET', key2, 'h') or '0') - expired
    local seq
    if newest == nil then
      count = 0
    elseif count <= 0 then
      -- The sidecar hash was lost (evicted, say): recount the log and
      -- restart the sequence past its members.
      count, seq = 0, 0
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. str(lo), '+inf')) do
        count = count + loghits(m)
        seq = max(seq, tonumber(string.match(m, '^(%d+):')))
      end
    end
    return {key = key, lo = lo, count = count, newest = newest, pending = {}, trim = expired > 0, seq = seq}
  end
  local v = redis.call('HMGET', key, 's', 'c', 'p', 'e')
  return {s = tonumber(v[1] or '0'), c = tonumber(v[2] or '0'), p = tonumber(v[3] or '0'), e = tonumber(v[4] or '0')}
end

local function fixed(l, st, hits, probe)
  local w = l.w
  local start = idiv(now, w) * w
  if st.s ~= start then
    st = {s = start, c = 0, p = 0, e = 0}
  end
  local reset = start + w - now
  if st.c + probe > l.req then
    return true, l.req - min(st.c, l.req), reset, st
  end
  local n = {s = start, c = st.c + hits, p = 0, e = start + w}
  return false, l.req - n.c, reset, n
end

-- sliding works in ticks and scales the estimate by the window length W:
-- E = prev * (W - elapsed) + cur * W.
local function sliding(l, st, hits, probe)
  local w = l.w
  local start = idiv(now, w) * w
  if st.s == start then
    st = {s = st.s, c = st.c, p = st.p, e = 0}
  elseif st.s == start - w then
    st = {s = start, c = 0, p = st.c, e = 0}
  else
    st = {s = start, c = 0, p = 0, e = 0}
  end
  local wt = idiv(w, l.tick)
  local elapsed = idiv(now - start, l.tick)
  local est = st.p * (wt - elapsed) + st.c * wt
  local cap = l.req * wt
  -- probe > req can never fit; testing it first keeps probe * wt from
  -- growing past 2^53 (the outcome is the same as the formula's).
  if probe > l.req or est + probe * wt > cap then
    local ticks
    if probe > l.req then
      ticks = 2 * wt - elapsed
    else
      local need = est + probe * wt - cap
      if st.p > 0 and ceildiv(need, st.p) <= wt - elapsed then
        ticks = ceildiv(need, st.p)
      elseif st.c + probe <= l.req then
        ticks = wt - elapsed
      elseif st.c > 0 and ceildiv((st.c + probe - l.req) * wt, st.c) <= wt then
        ticks = wt - elapsed + ceildiv((st.c + probe - l.req) * wt, st.c)
      else
        ticks = 2 * wt - elapsed
      end
    end
    return true, idiv(cap - min(est, cap), wt), ticks * l.tick, st
  end
  local n = {s = start, c = st.c + hits, p = st.p, e = start + 2 * w}
  est = est + hits * wt
  local reset = 0
  if n.c > 0 then
    reset = start + 2 * w - now
  elseif n.p > 0 then
    reset = start + w - now
  end
  return false, idiv(cap - est, wt), reset, n
end

-- logwait returns how long until need hits have left the window of st,
-- oldest first: stored entries, then this batch's pending ones (at now).
local function logwait(l, st, need)
  local freed, off = 0, 0
  while true do
    local page = redis.call('ZRANGEBYSCORE', st.key, '(' .. str(st.lo), '+inf', 'WITHSCORES', 'LIMIT', off, 32)
    for i = 1, #page, 2 do
      freed = freed + loghits(page[i])
      if freed >= need then
        return tonumber(page[i + 1]) + l.w - now
      end
    end
    if #page < 64 then
      break
    end
    off = off + 32
  end
  for _, h in ipairs(st.pending) do
    freed = freed + h
    if freed >= need then
      return l.w
    end
  end
  return l.w
end

local function slidinglog(l, st, hits, probe)
  if st.count + probe > l.req then
    local reset = l.w
    if probe <= l.req then
      reset = logwait(l, st, st.count + probe - l.req)
    end
    return true, l.req - min(st.count, l.req), reset, st
  end
  local n = st
  if hits > 0 then
    local pending = {}
    for i, h in ipairs(st.pending) do
      pending[i] = h
    end
    pending[#pending + 1] = hits
    n = {key = st.key, lo = st.lo, count = st.count + hits, newest = now, pending = pending, trim = st.trim, seq = st.seq}
  end
  local reset = 0
  if n.newest then
    reset = n.newest + l.w - now
  end
  return false, l.req - st.count - hits, reset, n
end

-- bucket evaluates both buckets in ticks with levels scaled by the window
-- length W in ticks: a bucket holds burst * W, a hit costs W and each tick
-- drains (or refills) requests. The token bucket stores the free level,
-- the leaky bucket the backlog.
local function bucket(l, st, hits, probe)
  local wt = idiv(l.w, l.tick)
  local t = idiv(now, l.tick)
  local cap = l.burst * wt
  local rate = l.req
  local live = st.e ~= 0 and st.e > now
  local backlog = 0
  if live then
    if l.alg == TOKEN_BUCKET then
      backlog = cap - min(st.c, cap)
    else
      backlog = min(st.c, cap)
    end
    if t > st.s then
      local elapsed = t - st.s
      if elapsed >= ceildiv(backlog, rate) then
        backlog = 0
      else
        backlog = backlog - elapsed * rate
      end
    end
  end
  if probe > l.burst or backlog + probe * wt > cap then
    local ticks = ceildiv(backlog, rate)
    if probe <= l.burst then
      ticks = ceildiv(backlog + probe * wt - cap, rate)
    end
    return true, idiv(cap - backlog, wt), ticks * l.tick, st
  end
  backlog = backlog + hits * wt
  local full = ceildiv(backlog, rate) * l.tick
  local n = {s = t, c = backlog, p = 0, e = t * l.tick + full}
  if l.alg == TOKEN_BUCKET then
    n.c = cap - backlog
  end
  if n.e <= now then
    n = {s = 0, c = 0, p = 0, e = 0}
  end
  return false, idiv(cap - backlog, wt), max(0, full - (now - t * l.tick)), n
end

-- evaluate is limits.Limit.Evaluate: the verdict of one limit on state st
-- for hits, and the state after consuming them.
local function evaluate(l, st, hits)
  local probe = max(hits, 1)
  if l.req == 0 then
    local start = idiv(now, l.w) * l.w
    return true, 0, start + l.w - now, st
  end
  if l.alg == SLIDING_WINDOW then
    return sliding(l, st, hits, probe)
  elseif l.alg == SLIDING_LOG then
    return slidinglog(l, st, hits, probe)
  elseif l.alg == TOKEN_BUCKET or l.alg == LEAKY_BUCKET then
    return bucket(l, st, hits, probe)
  end
  return fixed(l, st, hits, probe)
end

-- Decide every check in order on working copies of the state, so checks
-- on one key see each other's hits.
local checks, work = {}, {}
local admitted = true
local k = 1
for i = 1, (#ARGV - 2) / 7 do
  local a = 2 + (i - 1) * 7
  -- A check is its limit too (alg, req, w, tick, burst). Every field is
  -- set here, so Lua sizes the table once.
  local c = {
    alg = tonumber(ARGV[a + 1]), req = tonumber(ARGV[a + 2]), w = tonumber(ARGV[a + 3]),
    tick = tonumber(ARGV[a + 4]), burst = tonumber(ARGV[a + 5]),
    hits = tonumber(ARGV[a + 6]), shadow = ARGV[a + 7] == '1', key = KEYS[k], key2 = false,
    start = false, next = false, over = false, rem = 0, reset = 0, altrem = 0, altreset = 0,
  }
  if c.alg == SLIDING_LOG then
    c.key2 = KEYS[k + 1]
    k = k + 2
  else
    k = k + 1
  end
  local st = work[c.key]
  if st == nil then
    st = load(c, c.key, c.key2)
  end
  local over, rem, reset, n = evaluate(c, st, c.hits)
  if over then
    n = st
    if not c.shadow then
      admitted = false
    end
  end
  c.start, c.next, c.over, c.rem, c.reset = st, n, over, rem, reset
  work[c.key] = n
  checks[i] = c
end

-- A rejected request consumes nothing, so the checks that would have
-- admitted it report their state without it.
if not admitted or reserve then
  for _, c in ipairs(checks) do
    c.altrem, c.altreset = c.rem, c.reset
    if not c.over then
      local _
      _, c.altrem, c.altreset = evaluate(c, c.start, 0)
    end
  end
end

local reply, repaired = {admitted and 1 or 0}, {}
for _, c in ipairs(checks) do
  local receipt = -1
  local rem, reset = c.rem, c.reset
  if not admitted then
    rem, reset = c.altrem, c.altreset
  elseif c.hits > 0 and not c.over then
    local l, n = c, c.next
    if l.alg == SLIDING_LOG then
      -- Trim and repair once per key: later checks on the key come
      -- from this one's working copy.
      if not repaired[c.key] then
        repaired[c.key] = true
        if n.trim then
          redis.call('ZREMRANGEBYSCORE', c.key, '-inf', n.lo)
        end
        if n.seq then
          redis.call('HSET', c.key2, 'n', n.seq)
        end
      end
      receipt = redis.call('HINCRBY', c.key2, 'n', 1)
      redis.call('ZADD', c.key, now, str(receipt) .. ':' .. str(c.hits))
      redis.call('HSET', c.key2, 'h', n.count)
      local last = redis.call('ZRANGE', c.key, -1, -1, 'WITHSCORES')
      local exp = ttl(max(now, tonumber(last[2])) + l.w - now)
      redis.call('PEXPIRE', c.key, exp)
      redis.call('PEXPIRE', c.key2, exp)
    elseif n.e <= now then
      -- A bucket back at full: the same as no state at all.
      redis.call('DEL', c.key)
    else
      if l.alg == SLIDING_WINDOW then
        redis.call('HSET', c.key, 's', n.s, 'c', n.c, 'p', n.p)
      elseif l.alg == FIXED_WINDOW then
        redis.call('HSET', c.key, 's', n.s, 'c', n.c)
      else
        redis.call('HSET', c.key, 's', n.s, 'c', n.c, 'e', n.e)
      end
      redis.call('PEXPIRE', c.key, ttl(n.e - now))
      receipt = n.s
    end
  end
  reply[#reply + 1] = c.over and 1 or 0
  reply[#reply + 1] = rem
  reply[#reply + 1] = reset
  if reserve then
    reply[#reply + 1] = c.altrem
    reply[#reply + 1] = c.altreset
    reply[#reply + 1] = receipt
  end
end
return reply
