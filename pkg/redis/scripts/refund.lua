-- refund.lua gives back what apply.lua reserved for a request that another
-- slot group rejected, using the receipts apply.lua returned.
--
-- KEYS: the state keys of the refunded checks, as apply.lua took them: one
--   per check, two for sliding_log, three for a reservation (its
--   ledger and hold: apply.lua's). All in one hash slot.
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2]: the refunded checks, one binary record each: apply.lua's
--   (the prelude's SPEC; mode, extra and groups are not read: hits is what the
--   reservation took, granted hits included) followed by the receipt as a
--   little-endian double.
--
-- Returns the number of checks whose hits were (at least partly) given
-- back.
--
-- Why a script: each refund reads and rewrites state that concurrent
-- requests update, so it must run with none of them in between.
--
-- State is apply.lua's. Refunds never give back more than the reservation
-- still holds, so a refund can only leave a limit stricter than exact,
-- never looser:
--   fixed_window    decrement the window the hits went to, if current.
--   sliding_window  decrement that window's count, whether it is still the
--                   current window or has become the previous one.
--   sliding_log     remove exactly the entry the request added; a trimmed
--                   entry needs nothing.
--   concurrency     remove the request's slot (its hold), or give it back
--                   its expiry before the reservation, if it held one.
--   buckets         give back hits × W scaled units, less whatever the
--                   bucket drained (or refilled) between the reservation
--                   and the last update, since that drain may already
--                   have absorbed the hits. With no update in between the
--                   refund is exact.
-- Keys are read with MGET, which reads a key of another type as nil (no
-- refund) instead of failing.

local now = clock()

-- ttl converts µs to a PX argument: whole ms, rounded up, at least 1.
local function ttl(us)
  return max(1, ceil(us / 1000))
end
local spec = ARGV[2]
local RECORD = SPEC .. 'd'
local size = CHECK + 8

local refunded = 0
local k = 1
for i = 1, #spec / size do
  local alg, _, req, w, tick, burst, hits, _, _, _, receipt = sunpack(RECORD, spec, (i - 1) * size + 1)
  local key = KEYS[k]
  k = k + 1
  if alg >= RESERVING then
    -- A reservation: its hold no longer holds it, and its hits go back
    -- as any check's.
    alg = alg - RESERVING
    local ledger = KEYS[k]
    redis.call('HDEL', ledger, string.sub(KEYS[k + 1], #ledger + 2))
    k = k + 2
  end
  if alg == CONCURRENCY then
    -- The slot the request took (its hold ends the second key) goes, or,
    -- if the request held it already, gets its expiry back (the receipt).
    local hold = string.sub(KEYS[k], #key + #SLOT_INFIX + 1)
    k = k + 1
    if receipt > now then
      redis.call('ZADD', key, str(receipt), hold)
      refunded = refunded + 1
    else
      refunded = refunded + redis.call('ZREM', key, hold)
    end
  elseif alg == SLIDING_LOG then
    local key2 = KEYS[k]
    k = k + 1
    local member = str(receipt) .. ':' .. str(hits)
    local at = redis.call('ZSCORE', key, member)
    if at then
      redis.call('ZREM', key, member)
      refunded = refunded + 1
      local v = redis.call('MGET', key2)[1]
      if v and #v == 24 then
        local count, seq, top = sunpack('<ddd', v)
        if tonumber(at) >= top then
          -- The greatest score may have gone with the entry.
          local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
          top = tonumber(last[2] or '0')
        end
        redis.call('SET', key2, spack('<ddd', max(0, count - hits), seq, top), 'PX', ttl(top + w - now))
      end
    end
  else
    local v = redis.call('MGET', key)[1]
    if not v then
      -- Expired, or not this version's: nothing to give back.
    elseif alg == FIXED_WINDOW then
      if #v == 16 then
        local s, c = sunpack('<dd', v)
        if s == receipt then
          if w < 0 then
            -- A calendar window (calwin): the one the hits went to.
            local _, len = calwin(s, w, tick, burst)
            w = len
          end
          redis.call('SET', key, spack('<dd', s, max(0, c - hits)), 'PX', ttl(s + w - now))
          refunded = refunded + 1
        end
      end
    elseif #v ~= 24 then
      -- Not this version's.
    elseif alg == SLIDING_WINDOW then
      local s, c, p = sunpack('<ddd', v)
      if s == receipt then
        c = max(0, c - hits)
      elseif s == receipt + w then
        p = max(0, p - hits)
      end
      if s == receipt or s == receipt + w then
        redis.call('SET', key, spack('<ddd', s, c, p), 'PX', ttl(s + 2 * w - now))
        refunded = refunded + 1
      end
    else
      -- x: when the key expires, no earlier than the bucket is full again
      -- (apply.lua). A refund only brings that time nearer, so the key
      -- keeps its expiry.
      local s, c, x = sunpack('<ddd', v)
      local wt = floor(w / tick)
      local cap = burst * wt
      local back = hits * wt - max(0, s - receipt) * req
      -- Nothing to give back to a bucket that is full again already.
      if s * tick + ceil(backlogOf(alg, c, cap) / req) * tick > now and back > 0 then
        -- The level for the backlog less back (lib.lua).
        local b = max(backlogOf(alg, c, cap) - back, 0)
        c = b
        if alg == TOKEN_BUCKET or b > cap then
          c = cap - b
        end
        if s * tick + ceil(backlogOf(alg, c, cap) / req) * tick <= now then
          redis.call('DEL', key)
        else
          redis.call('SETRANGE', key, '0', spack('<ddd', s, c, x))
        end
        refunded = refunded + 1
      end
    end
  end
end
return refunded
