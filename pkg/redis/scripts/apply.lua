-- apply.lua decides the rate-limit checks of one or more requests, each
-- request as one atomic unit, in order, as if each were a call of its
-- own made at the same microsecond. It mirrors limits.Limit.Evaluate line
-- by line, for all five algorithms, and the memory store's
-- all-or-nothing rule (memory.Store.Apply).
--
-- KEYS: the state keys of the checks, request after request, in check
--   order: one per check, and two for sliding_log (the log, then its
--   sidecar) and for concurrency (the slots, then a key that is the
--   slots' key, SLOT_INFIX and the request's hold: it names the
--   request's slot, and is never read nor written). All in one hash slot. A key may repeat: checks on one key
--   see each other's hits, and a request sees those of the admitted
--   requests before it.
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2]: the mode. MODE_APPLY ("0") to decide and write. MODE_RESERVE
--   ("1") to reserve (one slot group of a cross-slot request): also
--   return, per check, a refund receipt for refund.lua. MODE_REPORT ("2")
--   to report what the checks say of a request that is rejected
--   elsewhere: decide as for MODE_APPLY, write nothing, and return what a
--   rejected request returns. MODE_FAST ("3"): MODE_APPLY for a batch
--   that fast.lua did not decide whole (see there). (The prelude defines
--   the four, from Go.)
-- ARGV[3], ARGV[4], ...: one per request, its checks, one binary record
--   each (the prelude's SPEC). A record's extra, when above 0, asks for
--   up to that many hits more for a lease, if the request is admitted
--   (limits.Limit.Grant).
--   A calendar check (limits.Calendar, a fixed window) carries in its
--   window, tick and burst the edges of the windows around the
--   sidecar's clock (calendar.go's calendarFields); lib.lua's calwin
--   picks the one that holds now, so that the clock that decides also
--   names the window.
-- Or, for requests of several slots of one Cluster master, no KEYS, and
--   ARGV[3] the number of requests, then their records, then their keys
--   (see below).
--
-- Returns an array of integers: per request, one after the other,
-- admitted (0 or 1), then per check over
-- (0 or 1), remaining, reset µs; when reserving, each check also has its
-- receipt (-1 if it consumed nothing). If any check asked for a lease,
-- three integers per check follow: hits granted, µs they may be spent,
-- and the receipt under which refund.lua can take unused ones back (the
-- window start, or the bucket's tick, after the grant; 0 with no grant).
-- What the checks of a reserving call that admitted report if another
-- group rejects the request is not computed when reserving but after the
-- refund, by a call in MODE_REPORT (decide.go), so that the common case
-- costs nothing for it.
--
-- Why a script: every check must be read, decided and written with no
-- other request in between, on one clock shared by every sidecar, in one
-- round trip. Nothing of a request is written unless every enforced check
-- of it passes, and, if it has quota groups, not every one of them has a
-- check over (limits.Batch.QuotaOver): a quota_mode descriptor's verdict
-- depends on the others'. A shadow or quota check that is over consumes
-- nothing.
--
-- Why several requests in one call: what a call costs Redis beyond its
-- checks (EVALSHA, TIME, the reply) is paid once per batch instead of
-- once per request, and a key that several requests of the batch touch,
-- such as a global tier, is read once and written once. Writes wait for
-- the end of the batch, so a request never reads a key that the batch
-- wrote: it reads the working copy the last admitted request left.
--
-- Redis's cost is mostly per command the script calls, per value it
-- converts and per Lua object it allocates, so the script reads every key
-- with one MGET, writes each key once (SET with PX: value and expiry in
-- one command; or SETRANGE over a window the key already holds, which
-- keeps its expiry), takes its numbers in binary, and makes no table or
-- closure per check. Numbers it passes to redis.call are strings it
-- formats itself: Redis would format them with %.17g, which costs more.
--
-- State: one string per key, of little-endian doubles (struct.pack), all
-- integers below 2^53:
--   fixed_window    '<dd': window start µs, hits in it. TTL to the
--                   window's end.
--   sliding_window  '<ddd': window start, hits, previous window's hits.
--                   TTL two windows from the window's start.
--   token_bucket,   '<ddd': tick of the last update, level (free level,
--   leaky_bucket    or backlog, scaled by the window in ticks), µs when
--                   the key expires. The bucket is full again at a time
--                   that the tick and level give, and the key expires up
--                   to as long again (at most a minute) later, so that
--                   the writes of a busy bucket keep its expiry and
--                   overwrite the value in place.
--   sliding_log     zset of admitted requests, member "<seq>:<hits>",
--                   score µs; sidecar string '<ddd': the members' hits,
--                   the last seq, the greatest score. Both expire one
--                   window after the greatest score.
--   concurrency     zset of the requests in flight, member the hold,
--                   score the µs its slot expires; the key expires with
--                   its last slot.
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
--   concurrency     soonest slot's expiry µs, live slots, 0, latest
--                   slot's expiry µs (0: none)

-- now, keys, vals and qfrom come from fast.lua, before this in the
-- script: vals is set only when fast.lua has read them already.
local reserve = callMode == MODE_RESERVE
local dry = callMode == MODE_REPORT
local match, sub = string.match, string.sub
local sbyte = string.byte

-- The requests' ARGV, qfrom..qto, and their keys' values by index in keys.
-- On a Cluster, the requests of several slots that one master serves come
-- with no KEYS: a command may not span slots, but a script without flags
-- may use keys of any slot its node serves. ARGV[3] is then the number
-- of requests, their keys follow their checks, and each request's keys
-- (which share a slot) are read by an MGET of their own. A key of a slot
-- the node does not serve fails the call before anything is written:
-- every read comes before the first write.
local qto = #ARGV
local split = #keys == 0
if split and not vals then
  qto = 3 + tonumber(ARGV[3])
  qfrom = 4
  keys = {unpack(ARGV, qto + 1)}
end

-- released[i], dup[i] and soon[i]: see reservations below; nil
-- without any.
local released, dup, soon, full

-- Refunds (CHECK_REFUND records: Envoy's is_negative_hits) are given
-- back first, to the stored state, in order, whatever any request's
-- verdict (limits.Store): the requests of a call were in flight
-- together, so any order of them is one they could have had. Each
-- mirrors limits.Limit.Refund, and tells the sidecars' deny caches of
-- the key (PUBLISH on REFUNDS_CHANNEL, a constant of scripts.go). The
-- checks are then decided as usual, a refund as a check of zero hits
-- that rejects nothing. Reads here come before any read of the batch,
-- so the batch sees what the refunds left. Only a call marked REFUNDS
-- has any, so the others pay nothing for this.
if refunds then
  local match = string.match
  local function wipe(key)
    redis.call('DEL', key)
  end
  -- giveBack gives hits back to a window's or a bucket's key
  -- (limits.Limit.Refund).
  local function giveBack(alg, key, req, w, tick, burst, hits)
    local start
    if w < 0 then
      -- A calendar window (lib.lua's calwin), always a fixed window.
      start, w = calwin(now, w, tick, burst)
    else
      start = now - now % w
    end
    local v = redis.call('MGET', key)[1]
    if not v then
      -- Nothing counted: nothing to give back.
    elseif alg == FIXED_WINDOW then
      if #v == 16 then
        local s, c = sunpack('<dd', v)
        if s == start and c > hits then
          redis.call('SETRANGE', key, '0', spack('<dd', s, c - hits))
        elseif s == start then
          wipe(key)
        end
      end
    elseif alg == SLIDING_WINDOW then
      if #v == 24 then
        local s, c, p = sunpack('<ddd', v)
        local cur, prev = c, p
        if s == start - w then
          cur, prev = 0, c
        elseif s ~= start then
          cur, prev = 0, 0
        end
        local back = min(cur, hits)
        cur = cur - back
        prev = max(0, prev - (hits - back))
        if cur == 0 and prev == 0 then
          wipe(key)
        elseif s == start then
          redis.call('SETRANGE', key, '0', spack('<ddd', start, cur, prev))
        else
          redis.call('SET', key, spack('<ddd', start, cur, prev), 'PX', string.format('%d', ceil((start + 2 * w - now) / 1000)))
        end
      end
    elseif #v == 24 then
      -- A bucket: its backlog drained to now, less hits, down to
      -- none (full again).
      local wt = w / tick
      local t = (now - now % tick) / tick
      local cap = burst * wt
      local s, c, x = sunpack('<ddd', v)
      local backlog = backlogOf(alg, c, cap)
      if t > s then
        local elapsed = t - s
        if elapsed >= ceil(backlog / req) then
          backlog = 0
        else
          backlog = backlog - elapsed * req
        end
      end
      if x <= now or hits >= ceil(backlog / wt) then
        wipe(key)
      else
        backlog = backlog - hits * wt
        local level = backlog
        if alg == TOKEN_BUCKET or backlog > cap then
          level = cap - backlog
        end
        writeState(key, alg, t, level, 0, t * tick + ceil(backlog / req) * tick, x, now)
      end
    end
  end
  -- Reservations (limits.Check.Ledgered): a check marked RESERVING has
  -- three keys, its limit's, the ledger (its key and LEDGER_SUFFIX: a
  -- hash of the holds, each '<dd': hits held and µs it is released at,
  -- and at '' '<d': the soonest release, or earlier), and the ledger's
  -- key, ':' and the request's hold, empty if it names none, which is
  -- never read nor written. Reservations due are given back before
  -- anything else on the key (released[i] counts them for check i), a
  -- refund settles its hold's, and a reservation under a hold that
  -- holds one already takes nothing (dup[i]). soon[i] is the soonest
  -- release left.
  local swept = {}
  -- scan gives back every reservation of ledger that is due, and sets
  -- the soonest release left, or drops the ledger if none is left. It
  -- returns how many it gave back, and that soonest release.
  local function scan(alg, key, ledger, req, w, tick, burst)
    local all, n, left = redis.call('HGETALL', ledger), 0, nil
    for x = 1, #all, 2 do
      local f = all[x]
      if f ~= '' then
        local held, at = sunpack('<dd', all[x + 1])
        if at <= now then
          giveBack(alg, key, req, w, tick, burst, held)
          redis.call('HDEL', ledger, f)
          n = n + 1
        elseif not left or at < left then
          left = at
        end
      end
    end
    if left then
      redis.call('HSET', ledger, '', spack('<d', left))
    else
      redis.call('DEL', ledger)
    end
    if n > 0 then
      redis.pcall('PUBLISH', REFUNDS_CHANNEL, key)
    end
    return n, left
  end
  -- sweep is scan, when the soonest release has come.
  local function sweep(alg, key, ledger, req, w, tick, burst)
    local sv = redis.call('HGET', ledger, '')
    if not sv then
      return 0, nil
    end
    local soonest = sunpack('<d', sv)
    if soonest > now then
      return 0, soonest
    end
    return scan(alg, key, ledger, req, w, tick, burst)
  end
  local k, ci = 1, 0
  for q = qfrom, qto do
    local spec = ARGV[q]
    for i = 1, #spec / CHECK do
      local alg, mode, req, w, tick, burst, hits = sunpack(SPEC, spec, (i - 1) * CHECK + 1)
      local key = keys[k]
      ci = ci + 1
      if alg >= RESERVING then
        alg = alg - RESERVING
        local ledger = keys[k + 1]
        local hold = sub(keys[k + 2], #ledger + 2)
        local n, left = 0, nil
        if swept[ledger] ~= nil then
          left = swept[ledger] or nil
        else
          n, left = sweep(alg, key, ledger, req, w, tick, burst)
          swept[ledger] = left or false
          if n > 0 then
            released = released or {}
            released[ci] = n
          end
        end
        if mode == CHECK_REFUND and hold == '' then
          -- It names no reservation: given back as any refund.
          if hits > 0 and req > 0 then
            giveBack(alg, key, req, w, tick, burst, hits)
            redis.pcall('PUBLISH', REFUNDS_CHANNEL, key)
          end
        elseif mode == CHECK_REFUND then
          local v = redis.call('HGET', ledger, hold)
          if v then
            local held, at = sunpack('<dd', v)
            if hits > 0 and held > 0 then
              giveBack(alg, key, req, w, tick, burst, min(hits, held))
              redis.pcall('PUBLISH', REFUNDS_CHANNEL, key)
            end
            redis.call('HDEL', ledger, hold)
            if left and at <= left then
              -- It was the soonest: find the next (none is due: swept).
              local _
              _, left = scan(alg, key, ledger, req, w, tick, burst)
            end
            swept[ledger] = left or false
          end
        elseif hold ~= '' and hits > 0 and redis.call('HEXISTS', ledger, hold) == 1 then
          dup = dup or {}
          dup[ci] = true
        elseif hold ~= '' and hits > 0 and redis.call('HLEN', ledger) > MAX_RESERVATIONS then
          -- Full (one field is the soonest release): over until one goes.
          full = full or {}
          full[ci] = true
        end
        if left then
          soon = soon or {}
          soon[ci] = left
        end
        k = k + 3
      else
      if mode == CHECK_REFUND and (hits > 0 or alg == CONCURRENCY) and req > 0 then
        if alg == CONCURRENCY then
          -- The request's slot (limits.Limit.Vacate): its hold is the
          -- end of the second key. None, none freed.
          redis.call('ZREM', key, sub(keys[k + 1], #key + #SLOT_INFIX + 1))
        elseif alg == SLIDING_LOG then
          -- The newest live entries worth hits go; the one that
          -- straddles them is cut down, under its own seq.
          local key2, left, gone = keys[k + 1], hits, 0
          local lo, top = now - w, nil
          while left > 0 do
            local page = redis.call('ZRANGE', key, '+inf', '(' .. str(lo), 'BYSCORE', 'REV', 'LIMIT', 0, 32, 'WITHSCORES')
            if #page == 0 then
              break
            end
            for x = 1, #page, 2 do
              local m = page[x]
              local seq, h = match(m, '^(%d+):(%d+)$')
              h = tonumber(h)
              redis.call('ZREM', key, m)
              if h > left then
                redis.call('ZADD', key, page[x + 1], seq .. ':' .. str(h - left))
                gone, left = gone + left, 0
                break
              end
              gone, left = gone + h, left - h
              if left == 0 then
                break
              end
            end
          end
          local v = redis.call('MGET', key2)[1]
          if gone > 0 and v and #v == 24 then
            -- The sidecar's count loses what went, and its greatest
            -- score is the newest entry left's.
            local c, seq = sunpack('<ddd', v)
            local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
            top = tonumber(last[2] or '0')
            redis.call('SET', key2, spack('<ddd', max(0, c - gone), seq, top), 'PX', str(max(1, ceil((top + w - now) / 1000))))
          end
        else
          giveBack(alg, key, req, w, tick, burst, hits)
        end
        -- pcall: a user that may not publish (ACL channels) still
        -- decides; other sidecars' deny caches then learn of the refund
        -- only when what they remember of the key runs out.
        redis.pcall('PUBLISH', REFUNDS_CHANNEL, key)
      end
      if alg == SLIDING_LOG or alg == CONCURRENCY then
        k = k + 2
      else
        k = k + 1
      end
      end
    end
  end
end

if vals then
  -- Read by fast.lua.
elseif split then
  vals = {}
else
  vals = redis.call('MGET', unpack(keys))
end

-- Per sliding-log key index: whether the log holds entries to trim, and
-- its greatest score. Made on the first sliding log.
local logtrim, logtop

-- X holds per check i of the batch, from b = (i - 1) * XS:
--   b+1     index in keys where the state it starts from was read
--   b+2..5  state before the check: s, c, p, e
--   b+6..9  state after it
--   b+10    1 if the check consumed hits (0 once its request is
--           rejected), 2 if it is a usage charge that did (whatever
--           its request's verdict)
--   b+11    1 if it or an earlier check on its key consumed hits
--   b+12    its index in reply
--   b+13    for fixed and sliding windows, the window start stored
--           for the key; for buckets, the key's expiry µs (-1: no such
--           state): a write that needs no later expiry keeps the key's;
--           for sliding_log, the hits of the entry it merged into (0:
--           it added an entry of its own)
--   b+14    the check's algorithm
--   b+15,16 for sliding_log, the hits of the entry it writes and the
--           window µs; for concurrency, the index in keys of its own
--           keys (its hold ends the second) and the window µs
-- last[key] is the index of the last check on key of the admitted
-- requests so far: the state the next request starts from, and at the
-- end, the state written.
--
-- Lua 5.1 has no table.new, but a constructor ending in a call sizes the
-- array part once for all the values the call returns: X and reply start
-- with as many placeholders (bytes of the first request's checks, which
-- are longer) as the first request fills, up to a bound, so filling them
-- does not rehash them again and again. Every placeholder is overwritten
-- before it is read or returned.
-- Concurrency slots that the call's admitted requests renewed (see pend).
local renewed, pend
-- rel[i]: when check i's reservation is released, and its window µs,
-- if it reserves.
local rel
local per = reserve and 4 or 3
local XS = 16
local n1 = #ARGV[qfrom] / CHECK
local X = {sbyte(ARGV[qfrom], 1, min(XS * n1, 800))}
local reply = {1, sbyte(ARGV[qfrom], 1, min(per * n1, 300))}
local last = {}
-- G[3i-2], G[3i-1], G[3i]: check i of a request's granted hits, the µs
-- they may be spent and their receipt, for requests where a check asked
-- for a lease.
local G
-- Checks, keys and reply entries of the requests before this one.
local i0, kk, rb = 0, 1, 0

for q = qfrom, qto do
  local spec = ARGV[q]
  local n = #spec / CHECK
  local admitted, grants = true, false
  -- pend[key][hold]: the slots this request renews, made on the first;
  -- renewed[key][hold] once it is admitted. Both nil without any.
  pend = nil
  -- Quota groups (CHECK_QUOTA checks): qover[g] is set once a check of
  -- group g is over, qn counts such groups, and qg is how many groups
  -- the request has (every quota record carries it). The request is
  -- rejected when all qg are over.
  local qover, qn, qg = nil, 0, 0
  -- uses: pass 1 met a usage charge (CHECK_USAGE) that consumed hits,
  -- whether or not the request is admitted. A dry run writes nothing, so
  -- it has none.
  local uses = false
  if split then
    -- This request's keys: one per check, two per sliding log.
    local nk = n
    for i = 1, n do
      local alg = sbyte(spec, (i - 1) * CHECK + 1)
      if alg == SLIDING_LOG or alg == CONCURRENCY then
        nk = nk + 1
      elseif alg >= RESERVING then
        nk = nk + 2
      end
    end
    local got = redis.call('MGET', unpack(keys, kk, kk + nk - 1))
    for j = 1, nk do
      vals[kk + j - 1] = got[j]
    end
  end

  -- Pass 1 decides every check in order on working copies of the state,
  -- so checks on one key see each other's hits. A rejected request
  -- consumes nothing, so pass 2 (if the request is rejected) evaluates
  -- the checks that would have admitted it again, from the same state,
  -- for zero hits. Usage charges consume their hits all the same: in a
  -- rejected request that has one, pass 2 goes over every check in
  -- order from the state before the request, charging the usage checks
  -- and passing the others' state through, so that a usage check sees
  -- the earlier usage checks' hits on its key and no other's (as
  -- memory.settleRejected). Both passes share one copy of
  -- limits.Limit.Evaluate, inline: a function would be a closure made
  -- afresh on every run.
  for pass = 1, 2 do
    if dry or (qn > 0 and qn >= qg) then
      admitted = false
    end
    if pass == 2 and admitted then
      break
    end
    for ii = 1, n do
      local i = i0 + ii
      local b, r = (i - 1) * XS, rb + 1 + (ii - 1) * per
      -- Pass 2 evaluates only the checks that were not over, unless the
      -- request has a usage charge.
      if pass == 1 or uses or reply[r + 1] == 0 then
        local alg, mode, req, w, tick, burst, hits, extra, group, groups = sunpack(SPEC, spec, (ii - 1) * CHECK + 1)
        -- cs: a calendar window's start (lib.lua's calwin), w its
        -- length; nil for every other check, whose window starts at
        -- now - now % w. Only fixed windows have a calendar.
        local cs
        if w < 0 then
          cs, w = calwin(now, w, tick, burst)
          tick, burst = 1, 0
        end
        -- A reservation's record carries RESERVING in its algorithm, and
        -- its release time in place of a lease's extra.
        local resv = alg >= RESERVING
        local release = 0
        if resv then
          alg, release, extra = alg - RESERVING, extra, 0
          if dup and dup[i] then
            hits = 0
          end
        end
        if mode == CHECK_REFUND then
          -- Given back above: checked now for zero hits.
          hits = 0
        end
        -- mode >= CHECK_USAGE marks a usage charge (it is tested where it
        -- matters rather than decoded up front: every instruction here
        -- runs for every check).
        local k, s, c, p, e, any, stored = kk, 0, 0, 0, 0, 0, -1
        -- own: where this check's keys are; k becomes where the state it
        -- starts from was read (an earlier check's, on the same key).
        local own = k
        if pass == 2 then
          k, s, c, p, e = X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5]
          if uses then
            -- The state without the request's ordinary hits: pass 2's
            -- copy of the last earlier check on the key in this request,
            -- else the state before the request. A usage check charges
            -- it; any other check passes it on, and reports, as ever,
            -- from where it started.
            local ks, kc, kp, ke = s, c, p, e
            local key, j = keys[k], i - 1
            while j > i0 and keys[X[(j - 1) * XS + 1]] ~= key do
              j = j - 1
            end
            if j > i0 then
              local a = (j - 1) * XS
              ks, kc, kp, ke, any = X[a + 6], X[a + 7], X[a + 8], X[a + 9], X[a + 11]
            elseif last[key] then
              any = X[(last[key] - 1) * XS + 11]
            end
            X[b + 6], X[b + 7], X[b + 8], X[b + 9], X[b + 10], X[b + 11] = ks, kc, kp, ke, 0, any
            if mode >= CHECK_USAGE then
              s, c, p, e = ks, kc, kp, ke
            end
          end
          if mode < CHECK_USAGE then
            hits = 0
          end
        else
          if alg == SLIDING_LOG or alg == CONCURRENCY then
            kk = kk + 2
          elseif resv then
            kk = kk + 3
          else
            kk = kk + 1
          end
          -- The working copy of the last earlier check on the key: of this
          -- request, else of an admitted earlier request of the batch.
          local key, j = keys[k], i - 1
          while j > i0 and keys[X[(j - 1) * XS + 1]] ~= key do
            j = j - 1
          end
          if j == i0 then
            j = last[key] or 0
          end
          if j > 0 then
            local a = (j - 1) * XS
            k, s, c, p, e, any, stored = X[a + 1], X[a + 6], X[a + 7], X[a + 8], X[a + 9], X[a + 11], X[a + 13]
          elseif alg == SLIDING_LOG then
            local lo, v = now - w, vals[k + 1]
            local seq, top, trim = 0, 0, false
            local known = v and #v == 24
            if known then
              c, seq, top = sunpack('<ddd', v)
              if top <= lo then
                -- Every entry has left the window.
                c, trim = 0, true
              else
                -- Entries at or before lo have left the window; they stay
                -- stored until the next write trims them.
                for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', lo)) do
                  c = c - tonumber(match(m, ':(%d+)$'))
                  trim = true
                end
                -- A live entry holds a hit, so c <= 0 means a stale sidecar.
                known = c > 0
              end
            end
            if not known then
              -- The sidecar was lost, or is stale, or is an earlier version's
              -- hash: recount the log, and go on past every sequence number
              -- in it.
              local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
              c, top, trim = 0, 0, false
              for x = 1, #all, 2 do
                local m, at = all[x], tonumber(all[x + 1])
                seq = max(seq, tonumber(match(m, '^(%d+):')))
                top = max(top, at)
                if at <= lo then
                  trim = true
                else
                  c = c + tonumber(match(m, ':(%d+)$'))
                end
              end
            end
            if not logtrim then
              logtrim, logtop = {}, {}
            end
            logtrim[k], logtop[k] = trim, top
            p = seq
            if top > lo then
              e = top
            end
          elseif alg == CONCURRENCY then
            -- The live slots, scored by when they expire: c of them,
            -- the latest to expire at e.
            local key, from = keys[k], '(' .. str(now)
            c = redis.call('ZCOUNT', key, from, '+inf')
            if c > 0 then
              e = tonumber(redis.call('ZRANGE', key, '+inf', from, 'BYSCORE', 'REV', 'LIMIT', 0, 1, 'WITHSCORES')[2])
            end
          else
            local v = vals[k]
            if not v then
              -- A fresh key.
            elseif alg == FIXED_WINDOW then
              if #v == 16 then
                s, c = sunpack('<dd', v)
                stored = s
              end
            elseif #v == 24 then
              if alg == SLIDING_WINDOW then
                s, c, p = sunpack('<ddd', v)
                stored = s
              elseif req > 0 then
                -- e: when the bucket is full again.
                s, c, stored = sunpack('<ddd', v)
                e = s * tick + ceil(backlogOf(alg, c, burst * (w / tick)) / req) * tick
              end
            end
          end
        end

        -- limits.Limit.Evaluate: the verdict on state s, c, p, e for hits
        -- (over, rem, reset µs), and the state after consuming them (s2, c2,
        -- p2, e2).
        -- A check with extra > 0 asks for a lease (limits.Limit.Grant): if its
        -- hits fit, it takes up to extra more, at most half of what would
        -- remain, by evaluating once more with them added.
        --
        -- A usage check whose hits do not fit consumes them all the same
        -- (limits.Limit.EvaluateUsage): the state after them, past the
        -- limit, replaces s, c, p, e, and a second attempt evaluates it
        -- for zero hits, for the remaining and reset to report. owed is
        -- set then, and s0..e0 keep the state the check started from.
        local over, rem, reset, s2, c2, p2, e2
        -- (owed, merged and the rest are nil, not set, for an ordinary
        -- check: every instruction here runs for every check.)
        -- ob: a bucket's backlog, drained to now, when it is over.
        local granted, owed, merged, hits0, s0, c0, p0, e0, ob = 0
        for attempt = 1, 2 do
        over, rem, reset = false, 0, 0
        s2, c2, p2, e2 = s, c, p, e
        local probe = hits
        if hits == 0 then
          probe = 1
        end
        if req == 0 then
          over, reset = true, w - now % w
          if cs then
            reset = cs + w - now
          end
        elseif alg == SLIDING_WINDOW then
          -- In ticks, with the estimate scaled by the window length W,
          -- E = prev * (W - elapsed) + cur * W, never formed: a usage
          -- charge takes the counts far past the limit, so the room and
          -- the wait are found by comparing and dividing
          -- (limits.Limit.slideRoom and slideWait), with products of at
          -- most req * W.
          local start = now - now % w
          local cur, prev = c, p
          if s == start - w then
            cur, prev = 0, c
          elseif s ~= start then
            cur, prev = 0, 0
          end
          -- tick divides the window, and so start.
          local wt = w / tick
          local elapsed = (now - now % tick - start) / tick
          local age = wt - elapsed
          -- prev * age is exact below 2^53, and past it is past free
          -- (below 2^51) all the same, so the comparison is exact.
          local room = 0
          if cur < req then
            local free = (req - cur) * wt
            if prev * age <= free then
              room = floor((free - prev * age) / wt)
            end
          end
          if probe > room then
            local ticks
            if probe > req then
              ticks = 2 * wt - elapsed
            elseif cur + probe <= req then
              ticks = age - floor((req - cur - probe) * wt / prev)
            else
              ticks = age + wt - floor((req - probe) * wt / cur)
            end
            over, rem, reset = true, room, ticks * tick
          else
            cur = cur + hits
            rem = room - hits
            if cur > 0 then
              reset = start + 2 * w - now
            elseif prev > 0 then
              reset = start + w - now
            end
            s2, c2, p2, e2 = start, cur, prev, start + 2 * w
          end
        elseif alg == SLIDING_LOG then
          -- c hits in the window, p the last seq, e the newest entry (0: none).
          if c + probe > req then
            over, rem, reset = true, req - min(c, req), w
            if probe <= req then
              -- Wait until enough of the oldest hits have left the window:
              -- stored entries first, then this request's earlier checks'
              -- hits, which all leave after a whole window.
              -- When the newest entry is at now, a stored entry with its
              -- seq is one being moved there (a usage charge merging into
              -- it), and leaves last: it is not counted here.
              local need, freed, off = c + probe - req, 0, 0
              local from = '(' .. str(now - w)
              local moved = e == now and str(p) .. ':'
              repeat
                local page = redis.call('ZRANGEBYSCORE', keys[k], from, '+inf', 'WITHSCORES', 'LIMIT', off, 32)
                for x = 1, #page, 2 do
                  if not (moved and sub(page[x], 1, #moved) == moved) then
                    freed = freed + tonumber(match(page[x], ':(%d+)$'))
                  end
                  if freed >= need then
                    reset = tonumber(page[x + 1]) + w - now
                    break
                  end
                end
                off = off + 32
              until freed >= need or #page < 64
            end
          else
            if hits > 0 then
              -- s: the hits of the newest entry (seq p), once known.
              s2, c2, p2, e2 = hits, c + hits, p + 1, now
            end
            rem = req - c2
            if e2 > 0 then
              reset = e2 + w - now
            end
          end
        elseif alg == TOKEN_BUCKET or alg == LEAKY_BUCKET then
          -- In ticks, with levels scaled by the window length W in ticks: a
          -- bucket holds burst * W, a hit costs W and each tick drains (or
          -- refills) req. The token bucket stores the free level, the leaky
          -- bucket the backlog.
          -- tick divides the window.
          local wt = w / tick
          local t = (now - now % tick) / tick
          local cap = burst * wt
          local backlog = 0
          if e ~= 0 and e > now then
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
          if probe > burst or backlog + probe * wt > cap then
            ob = backlog
            local ticks = ceil(backlog / req)
            if probe <= burst then
              ticks = ceil((backlog + probe * wt - cap) / req)
            end
            over, rem, reset = true, floor((cap - min(backlog, cap)) / wt), ticks * tick
          else
            backlog = backlog + hits * wt
            local full = ceil(backlog / req) * tick
            rem, reset = floor((cap - backlog) / wt), full - now % tick
            if reset < 0 then
              reset = 0
            end
            if t * tick + full <= now then
              -- Full again already: the same as no state at all.
              s2, c2, p2, e2 = 0, 0, 0, 0
            else
              -- The level (lib.lua): backlog is within cap here.
              c2 = backlog
              if alg == TOKEN_BUCKET then
                c2 = cap - backlog
              end
              s2, p2, e2 = t, 0, t * tick + full
            end
          end
        elseif alg == CONCURRENCY then
          -- limits.Limit.Occupy: a request that holds a live slot keeps
          -- it (renewed if it has hits); another takes one while fewer
          -- than req are taken. Its hold is the end of its second key.
          if pass == 2 then
            own = X[b + 15]
          end
          local hold = sub(keys[own + 1], #keys[own] + #SLOT_INFIX + 1)
          local at = redis.call('ZSCORE', keys[k], hold)
          local held = at and tonumber(at) > now
          -- The receipt of a reservation (MODE_RESERVE): the slot's
          -- expiry before it, 0 for none, which refund.lua puts back.
          stored = 0
          if held then
            stored = tonumber(at)
          end
          if not held and c >= req then
            -- The soonest slot to expire: the first stored one that this
            -- call has not renewed (renewed ones, and the slots it took,
            -- expire a window from now).
            local soon, from, skip = now + w, '(' .. str(now), renewed and renewed[keys[k]]
            local page = redis.call('ZRANGE', keys[k], from, '+inf', 'BYSCORE', 'LIMIT', 0, c + 1, 'WITHSCORES')
            for x = 1, #page, 2 do
              local mine = pend and pend[keys[k]]
              if not (skip and skip[page[x]]) and not (mine and mine[page[x]]) then
                soon = tonumber(page[x + 1])
                break
              end
            end
            over, rem, reset = true, req - min(c, req), soon - now
          else
            if hits > 0 then
              if not held then
                c2 = c + 1
              elseif pass == 1 then
                -- Renewed: pending until the request is admitted.
                pend = pend or {}
                pend[keys[k]] = pend[keys[k]] or {}
                pend[keys[k]][hold] = true
              end
              e2 = now + w
            end
            rem = req - min(c2, req)
            if c2 > 0 then
              reset = e2 - now
            end
          end
        else -- FIXED_WINDOW
          local start = cs or now - now % w
          local cur = c
          if s ~= start then
            cur = 0
          end
          reset = start + w - now
          if cur + probe > req then
            over, rem = true, req - min(cur, req)
          else
            rem = req - cur - hits
            s2, c2, p2, e2 = start, cur + hits, 0, start + w
          end
        end
        if over and attempt == 1 and mode >= CHECK_USAGE and hits > 0 and req > 0 then
          -- limits.Limit.owe: the state with the hits consumed past the
          -- limit, every count stopping at MAXCOUNT.
          owed, hits0, hits = true, hits, 0
          s0, c0, p0, e0 = s, c, p, e
          if alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
            local start = now - now % w
            local cur, prev = c, 0
            if alg == SLIDING_WINDOW then
              prev = p
              if s == start - w then
                cur, prev = 0, c
              elseif s ~= start then
                cur, prev = 0, 0
              end
              e = start + 2 * w
            else
              start = cs or start
              if s ~= start then
                cur = 0
              end
              e = start + w
            end
            s, c, p = start, min(cur + hits0, MAXCOUNT), prev
          elseif alg == SLIDING_LOG then
            -- An entry of its own while the log has room; else added to
            -- the newest entry (seq p, at e), moved to now.
            local add = min(c + hits0, MAXCOUNT) - c
            merged = 0
            if c >= req and e > 0 then
              merged = s
              if merged == 0 then
                local pre = str(p) .. ':'
                for _, m in ipairs(redis.call('ZRANGEBYSCORE', keys[k], e, e)) do
                  if sub(m, 1, #pre) == pre then
                    merged = tonumber(sub(m, #pre + 1))
                  end
                end
              end
            end
            if merged > 0 then
              s = merged + add
            else
              s, p = add, p + 1
            end
            c, e = c + add, now
          else
            -- The bucket, drained to now (ob), was over.
            local wt = w / tick
            local t = (now - now % tick) / tick
            local backlog = min(ob + hits0 * wt, MAXCOUNT)
            -- The level (lib.lua): past cap, the debt negated.
            local cap = burst * wt
            c = backlog
            if alg == TOKEN_BUCKET or backlog > cap then
              c = cap - backlog
            end
            s, p, e = t, 0, t * tick + ceil(backlog / req) * tick
          end
        elseif attempt == 2 or pass == 2 or over or extra == 0 or req == 0 or alg == SLIDING_LOG then
          break
        else
        granted = min(extra, floor(rem / 2))
        if granted == 0 then
          break
        end
        hits = hits + granted
        end
        end
        if owed then
          over, hits = true, hits0
          s, c, p, e = s0, c0, p0, e0
        end
        if over and resv and soon and soon[i] and soon[i] - now < reset then
          -- A reservation released then may make room.
          reset = soon[i] - now
        end
        if resv and full and full[i] then
          over, rem, reset = true, 0, (soon and soon[i] or now) - now
        end
        if over and resv and dup and dup[i] then
          -- A retried reservation holds what it took: never over.
          over = false
        end
        if pass == 1 and extra > 0 then
          -- How long the granted hits may be spent: to the window's end, or
          -- for a bucket the time it takes to refill them.
          local gfor, receipt = 0, 0
          if granted > 0 then
            receipt = s2
            if cs then
              gfor = cs + w - now
            elseif alg == FIXED_WINDOW or alg == SLIDING_WINDOW then
              gfor = w - now % w
            else
              gfor = ceil(granted * (w / tick) / req) * tick
            end
          end
          if not grants then
            grants = true
            G = G or {}
            for x = 1, 3 * n do
              G[x] = 0
            end
          end
          G[3 * ii - 2], G[3 * ii - 1], G[3 * ii] = granted, gfor, receipt
        end

        if pass == 2 then
          if mode >= CHECK_USAGE and hits > 0 and req > 0 then
            reply[r + 1], reply[r + 2], reply[r + 3] = over and 1 or 0, rem, reset
            X[b + 6], X[b + 7], X[b + 8], X[b + 9] = s2, c2, p2, e2
            X[b + 10], X[b + 11] = 2, 1
            if alg == SLIDING_LOG then
              X[b + 15], X[b + 13] = s2, merged or 0
            end
          elseif reply[r + 1] == 0 then
            reply[r + 2], reply[r + 3] = rem, reset
          end
        else
          -- took: 1 if the check consumed hits, 2 if it is a usage charge,
          -- consumed whatever the verdict and never refunded.
          local took = 0
          if over then
            if owed then
              took, any, uses = 2, 1, not dry
            else
              s2, c2, p2, e2 = s, c, p, e
            end
            local m = mode
            if m >= CHECK_USAGE then
              m = m - CHECK_USAGE
            end
            if m == CHECK_ENFORCED then
              admitted = false
            elseif m == CHECK_QUOTA then
              qover = qover or {}
              if not qover[group] then
                qover[group], qn, qg = true, qn + 1, groups
              end
            end
          elseif hits > 0 then
            took, any = 1, 1
            if mode >= CHECK_USAGE then
              took, uses = 2, not dry
            end
          end
          X[b + 1], X[b + 2], X[b + 3], X[b + 4], X[b + 5] = k, s, c, p, e
          X[b + 6], X[b + 7], X[b + 8], X[b + 9] = s2, c2, p2, e2
          X[b + 10], X[b + 11], X[b + 12], X[b + 13], X[b + 14] = took, any, r, stored, alg
          if alg == SLIDING_LOG then
            X[b + 13], X[b + 15], X[b + 16] = merged or 0, s2, w
          elseif alg == CONCURRENCY then
            X[b + 15], X[b + 16] = own, w
          elseif resv then
            -- Its keys, and what it holds until when.
            X[b + 14], X[b + 15], X[b + 16] = alg + RESERVING, own, hits
            rel = rel or {}
            rel[i] = {now + release, w}
          end
          reply[r + 1], reply[r + 2], reply[r + 3] = over and 1 or 0, rem, reset
          if reserve then
            reply[r + 4] = -1
          end
        end
      end
    end
  end
  if admitted then
    reply[rb + 1] = 1
    for i = i0 + 1, i0 + n do
      last[keys[X[(i - 1) * XS + 1]]] = i
    end
    if pend then
      renewed = renewed or {}
      for key, holds in pairs(pend) do
        renewed[key] = renewed[key] or {}
        for hold in pairs(holds) do
          renewed[key][hold] = true
        end
      end
    end
  elseif uses then
    -- Pass 2 left what the usage charges consumed; the state of the
    -- other checks passed through, and is not theirs to write.
    reply[rb + 1] = 0
    for i = i0 + 1, i0 + n do
      if X[(i - 1) * XS + 10] ~= 0 then
        last[keys[X[(i - 1) * XS + 1]]] = i
      end
    end
  else
    reply[rb + 1] = 0
    for i = i0 + 1, i0 + n do
      X[(i - 1) * XS + 10] = 0
    end
  end
  rb = rb + 1 + per * n
  -- When a check asked for a lease, three integers per check follow:
  -- the hits granted beyond its own (0 unless admitted), for how many µs
  -- they may be spent, and their receipt.
  if grants then
    for x = 1, 3 * n do
      if admitted then
        reply[rb + x] = G[x]
      else
        reply[rb + x] = 0
      end
    end
    rb = rb + 3 * n
  end
  -- A call with refunds or reservations ends each request with how many
  -- reservations each check released.
  if refunds then
    for x = 1, n do
      reply[rb + x] = released and released[i0 + x] or 0
    end
    rb = rb + n
  end
  i0 = i0 + n
end

-- Write each key once, from the working copy of the last admitted check
-- on it, if any check of the admitted requests on it consumed hits; a
-- sliding log also gets one entry per admitted check that consumed. A
-- written state expires after now (e > now, top >= now), so its TTL in
-- whole ms, rounded up, is at least 1.
local fmt = string.format
for i = 1, i0 do
  local b = (i - 1) * XS
  if X[b + 11] == 1 then
    local alg = X[b + 14]
    if alg >= RESERVING then
      -- An admitted reservation: its hold holds its hits until its
      -- release. The ledger lives as long as its last reservation.
      alg = alg - RESERVING
      local own = X[b + 15]
      local ledger = keys[own + 1]
      local hold = sub(keys[own + 2], #ledger + 2)
      if X[b + 10] == 1 and hold ~= '' then
        local upto, w = rel[i][1], rel[i][2]
        redis.call('HSET', ledger, hold, spack("<dd", X[b + 16], upto))
        local sv = redis.call('HGET', ledger, '')
        if not sv or sunpack("<d", sv) > upto then
          redis.call('HSET', ledger, '', spack("<d", upto))
        end
        -- Kept two windows past the release (limits.Limit.ledgerState),
        -- so that whatever check comes next gives it back.
        local ms = ceil((upto + 2 * w - now) / 1000)
        if redis.call('PTTL', ledger) < ms then
          redis.call('PEXPIRE', ledger, fmt('%d', ms))
        end
      end
    end
    local k = X[b + 1]
    local key = keys[k]
    local s, c, p, e = X[b + 6], X[b + 7], X[b + 8], X[b + 9]
    local final = last[key] == i
    local receipt = s
    if alg == CONCURRENCY then
      receipt = X[b + 13]
      -- A slot taken or renewed expires a window from now; expired
      -- slots go as the key is written, and the key with its last.
      if X[b + 10] ~= 0 then
        redis.call('ZADD', key, str(now + X[b + 16]), sub(keys[X[b + 15] + 1], #key + #SLOT_INFIX + 1))
      end
      if final then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now))
        redis.call('PEXPIRE', key, fmt('%d', ceil((e - now) / 1000)))
      end
    elseif alg == SLIDING_LOG then
      local w = X[b + 16]
      receipt = p
      if X[b + 10] ~= 0 then
        if X[b + 13] > 0 then
          -- A usage charge merged into the newest entry: it moves to now.
          redis.call('ZREM', key, str(p) .. ':' .. str(X[b + 13]))
        end
        redis.call('ZADD', key, now, str(p) .. ':' .. str(X[b + 15]))
      end
      if final then
        if logtrim[k] then
          redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
        end
        local top = max(logtop[k], now)
        local ms = fmt('%d', ceil((top + w - now) / 1000))
        redis.call('SET', keys[k + 1], spack('<ddd', c, p, top), 'PX', ms)
        redis.call('PEXPIRE', key, ms)
      end
    elseif not final then
      -- A later check on the key writes it.
    elseif e <= now then
      -- A bucket back at full: the same as no state at all.
      if X[b + 13] ~= -1 then
        redis.call('DEL', key)
      end
      receipt = -1
    else
      writeState(key, alg, s, c, p, e, X[b + 13], now)
    end
    -- A usage charge (2) is never refunded: it has no receipt.
    if reserve and X[b + 10] == 1 then
      reply[X[b + 12] + 4] = receipt
    end
  end
end
return reply
