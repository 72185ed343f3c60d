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
-- hits, so what fits for the sum fits for every prefix of it, which is
-- what deciding the requests one after the other would have found.
--
-- MODE_FAST: KEYS are the batch's distinct keys. ARGV[3] has one record
-- per key (FASTSPEC: algorithm, requests, window µs, tick µs, the hits of
-- every check of the batch on it); ARGV[4] gives, per check of the
-- batch in order, the index of its key in KEYS (a little-endian uint16,
-- from 0); ARGV[5], ... are the requests' records, as for MODE_APPLY.
-- Go sends it only for batches of enforced or shadow checks of fixed and
-- sliding windows, each with hits, no lease, quota or usage.
--
-- Returns, if every key fits: FAST_FITS, then per key the remaining
-- after the batch's hits and the reset µs; Go works out each check's
-- remaining from them (scripts.go's fastOutcomes). Otherwise nothing is
-- written here: keys and vals become apply.lua's, one per check, and
-- apply.lua decides the batch as in MODE_APPLY, in the same call.

local now = clock()
local keys, vals, qfrom = KEYS, nil, 3
if ARGV[2] == MODE_FAST then
  vals = redis.call('MGET', unpack(keys))
  local F, n = ARGV[3], #keys
  -- out: the reply. S: per key, from b = 6 * (d - 1), its algorithm,
  -- window, and the state to write (start, count, previous count), and
  -- the window start it holds already (-1: none). Flat, as apply.lua's X:
  -- no table per key.
  local out, S, fits = {FAST_FITS}, {}, true
  for d = 1, n do
    local alg, req, w, tick, hits = sunpack(FASTSPEC, F, (d - 1) * FASTREC + 1)
    local v, s, c, p, stored = vals[d], 0, 0, 0, -1
    local start = now - now % w
    if alg == FIXED_WINDOW then
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
      out[2 * d], out[2 * d + 1] = req - c - hits, start + w - now
      S[6 * d - 5], S[6 * d - 4], S[6 * d - 3], S[6 * d - 2], S[6 * d - 1], S[6 * d] = alg, w, start, c + hits, 0, stored
    else -- SLIDING_WINDOW, as apply.lua decides it
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
      out[2 * d], out[2 * d + 1] = room - hits, start + 2 * w - now
      S[6 * d - 5], S[6 * d - 4], S[6 * d - 3], S[6 * d - 2], S[6 * d - 1], S[6 * d] = alg, w, start, cur + hits, prev, stored
    end
  end
  if fits then
    -- Each key once, as apply.lua writes it: in place over the window
    -- it holds, else with the window's expiry.
    for d = 1, n do
      local b = 6 * (d - 1)
      local alg, w, start, c, p, stored = S[b + 1], S[b + 2], S[b + 3], S[b + 4], S[b + 5], S[b + 6]
      local v, e = nil, start + w
      if alg == FIXED_WINDOW then
        v = spack('<dd', start, c)
      else
        v = spack('<ddd', start, c, p)
        e = start + 2 * w
      end
      if stored == start then
        redis.call('SETRANGE', keys[d], '0', v)
      else
        redis.call('SET', keys[d], v, 'PX', string.format('%d', ceil((e - now) / 1000)))
      end
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
