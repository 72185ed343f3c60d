package refenv_test

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRefused: the reference's settings that are not honoured are named
// with their reason, in the order of the refusals; the values we honour
// as they are, and names the reference never reads, are not.
func TestRefused(t *testing.T) {
	env := map[string]string{
		"USE_STATSD": "true", "STATSD_HOST": "statsd", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "r2:6379",
		"TRACING_ENABLED": "true", "QUOTA_MODE": "true", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211", "EXPIRATION_JITTER_MAX_SECONDS": "60",
		"RUNTIME_IGNOREDOTFILES": "false", "PROMETHEUS_MAPPER_YAML": "/etc/m.yaml", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true",
		"REDIS_POOL_ON_EMPTY_BEHAVIOR": "ERROR", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false",
		"REDIS_PIPELINE_WINDOW": "150us", "DISABLE_STATS": "true", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "1.5",
	}
	e, got := mustStart(t, false, env)
	want := []string{
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR: reconnect waits double at each failure; a growth factor above 1 other than 2 is not honoured",
		"PROMETHEUS_MAPPER_YAML: metric names are fixed (docs/migration.md maps the reference's names to ours); durations are in seconds",
		"RUNTIME_IGNOREDOTFILES: dot files and dot directories are never read as rules (a ConfigMap's ..data would be read twice)",
		"EXPIRATION_JITTER_MAX_SECONDS: keys expire exactly when their state is fresh again; no jitter is needed",
		"BACKEND_TYPE, MEMCACHE_HOST_PORT: no memcached: the store is Redis, or without Redis each replica's own memory",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a rejected request never consumes anything: counters never run past their limit",
		"REDIS_PIPELINE_WINDOW: requests are pipelined with no window to wait out, to each Cluster master at once (see --redis-max-inflight)",
		"REDIS_PERSECOND, REDIS_PERSECOND_URL: no second Redis for per-second limits: every limit uses one Redis",
		"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: /healthcheck does not follow a Redis outage: while Redis is down, requests are answered by the failure mode, and /readyz reports domains whose failure mode is error (a refusal of the password, ACL or TLS does show, run as ratelimit)",
		"REDIS_POOL_ON_EMPTY_BEHAVIOR: a request waits for a pooled connection within --redis-timeout, as WAIT does",
		"REDIS_STARTUP_MAX_ELAPSED_TIME: startup does not wait for Redis: requests are answered by the failure mode while it connects, with its own backoff",
	}
	if diff := cmp.Diff(want, e.Report(nil).Refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	// BACKEND_TYPE=memcache: no Redis; the memory store decides.
	for _, f := range []string{"redis-url", "redis-sentinel-master", "redis-cluster-addrs"} {
		if v, ok := got[f]; ok {
			t.Errorf("BACKEND_TYPE=memcache: --%s=%s", f, v)
		}
	}

	// Values that are what we do, or the defaults, are honoured silently.
	honoured := map[string]string{
		"USE_STATSD": "false", "RUNTIME_IGNOREDOTFILES": "true", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait", "CONFIG_TYPE": "FILE",
		"BACKEND_TYPE": "redis", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "GRPC_SERVER_USE_TLS": "false",
		"EXPIRATION_JITTER_MAX_SECONDS": "300", "REDIS_PIPELINE_WINDOW": "0s", "STATSD_PORT": "8125", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2",
		// Set by Envoy Gateway, never read by the reference.
		"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
	}
	for _, refMode := range []bool{false, true} {
		if e, _ := mustStart(t, refMode, honoured); len(e.Report(nil).Refused) != 0 {
			t.Errorf("run as the reference %v, refused %q", refMode, e.Report(nil).Refused)
		}
	}
}

// TestEnvoyGatewayNamesChangeNothing: names that Envoy Gateway sets but
// the reference never reads change no setting and no report.
func TestEnvoyGatewayNamesChangeNothing(t *testing.T) {
	base := map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_URL": "r:6379", "USE_STATSD": "false"}
	with := maps.Clone(base)
	with["GRPC_SERVER_TLS_CA_CERT"] = "/certs/ca.crt"
	with["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://otel:4318"
	a, setA := mustStart(t, true, base)
	b, setB := mustStart(t, true, with)
	if diff := cmp.Diff(setA, setB); diff != "" {
		t.Errorf("flags differ (-without +with):\n%s", diff)
	}
	if diff := cmp.Diff(a.Report(environ(base)), b.Report(environ(with))); diff != "" {
		t.Errorf("reports differ (-without +with):\n%s", diff)
	}
}

// TestReportUnknownRLS: the RLS_ variables that no setting reads are
// listed once, sorted, with the known name they are near; the passwords'
// variables are known.
func TestReportUnknownRLS(t *testing.T) {
	env := map[string]string{
		"RLS_GRPC_ADR": "127.0.0.1:1", "RLS_REDIS_PASSWORD": "x", "RLS_REDIS_SENTINEL_PASSWORD": "y", "RLS_LOG_LEVEL": "debug",
		"RLS_CONFG": "/rules", "RLS_ZZZ": "1",
	}
	e, _ := mustStart(t, false, env)
	r := e.Report(append(environ(env), "RLS_CONFG=again"))
	if want := []string{"RLS_CONFG", "RLS_GRPC_ADR", "RLS_ZZZ"}; !cmp.Equal(r.UnknownRLS, want) {
		t.Errorf("unknown RLS_ variables %q, want %q", r.UnknownRLS, want)
	}
	if want := []string{"RLS_CONFG: RLS_CONFIG", "RLS_GRPC_ADR: RLS_GRPC_ADDR"}; !cmp.Equal(r.RLSHints, want) {
		t.Errorf("hints %q, want %q", r.RLSHints, want)
	}
	if r := e.Report(nil); r.UnknownRLS != nil {
		t.Errorf("without the environment's list: unknown %q", r.UnknownRLS)
	}
}

// TestReportSources: the report says where each setting from the
// environment came from, with a URL's password redacted; a variable
// that sets what is our default anyway is named, a reference's default
// that is ours is not, and the command line's flags are not.
func TestReportSources(t *testing.T) {
	env := map[string]string{
		"GRPC_PORT": "9001", "REDIS_URL": "redis://app:urlpw@r:6379", "REDIS_AUTH": "app:authpw", "RLS_LOG_LEVEL": "debug",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1024", "HOST": "127.0.0.1", "RLS_SHADOW_MODE": "true",
	}
	e, _ := mustStart(t, true, env, "--shadow-mode=false")
	var pw, spw string
	e.Passwords(&pw, &spw, "", "")
	r := e.Report(environ(env))
	want := map[string][2]string{
		"grpc-addr":      {"0.0.0.0:9001", "GRPC_PORT"},
		"http-addr":      {"127.0.0.1:8080", "HOST"},
		"debug-addr":     {"0.0.0.0:6070", "the defaults of DEBUG_HOST, DEBUG_PORT (run as ratelimit)"},
		"log-level":      {"debug", "RLS_LOG_LEVEL"},
		"redis-url":      {"redis://app:xxxxx@r:6379", "REDIS_URL"},
		"redis-username": {"app", "REDIS_AUTH"},
		// A setting without a flag.
		"xds-max-message-bytes": {"1024", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"},
	}
	for name, w := range want {
		if r.Value[name] != w[0] || r.From[name] != w[1] {
			t.Errorf("%s: %q from %q, want %q from %q", name, r.Value[name], r.From[name], w[0], w[1])
		}
	}
	for _, name := range []string{"merge-domains", "shadow-mode", "tracing-service-name", "log-format"} {
		if from, ok := r.From[name]; ok {
			t.Errorf("%s in the report, from %q", name, from)
		}
	}
	if r.PasswordFrom != "REDIS_AUTH" || pw != "authpw" {
		t.Errorf("password %q from %q, want authpw from REDIS_AUTH", pw, r.PasswordFrom)
	}
	if !r.RefMode {
		t.Error("RefMode not set")
	}
	for _, v := range r.Value {
		if v == "redis://app:urlpw@r:6379" {
			t.Error("the report shows the URL's password")
		}
	}
}
