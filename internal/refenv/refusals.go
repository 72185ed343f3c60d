package refenv

import (
	"strconv"
	"strings"
)

// refRefusal is a setting of the reference that we do not honour. It is
// named in the start warning when active reports it in use; by default,
// when one of vars is set to a value other than the reference's default.
type refRefusal struct {
	vars   []string
	reason string
	active func(v *refValues) bool
}

// notBuilt starts the reason of a refusal of a feature that is on its way.
const notBuilt = "not built yet: "

// refRefusals are the settings we refuse.
var refRefusals = []refRefusal{
	{vars: []string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		reason: "reconnect waits double at each failure; a growth factor above 1 other than 2 is not honoured",
		active: func(v *refValues) bool {
			// A value that does not parse is reported by the mapping.
			s, ok := v.getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
			f, err := strconv.ParseFloat(s, 64)
			return ok && err == nil && f > 1 && f != 2
		}},
	{vars: []string{"PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"},
		reason: "metric names are fixed (docs/migration.md maps the reference's names to ours); durations are in seconds"},
	{vars: []string{"RUNTIME_IGNOREDOTFILES"}, reason: "dot files and dot directories are never read as rules (a ConfigMap's ..data would be read twice)",
		active: func(v *refValues) bool {
			return v.isSet("RUNTIME_IGNOREDOTFILES") && !v.boolean("RUNTIME_IGNOREDOTFILES")
		}},
	{vars: []string{"EXPIRATION_JITTER_MAX_SECONDS"}, reason: "keys expire exactly when their state is fresh again; no jitter is needed"},
	{vars: []string{"BACKEND_TYPE", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"},
		reason: "no memcached: the store is Redis, or without Redis each replica's own memory",
		active: func(v *refValues) bool {
			if strings.EqualFold(v.str("BACKEND_TYPE"), "memcache") {
				return true
			}
			return v.anySetNonDefault("MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
				"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION")
		}},
	{vars: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, reason: "a rejected request never consumes anything: counters never run past their limit",
		active: func(v *refValues) bool {
			return v.isSet("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") && !v.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
		}},
	{vars: []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM"},
		reason: "requests are pipelined with no window to wait out, to each Cluster master at once (see --redis-max-inflight)"},
	{vars: []string{"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
		"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND_TIMEOUT",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"},
		reason: "no second Redis for per-second limits: every limit uses one Redis"},
	{vars: []string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"},
		reason: "/healthcheck does not follow a Redis outage: while Redis is down, requests are answered by the failure mode, and /readyz reports domains whose failure mode is error (a refusal of the password, ACL or TLS does show, run as ratelimit)"},
	{vars: []string{"REDIS_POOL_ON_EMPTY_BEHAVIOR"}, reason: "a request waits for a pooled connection within --redis-timeout, as WAIT does",
		active: func(v *refValues) bool { return !strings.EqualFold(v.str("REDIS_POOL_ON_EMPTY_BEHAVIOR"), "WAIT") }},
	{vars: []string{"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME"},
		reason: "startup does not wait for Redis: requests are answered by the failure mode while it connects, with its own backoff"},
}
