package refenv

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRefVarsCoverSettings: every variable of the reference's settings is
// in refVars, and each is mapped, honoured or refused, and listed so in
// docs/migration.md. refSettingsNames is the list of names in the
// reference's src/settings/settings.go.
func TestRefVarsCoverSettings(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(refVars)), slices.Sorted(slices.Values(refSettingsNames)); !cmp.Equal(got, want) {
		t.Errorf("refVars differs from the reference's settings (-want +got):\n%s", cmp.Diff(want, got))
	}
	mapped, refused := map[string]bool{}, map[string]bool{}
	for _, m := range refMappings {
		for _, v := range m.vars {
			mapped[v] = true
		}
	}
	for _, r := range refRefusals {
		for _, v := range r.vars {
			refused[v] = true
		}
	}
	doc, err := os.ReadFile("../../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range refSettingsNames {
		if !mapped[name] && !refused[name] {
			t.Errorf("%s is neither mapped nor refused", name)
		}
		row := regexp.MustCompile("(?m)^\\| `" + name + "`.*$").Find(doc)
		if row == nil {
			t.Errorf("docs/migration.md has no row for %s", name)
			continue
		}
		switch {
		case mapped[name] && !strings.Contains(string(row), "mapped") && !strings.Contains(string(row), "honoured"):
			t.Errorf("docs/migration.md: %s is mapped, its row says neither mapped nor honoured: %s", name, row)
		case refused[name] && !strings.Contains(string(row), "refused"):
			t.Errorf("docs/migration.md: %s is refused (for some values), its row does not say so: %s", name, row)
		case refused[name] && strings.HasPrefix(refusalReason(name), notBuilt) && !strings.Contains(string(row), "not built yet"):
			t.Errorf("docs/migration.md: %s is not built yet, its row does not say so: %s", name, row)
		}
	}
}

func refusalReason(name string) string {
	for _, r := range refRefusals {
		if slices.Contains(r.vars, name) {
			return r.reason
		}
	}
	return ""
}

// refSettingsNames are the envconfig names of the reference's
// src/settings/settings.go, as of envoyproxy/ratelimit commit
// f2fb15770f7fd1c88ca6c3a1b58ee513917ace96 (2026-07-05, every name
// checked against it on 2 December 2026), and USE_CALENDAR_MONTH_RATE_LIMIT,
// which its PR #1206 (merged after that commit) adds.
var refSettingsNames = []string{
	"USE_CALENDAR_MONTH_RATE_LIMIT",
	"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS", "GRPC_HOST", "GRPC_PORT", "GRPC_MAX_CONNECTION_AGE",
	"GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
	"GRPC_CLIENT_TLS_SAN", "LOG_LEVEL", "LOG_FORMAT", "CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_GRPC_XDS_NODE_ID",
	"CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD",
	"STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR",
	"PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY",
	"RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT", "EXPIRATION_JITTER_MAX_SECONDS",
	"LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "CACHE_KEY_PREFIX", "BACKEND_TYPE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH",
	"REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_PERSECOND",
	"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
	"REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
	"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
	"REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME", "MEMCACHE_HOST_PORT",
	"MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT",
	"MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "SHADOW_MODE", "QUOTA_MODE",
	"RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG", "TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE",
}
