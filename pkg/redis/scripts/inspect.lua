-- inspect.lua reads one counter as it is stored, and the clock that
-- decides it, for the admin endpoint GET /debug/counters. It writes
-- nothing.
--
-- KEYS[1]: the counter's key: the string that every algorithm but the
--   sliding log keeps, or a sliding log's zset (whose sidecar key the
--   reader does not need: it recounts the members).
-- ARGV[1]: now in µs, or "" to read redis.call('TIME'). Only tests set it.
-- ARGV[2]: for a sliding log, its window in µs: only the entries still in
--   the window are returned. ARGV[3]: the most entries to return.
--
-- Returns {now µs, type, value}. type is TYPE's answer ('none' for a
-- missing key). value is the string for a string; for a zset, the members
-- in the window and their scores (ZRANGEBYSCORE WITHSCORES, oldest
-- first), or, if there are more than ARGV[3], their number alone; absent
-- for any other type.
--
-- Why a script: the value and the time come from one instant of the node
-- that holds the key, whose TIME is the clock apply.lua decides by.
local now = clock()
local key = KEYS[1]
local t = redis.call('TYPE', key)['ok']
if t == 'string' then
  return {now, t, redis.call('GET', key)}
elseif t == 'zset' then
  local from = '(' .. str(now - tonumber(ARGV[2]))
  local n = redis.call('ZCOUNT', key, from, '+inf')
  if n > tonumber(ARGV[3]) then
    return {now, t, n}
  end
  return {now, t, redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES')}
end
return {now, t}
