-- fast.lua comes before apply.lua in one script (scripts.go): it reads
-- the clock and, for a batch in MODE_FAST, decides every request at once
-- when every one of them fits. apply.lua goes on from the now, keys,
-- vals and qfrom it leaves.
--
-- Why: a batch of many requests usually touches a few keys many times (a
-- global tier in every request, a tenant's in many), and usually every
-- request is admitted. apply.lua then decides one check at a time, so a
-- key of 23 requests is decided 23 times; here it is decided once, for
-- the hits of the whole batch. If those fit, every request of the batch
-- is admitted: the checks of fixed and sliding windows are monotone in
-- hits, as are token and leaky buckets, so what fits for the sum fits
-- for every prefix of it, which is what deciding the requests one after
-- the other would have found.
--
-- MODE_FAST: KEYS are the batch's distinct keys. ARGV[3] has one record
-- per key (FASTSPEC: algorithm, requests, window µs, tick µs, burst, the
-- hits of every check of the batch on it); ARGV[4] gives, per check of
-- the batch in order, the index of its key in KEYS (a little-endian
-- uint16, from 0); ARGV[5], ... are the requests' records, as for
-- MODE_APPLY. Go sends it only for batches of enforced or shadow checks
-- with hits, of any algorithm but sliding_log, and no lease, quota or
-- usage.
--
-- Returns, if every key fits: FAST_FITS, then per key the remaining
-- after the batch's hits, the reset µs, and for a bucket its backlog
-- (0 for a window); Go works out each check's remaining and reset from
-- them (fast.go's fastOutcomes). Otherwise nothing is written here: keys
-- and vals become apply.lua's, one per check, and apply.lua decides the
-- batch as in MODE_APPLY, in the same call.

local now = clock()
local keys, vals, qfrom = KEYS, nil, 3
-- callMode is ARGV[2] without the REFUNDS mark that a call with refunds
-- (CHECK_REFUND records) carries: apply.lua gives them back first.
local callMode, refunds = ARGV[2], false
if #callMode > 1 and string.sub(callMode, -1) == REFUNDS then
  callMode, refunds = string.sub(callMode, 1, -2), true
end
if callMode == MODE_FAST then
  vals = redis.call('MGET', unpack(keys))
  local F, n = ARGV[3], #keys
  -- out: the reply. S: per key, from b = 6 * (d - 1), its algorithm, the
  -- state to write (apply.lua's s, c, p), what the key holds already
  -- (a window's start, a bucket's expiry; -1: nothing), and when the
  -- state ends (a window's expiry, the time a bucket is full again).
  -- Flat, as apply.lua's X: no table per key.
  local out, S, fits = {FAST_FITS}, {}, true
  for d = 1, n do
    local alg, req, w, tick, burst, hits = sunpack(FASTSPEC, F, (d - 1) * FASTREC + 1)
    local v, s, c, p, stored, e = vals[d], 0, 0, 0, -1, 0
    local rem, reset, backlog
    if req == 0 then
      -- Always over: apply.lua says so.
      fits = false
      break
    elseif alg == FIXED_WINDOW then
      local start = now - now % w
      if v and #v == 16 then
        s, c = sunpack('<dd', v)
        stored = s
      end
      if s ~= start then
        c = 0
      end
      if c + hits > req then
        fits = false
        break
      end
      rem, reset, backlog = req - c - hits, start + w - now, 0
      s, c, e = start, c + hits, start + w
    elseif alg == SLIDING_WINDOW then
      local start = now - now % w
      if v and #v == 24 then
        s, c, p = sunpack('<ddd', v)
        stored = s
      end
      local cur, prev = c, p
      if s == start - w then
        cur, prev = 0, c
      elseif s ~= start then
        cur, prev = 0, 0
      end
      local wt = w / tick
      local age = wt - (now - now % tick - start) / tick
      local room = 0
      if cur < req then
        local free = (req - cur) * wt
        if prev * age <= free then
          room = floor((free - prev * age) / wt)
        end
      end
      if hits > room then
        fits = false
        break
      end
      rem, reset, backlog = room - hits, start + 2 * w - now, 0
      s, c, p, e = start, cur + hits, prev, start + 2 * w
    else -- TOKEN_BUCKET, LEAKY_BUCKET, as apply.lua decides them
      local wt = w / tick
      local t = (now - now % tick) / tick
      local cap = burst * wt
      backlog = 0
      if v and #v == 24 then
        s, c, stored = sunpack('<ddd', v)
        e = s * tick + ceil(backlogOf(alg, c, cap) / req) * tick
        if e > now then
          backlog = backlogOf(alg, c, cap)
          if t > s then
            local elapsed = t - s
            if elapsed >= ceil(backlog / req) then
              backlog = 0
            else
              backlog = backlog - elapsed * req
            end
          end
        end
      end
      if hits > burst or backlog + hits * wt > cap then
        fits = false
        break
      end
      backlog = backlog + hits * wt
      -- With hits, the bucket is not full again before the next tick.
      local full = ceil(backlog / req) * tick
      rem, reset = floor((cap - backlog) / wt), full - now % tick
      c = backlog
      if alg == TOKEN_BUCKET then
        c = cap - backlog
      end
      s, p, e = t, 0, t * tick + full
    end
    out[3 * d - 1], out[3 * d], out[3 * d + 1] = rem, reset, backlog
    local b = 6 * (d - 1)
    S[b + 1], S[b + 2], S[b + 3], S[b + 4], S[b + 5], S[b + 6] = alg, s, c, p, stored, e
  end
  if fits then
    -- Each key once, as apply.lua writes it.
    for d = 1, n do
      local b = 6 * (d - 1)
      writeState(keys[d], S[b + 1], S[b + 2], S[b + 3], S[b + 4], S[b + 6], S[b + 5], now)
    end
    return out
  end
  -- Some key does not fit: apply.lua decides, from one key and value
  -- per check.
  local I, K, V = ARGV[4], {}, {}
  for i = 1, #I / 2 do
    local d = sunpack('<H', I, 2 * i - 1) + 1
    K[i], V[i] = keys[d], vals[d]
  end
  keys, vals, qfrom = K, V, 5
end
