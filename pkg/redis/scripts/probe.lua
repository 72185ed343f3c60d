-- probe.lua writes one short-lived key, so that a probe fails wherever a
-- decision would: Redis refuses the write of a script when it is out of
-- memory (OOM, maxmemory with noeviction), a read-only replica
-- (READONLY), or a master short of replicas (NOREPLICAS,
-- min-replicas-to-write). A PING is answered in all three states.
--
-- KEYS[1]: the probe key, in a hash slot that the probed node serves.
-- ARGV: none.
--
-- Returns 1.
--
-- Why a script: the decisions are scripts, so the probe goes the same
-- way: EVALSHA, the script cache and the permission to run scripts are
-- checked too.
redis.call('SET', KEYS[1], '1', 'PX', 1000)
return 1
