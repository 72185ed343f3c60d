-- refund.lua gives back what apply.lua reserved for a request that another
-- slot group rejected, using the receipts apply.lua returned.
--
-- KEYS: the state keys of the refunded checks, as apply.lua took them: one
--   per check, two for sliding_log. All in one hash slot.
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2...]: 7 per check: algorithm (as in apply.lua), requests, window
--   µs, tick µs, burst, hits, receipt.
--
-- Returns the number of checks whose hits were (at least partly) given
-- back.
--
-- Why a script: each refund reads and rewrites state that concurrent
-- requests update, so it must run with none of them in between.
--
-- Refunds never give back more than the reservation still holds, so a
-- refund can only leave a limit stricter than exact, never looser:
--   fixed_window    decrement the window the hits went to, if current.
--   sliding_window  decrement that window's count, whether it is still the
--                   current window or has become the previous one.
--   sliding_log     remove exactly the entry the request added; a trimmed
--                   entry needs nothing.
--   buckets         give back hits × W scaled units, less whatever the
--                   bucket drained (or refilled) between the reservation
--                   and the last update, since that drain may already
--                   have absorbed the hits. With no update in between the
--                   refund is exact.

local now = clock()

local refunded = 0
local k = 1
for i = 1, (#ARGV - 1) / 7 do
  local a = 1 + (i - 1) * 7
  local alg, req, w = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local tick, burst = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local hits, receipt = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  local key = KEYS[k]
  k = k + 1
  if alg == SLIDING_LOG then
    local key2 = KEYS[k]
    k = k + 1
    if redis.call('ZREM', key, str(receipt) .. ':' .. str(hits)) == 1 then
      redis.call('HINCRBY', key2, 'h', -hits)
      refunded = refunded + 1
    end
  elseif alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
    local v = redis.call('HMGET', key, 's', 'c', 'p')
    local s = tonumber(v[1] or '0')
    if s == receipt then
      redis.call('HSET', key, 'c', max(0, tonumber(v[2] or '0') - hits))
      refunded = refunded + 1
    elseif alg == SLIDING_WINDOW and s == receipt + w then
      redis.call('HSET', key, 'p', max(0, tonumber(v[3] or '0') - hits))
      refunded = refunded + 1
    end
  else
    local v = redis.call('HMGET', key, 's', 'c', 'e')
    local s, c, e = tonumber(v[1] or '0'), tonumber(v[2] or '0'), tonumber(v[3] or '0')
    if e > now then
      local wt = idiv(w, tick)
      local cap = burst * wt
      local back = hits * wt - max(0, s - receipt) * req
      if back > 0 then
        local backlog
        if alg == TOKEN_BUCKET then
          c = min(c + back, cap)
          backlog = cap - c
        else
          c = max(c - back, 0)
          backlog = c
        end
        e = s * tick + ceildiv(backlog, req) * tick
        if e <= now then
          redis.call('DEL', key)
        else
          redis.call('HSET', key, 'c', c, 'e', e)
          redis.call('PEXPIRE', key, ttl(e - now))
        end
        refunded = refunded + 1
      end
    end
  end
end
return refunded
