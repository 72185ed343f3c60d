-- probe.lua writes one key, and deletes it, so that a probe fails wherever a
-- decision would: Redis refuses the write of a script when it is out of
-- memory (OOM, maxmemory with noeviction), a read-only replica
-- (READONLY), or a master short of replicas (NOREPLICAS,
-- min-replicas-to-write). A PING is answered in all three states.
--
-- It calls every command that apply.lua and refund.lua call, on its own
-- key, so that an ACL user that lacks one of them, which Redis refuses
-- only once a script calls it, fails the probe as it fails decisions.
-- TestProbeNeedsEveryScriptCommand keeps the list in step with theirs.
--
-- KEYS[1]: the probe key, in a hash slot that the probed node serves.
-- ARGV: none.
--
-- Returns 1.
--
-- Why a script: the decisions are scripts, so the probe goes the same
-- way: EVALSHA, the script cache and the permission to run scripts are
-- checked too.
local k = KEYS[1]
redis.call('TIME')
-- The write the probe is for comes first: once a script has written,
-- Redis lets it write on, out of memory or not.
redis.call('SET', k, '1', 'PX', 1000)
redis.call('SETRANGE', k, '0', '1')
redis.call('MGET', k)
redis.call('PEXPIRE', k, 1000)
-- A sliding log's commands, on the key as a sorted set, which they
-- leave empty, so deleted.
redis.call('DEL', k)
redis.call('ZADD', k, 0, 'p')
redis.call('ZSCORE', k, 'p')
redis.call('ZRANGE', k, 0, -1)
redis.call('ZRANGEBYSCORE', k, '-inf', '+inf')
redis.call('ZCOUNT', k, '-inf', '+inf')
redis.call('ZREMRANGEBYSCORE', k, '-inf', '-1')
redis.call('ZREM', k, 'p')
-- A ledger of reservations's, on the key as a hash, which they leave
-- empty, so deleted.
redis.call('HSET', k, 'p', '1')
redis.call('HGET', k, 'p')
redis.call('HEXISTS', k, 'p')
redis.call('HLEN', k)
redis.call('HGETALL', k)
redis.call('PTTL', k)
redis.call('HDEL', k, 'p')
return 1
