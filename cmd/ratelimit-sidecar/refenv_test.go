package main

import (
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// parseEnv parses args for the program run as argv0 in the environment
// env.
func parseEnv(argv0 string, env map[string]string, args ...string) (*settings, error) {
	environ := make([]string, 0, len(env))
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	sort.Strings(environ)
	return parseFlagsAs(argv0, args, lookupIn(environ), environ, io.Discard)
}

func mustParseEnv(t *testing.T, argv0 string, env map[string]string, args ...string) *settings {
	t.Helper()
	c, err := parseEnv(argv0, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRefEnvMapping: each of the reference's variables that maps onto a
// flag sets it, with its meaning translated, when the program runs under
// its own name.
func TestRefEnvMapping(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
		got  func(c *settings) any
		want any
	}{
		{"HOST, PORT", map[string]string{"HOST": "::", "PORT": "9000"}, func(c *settings) any { return c.httpAddr }, "[::]:9000"},
		{"PORT alone", map[string]string{"PORT": "9000"}, func(c *settings) any { return c.httpAddr }, "0.0.0.0:9000"},
		{"GRPC_HOST, GRPC_PORT", map[string]string{"GRPC_HOST": "10.0.0.1", "GRPC_PORT": "9001"}, func(c *settings) any { return c.grpcAddr }, "10.0.0.1:9001"},
		{"GRPC_UDS", map[string]string{"GRPC_UDS": "/run/rl.sock"}, func(c *settings) any { return c.ref.grpcUDS }, "/run/rl.sock"},
		{"DEBUG_PORT", map[string]string{"DEBUG_PORT": "7000"}, func(c *settings) any { return c.ref.debugAddr }, "0.0.0.0:7000"},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h"}, func(c *settings) any { return c.bounds.maxConnAge }, time.Hour},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", map[string]string{"GRPC_MAX_CONNECTION_AGE_GRACE": "5m"}, func(c *settings) any { return c.ref.connGrace }, 5 * time.Minute},
		{"LOG_LEVEL DEBUG", map[string]string{"LOG_LEVEL": "DEBUG"}, func(c *settings) any { return c.logLevel }, "debug"},
		{"LOG_LEVEL trace", map[string]string{"LOG_LEVEL": "trace"}, func(c *settings) any { return c.logLevel }, "debug"},
		{"LOG_LEVEL Warning", map[string]string{"LOG_LEVEL": "Warning"}, func(c *settings) any { return c.logLevel }, "warn"},
		{"LOG_FORMAT json", map[string]string{"LOG_FORMAT": "JSON"}, func(c *settings) any { return c.logFormat }, "json"},
		{"LOG_FORMAT text", map[string]string{"LOG_FORMAT": "text"}, func(c *settings) any { return c.logFormat }, "console"},
		{"RUNTIME_* without watching the root", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false"},
			func(c *settings) any { return []string{c.rules.path, c.ref.watchLink} }, []string{"/data/ratelimit/config", ""}},
		{"RUNTIME_* watching the root", map[string]string{"RUNTIME_ROOT": "/srv/current/", "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "rules"},
			func(c *settings) any { return []string{c.rules.path, c.ref.watchLink} }, []string{"/srv/current/rl/rules", "/srv/current"}},
		{"MERGE_DOMAIN_CONFIG", map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, func(c *settings) any { return c.rules.config.MergeDomains }, true},
		{"USE_CALENDAR_MONTH_RATE_LIMIT", map[string]string{"USE_CALENDAR_MONTH_RATE_LIMIT": "true"}, func(c *settings) any { return c.rules.config.CalendarMonths }, true},
		{"REDIS_URL over TCP", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, func(c *settings) any { return c.store.redis.URL }, "redis://redis:6379"},
		{"REDIS_URL host:port, no socket type", map[string]string{"REDIS_URL": "redis:6379"}, func(c *settings) any { return c.store.redis.URL }, "redis://redis:6379"},
		{"REDIS_URL a socket", map[string]string{"REDIS_URL": "/var/run/redis.sock"}, func(c *settings) any { return c.store.redis.URL }, "unix:///var/run/redis.sock"},
		{"REDIS_URL a URL", map[string]string{"REDIS_URL": "redis://u:p@redis:6379/2"}, func(c *settings) any { return c.store.redis.URL }, "redis://u:p@redis:6379/2"},
		{"REDIS_TYPE sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379"},
			func(c *settings) any {
				return []string{c.store.redis.URL, c.store.redis.SentinelMaster, strings.Join(c.store.redis.SentinelAddrs, " ")}
			},
			[]string{"", "mymaster", "s1:26379 s2:26379"}},
		{"REDIS_TYPE CLUSTER", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001"},
			func(c *settings) any {
				return []string{c.store.redis.URL, strings.Join(c.store.redis.ClusterAddrs, " ")}
			}, []string{"", "a:7000 b:7001"}},
		{"REDIS_AUTH a password", map[string]string{"REDIS_URL": "r:1", "REDIS_AUTH": "s3cret"},
			func(c *settings) any { return []string{c.store.redis.Username, c.store.redis.Password} }, []string{"", "s3cret"}},
		{"REDIS_AUTH user:password", map[string]string{"REDIS_URL": "r:1", "REDIS_AUTH": "app:s3:cret"},
			func(c *settings) any { return []string{c.store.redis.Username, c.store.redis.Password} }, []string{"app", "s3:cret"}},
		{"REDIS_SENTINEL_AUTH", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "m,s:1", "REDIS_SENTINEL_AUTH": "su:sp"},
			func(c *settings) any { return []string{c.store.redis.SentinelUsername, c.store.redis.SentinelPassword} }, []string{"su", "sp"}},
		{"REDIS_TLS and its files", map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem",
			"REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			func(c *settings) any { return c.store.redis.TLS },
			redis.TLSOptions{Enabled: true, CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem", SkipHostnameVerification: true}},
		{"REDIS_TLS off leaves its files unused", map[string]string{"REDIS_URL": "r:1", "REDIS_TLS_CACERT": "/ca.pem"},
			func(c *settings) any { return c.store.redis.TLS }, redis.TLSOptions{}},
		{"GRPC_SERVER_USE_TLS and its files", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy.edge.svc"},
			func(c *settings) any { return []string{c.tls.cert, c.tls.key, c.tls.clientCA, c.tls.clientSAN} },
			[]string{"/certs/tls.crt", "/certs/tls.key", "/certs/ca.crt", "envoy.edge.svc"}},
		{"GRPC_SERVER_USE_TLS as Envoy Gateway sets it", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt"},
			func(c *settings) any { return []string{c.tls.cert, c.tls.key, c.tls.clientCA, c.tls.clientSAN} },
			[]string{"/certs/tls.crt", "/certs/tls.key", "", ""}},
		// The reference checks the SAN only on client certificates, which
		// it asks for only with a client CA.
		{"GRPC_CLIENT_TLS_SAN without a client CA", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_CLIENT_TLS_SAN": "envoy.edge.svc"},
			func(c *settings) any { return []string{c.tls.cert, c.tls.key, c.tls.clientCA, c.tls.clientSAN} },
			[]string{"/certs/tls.crt", "/certs/tls.key", "", ""}},
		{"GRPC_SERVER_USE_TLS off leaves its files unused", map[string]string{"GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt"},
			func(c *settings) any { return []string{c.tls.cert, c.tls.key, c.tls.clientCA, c.tls.clientSAN} },
			[]string{"", "", "", ""}},
		{"REDIS_POOL_SIZE", map[string]string{"REDIS_POOL_SIZE": "20"}, func(c *settings) any { return c.store.redis.PoolSize }, 20},
		{"REDIS_TIMEOUT", map[string]string{"REDIS_TIMEOUT": "50ms"}, func(c *settings) any { return c.store.redis.Timeout }, 50 * time.Millisecond},
		{"CACHE_KEY_PREFIX", map[string]string{"CACHE_KEY_PREFIX": "edge_"}, func(c *settings) any { return c.store.redis.KeyPrefix }, "edge_"},
		{"LOCAL_CACHE_SIZE_IN_BYTES", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, func(c *settings) any { return c.store.denyCacheEntries }, 1048576 / refenv.DenyEntryBytes},
		{"LOCAL_CACHE_SIZE_IN_BYTES 0", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "0"}, func(c *settings) any { return c.store.denyCacheEntries }, 0},
		{"NEAR_LIMIT_RATIO", map[string]string{"NEAR_LIMIT_RATIO": "0.5"}, func(c *settings) any { return c.nearLimitRatio }, 0.5},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, func(c *settings) any { return c.ref.shadowMode }, true},
		{"QUOTA_MODE", map[string]string{"QUOTA_MODE": "true"}, func(c *settings) any { return c.ref.quotaMode }, true},
		{"RESPONSE_DYNAMIC_METADATA", map[string]string{"RESPONSE_DYNAMIC_METADATA": "1"}, func(c *settings) any { return c.ref.dynamicMetadata }, true},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
			func(c *settings) any { return []any{c.responseHeaders, c.ref.names} }, []any{envoy.HeadersDraft03, envoy.HeaderNames{}}},
		{"LIMIT_*_HEADER", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"},
			func(c *settings) any { return []any{c.responseHeaders, c.ref.names} },
			[]any{envoy.HeadersDraft03, envoy.HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "X-Reset"}}},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"},
			func(c *settings) any { return c.ref.healthRequiresRules }, true},
		{"USE_PROMETHEUS", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/stats/prometheus"},
			func(c *settings) any { return []any{c.ref.metricsAddr, c.ref.metricsPath, c.ref.referenceMetrics} }, []any{":19001", "/stats/prometheus", true}},
		{"PROMETHEUS_* without USE_PROMETHEUS", map[string]string{"PROMETHEUS_ADDR": ":19001"},
			func(c *settings) any { return []any{c.ref.metricsAddr, c.ref.metricsPath, c.ref.referenceMetrics} }, []any{"", "/metrics", false}},
		{"TRACING_*", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "rl",
			"TRACING_SERVICE_NAMESPACE": "edge", "TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "0.25"},
			func(c *settings) any { return tracingView(c) }, []any{true, "grpc", "rl", "edge", "pod-1", 0.25}},
		{"TRACING_ENABLED alone: the reference's defaults", map[string]string{"TRACING_ENABLED": "true"},
			func(c *settings) any { return tracingView(c) }, []any{true, "http", "RateLimit", "", "", 1.0}},
		{"TRACING_SAMPLING_RATE above 1: every trace, as the reference", map[string]string{"TRACING_ENABLED": "1", "TRACING_SAMPLING_RATE": "5"},
			func(c *settings) any { return tracingView(c) }, []any{true, "http", "RateLimit", "", "", 1.0}},
		{"TRACING_SAMPLING_RATE below 0: none", map[string]string{"TRACING_ENABLED": "1", "TRACING_SAMPLING_RATE": "-1"},
			func(c *settings) any { return tracingView(c) }, []any{true, "http", "RateLimit", "", "", 0.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParseEnv(t, "ratelimit-sidecar", tt.give)
			if diff := cmp.Diff(tt.want, tt.got(c)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if len(c.env.Refused) > 0 {
				t.Errorf("refused: %q", c.env.Refused)
			}
		})
	}
}

// TestRefModeDefaults: run as ratelimit (the reference image's
// /bin/ratelimit) with nothing set, the reference's defaults apply to the
// deployment's settings; run under another name, ours stay.
func TestRefModeDefaults(t *testing.T) {
	type view struct {
		HTTP, GRPC, Debug, Config, Link, Redis string
		Pool, Deny, Descriptors, Entries       int
		Age, Grace, RedisTimeout               time.Duration
		Level, Prefix, Failure                 string
		GRPCConns                              int
		HealthRedis                            bool
	}
	see := func(c *settings) view {
		return view{c.httpAddr, c.grpcAddr, c.ref.debugAddr, c.rules.path, c.ref.watchLink, c.store.redis.URL,
			c.store.redis.PoolSize, c.store.denyCacheEntries, c.request.MaxDescriptors, c.request.MaxEntries, c.bounds.maxConnAge, c.ref.connGrace, c.store.redis.Timeout, c.logLevel, c.store.redis.KeyPrefix,
			c.store.failureMode.String(), c.bounds.grpcMaxConns, c.ref.healthRequiresRedisConfig}
	}
	ref := view{
		HTTP: "0.0.0.0:8080", GRPC: "0.0.0.0:8081", Debug: "0.0.0.0:6070",
		Config: "/srv/runtime_data/current/config", Link: "/srv/runtime_data/current",
		Redis: "unix:///var/run/nutcracker/ratelimit.sock", Pool: 10, Deny: 0, Age: 24 * time.Hour, Grace: time.Hour,
		// The reference fails a request it cannot decide, and bounds a
		// request by its size alone: Envoy Gateway's 128 rules fit.
		Failure: "error", Descriptors: 128, Entries: 160,
		// A central service, which every Envoy worker connects to; its
		// requests all fail while Redis refuses the configuration, and
		// health says so.
		GRPCConns: 256, HealthRedis: true,
		// Not the reference's: see refMappings.
		RedisTimeout: 15 * time.Millisecond, Level: "info", Prefix: "rls:",
	}
	ours := view{
		HTTP: "127.0.0.1:8080", GRPC: "127.0.0.1:8081", Config: "config/", Deny: 65536, Age: 30 * time.Minute, Failure: "local", GRPCConns: 64,
		Descriptors: 64, Entries: 32,
		RedisTimeout: 15 * time.Millisecond, Level: "info", Prefix: "rls:",
	}
	tests := []struct {
		argv0 string
		want  view
	}{
		{"/bin/ratelimit", ref},
		{"ratelimit", ref},
		{"/usr/local/bin/ratelimit-sidecar", ours},
		{"ratelimit-sidecar", ours},
		{"/bin/ratelimit-old", ours},
	}
	for _, tt := range tests {
		t.Run(tt.argv0, func(t *testing.T) {
			c := mustParseEnv(t, tt.argv0, nil)
			if diff := cmp.Diff(tt.want, see(c)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRefEnvPrecedence: a flag on the command line beats its RLS_
// variable, which beats the reference's variables, which beat the
// default (ours, or run as ratelimit the reference's); the start log says
// which.
func TestRefEnvPrecedence(t *testing.T) {
	tests := []struct {
		name     string
		argv0    string
		env      map[string]string
		args     []string
		want     string
		wantFrom string // "" for the command line or the default
	}{
		{"default", "ratelimit-sidecar", nil, nil, "127.0.0.1:8081", ""},
		{"reference's default", "ratelimit", nil, nil, "0.0.0.0:8081", "the defaults of GRPC_HOST, GRPC_PORT (run as ratelimit)"},
		{"reference's variable", "ratelimit-sidecar", map[string]string{"GRPC_PORT": "9001"}, nil, "0.0.0.0:9001", "GRPC_PORT"},
		{"RLS_ variable", "ratelimit", map[string]string{"GRPC_PORT": "9001", "RLS_GRPC_ADDR": "127.0.0.1:9002"}, nil, "127.0.0.1:9002", "RLS_GRPC_ADDR"},
		{"flag", "ratelimit", map[string]string{"GRPC_PORT": "9001", "RLS_GRPC_ADDR": "127.0.0.1:9002"}, []string{"--grpc-addr=127.0.0.1:9003"}, "127.0.0.1:9003", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParseEnv(t, tt.argv0, tt.env, tt.args...)
			if c.grpcAddr != tt.want || c.env.From["grpc-addr"] != tt.wantFrom {
				t.Errorf("grpc-addr %q from %q, want %q from %q", c.grpcAddr, c.env.From["grpc-addr"], tt.want, tt.wantFrom)
			}
		})
	}
}

// TestRefEnvRedisPrecedence: a Redis topology comes from one place: an
// RLS_ variable or flag for any topology keeps the reference's out
// altogether; and our password settings beat REDIS_AUTH.
func TestRefEnvRedisPrecedence(t *testing.T) {
	c := mustParseEnv(t, "ratelimit", map[string]string{"REDIS_URL": "r:6379", "RLS_REDIS_CLUSTER_ADDRS": "c1:7000,c2:7000"})
	if c.store.redis.URL != "" || len(c.store.redis.ClusterAddrs) != 2 {
		t.Errorf("RLS_REDIS_CLUSTER_ADDRS and REDIS_URL: url %q, cluster %q; want the cluster only", c.store.redis.URL, c.store.redis.ClusterAddrs)
	}
	c = mustParseEnv(t, "ratelimit", map[string]string{"REDIS_URL": "r:6379"}, "--redis-sentinel-master=m", "--redis-sentinel-addrs=s:1")
	if c.store.redis.URL != "" || c.store.redis.SentinelMaster != "m" {
		t.Errorf("Sentinel flags and REDIS_URL: url %q, master %q; want the sentinel only", c.store.redis.URL, c.store.redis.SentinelMaster)
	}

	// --config from elsewhere: RUNTIME_ROOT's link is not watched.
	c = mustParseEnv(t, "ratelimit", map[string]string{"RUNTIME_ROOT": "/srv/current", "RLS_CONFIG": "/rules"})
	if c.rules.path != "/rules" || c.ref.watchLink != "" {
		t.Errorf("RLS_CONFIG and RUNTIME_ROOT: config %q, watch-link %q; want /rules and none", c.rules.path, c.ref.watchLink)
	}

	c = mustParseEnv(t, "ratelimit-sidecar", map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "u:ref", "RLS_REDIS_PASSWORD": "ours"})
	if c.store.redis.Password != "ours" || c.store.redis.Username != "u" || c.env.PasswordFrom != "" {
		t.Errorf("RLS_REDIS_PASSWORD and REDIS_AUTH: user %q password %q from %q; want u, ours, not REDIS_AUTH", c.store.redis.Username, c.store.redis.Password, c.env.PasswordFrom)
	}
	file := filepath.Join(t.TempDir(), "pw")
	write(t, file, "fromfile\n")
	c = mustParseEnv(t, "ratelimit-sidecar", map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "ref"}, "--redis-password-file", file)
	if c.store.redis.Password != "fromfile" {
		t.Errorf("--redis-password-file and REDIS_AUTH: password %q, want the file's", c.store.redis.Password)
	}
	c = mustParseEnv(t, "ratelimit-sidecar", map[string]string{"REDIS_URL": "r:6379", "REDIS_AUTH": "ref"})
	if c.store.redis.Password != "ref" || c.env.PasswordFrom != "REDIS_AUTH" {
		t.Errorf("REDIS_AUTH alone: password %q from %q", c.store.redis.Password, c.env.PasswordFrom)
	}
}

// TestRefEnvInvalid: a value the reference could not parse, or that means
// nothing, is an error naming the variable; every one is reported.
func TestRefEnvInvalid(t *testing.T) {
	tests := []struct {
		give map[string]string
		want []string
	}{
		{map[string]string{"PORT": "http"}, []string{`PORT: want an integer, got "http"`}},
		{map[string]string{"GRPC_PORT": "70000"}, []string{"GRPC_PORT: want a port from 0 to 65535, got 70000"}},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "5"}, []string{`GRPC_MAX_CONNECTION_AGE: want a duration such as 10s or 1h30m, got "5"`}},
		{map[string]string{"SHADOW_MODE": "yes"}, []string{`SHADOW_MODE: want true or false, got "yes"`}},
		{map[string]string{"LOG_LEVEL": "loud"}, []string{`LOG_LEVEL: want trace, debug, info, warn, error, fatal or panic, got "loud"`}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TYPE": "ring"}, []string{`REDIS_TYPE: want SINGLE, SENTINEL or CLUSTER, got "ring"`}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_SOCKET_TYPE": "udp"}, []string{`REDIS_SOCKET_TYPE: want tcp or unix, got "udp"`}},
		{map[string]string{"REDIS_URL": "mymaster", "REDIS_TYPE": "SENTINEL"}, []string{`REDIS_URL: with REDIS_TYPE=SENTINEL, want <master name>,<sentinel host:port>,..., got "mymaster"`}},
		{map[string]string{"REDIS_URL": "a:1,b", "REDIS_TYPE": "cluster"}, []string{`REDIS_URL: want host:port addresses, got "b"`}},
		{map[string]string{"BACKEND_TYPE": "etcd"}, []string{`BACKEND_TYPE: want redis or memcache, got "etcd"`}},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, []string{`CONFIG_TYPE: want FILE or GRPC_XDS_SOTW, got "CONSUL"`}},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "thrift"}, []string{`TRACING_EXPORTER_PROTOCOL: want http or grpc, got "thrift"`}},
		{map[string]string{"TRACING_ENABLED": "on"}, []string{`TRACING_ENABLED: want true or false, got "on"`}},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "half"}, []string{`TRACING_SAMPLING_RATE: want a number, got "half"`}},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, []string{"LOCAL_CACHE_SIZE_IN_BYTES: want 0 or more bytes, got -1"}},
		{map[string]string{"PORT": "x", "GRPC_PORT": "y"}, []string{`PORT: want an integer, got "x"`, `GRPC_PORT: want an integer, got "y"`}},
		// Checked as our flags, with the variable named.
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, []string{"--near-limit-ratio: want a number above 0 and at most 1, got 2", "--near-limit-ratio is set from NEAR_LIMIT_RATIO"}},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, []string{`--metrics-path: want a path starting with /`, "--metrics-path is set from USE_PROMETHEUS, PROMETHEUS_PATH"}},
		{map[string]string{"LIMIT_RESET_HEADER": "Reset Time"}, []string{`--response-header-names: "Reset Time" is not a valid header name`, "--response-header-names is set from LIMIT_RESET_HEADER"}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, []string{"GRPC_SERVER_USE_TLS: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem"},
			[]string{"--grpc-tls-cert and --grpc-tls-key: set both or neither", "--grpc-tls-cert is set from GRPC_SERVER_USE_TLS"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c.pem"}, []string{"TLS client certificate and key must be set together", "--redis-url is set from REDIS_URL"}},
		// Values that parse but mean nothing (issue 25).
		{map[string]string{"NEAR_LIMIT_RATIO": "NaN"}, []string{"--near-limit-ratio: want a number above 0 and at most 1, got NaN", "--near-limit-ratio is set from NEAR_LIMIT_RATIO"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_POOL_SIZE": "100000000"},
			[]string{"--redis-pool-size: want 0 (go-redis's default) to 1000 connections per Redis node, got 100000000", "--redis-pool-size is set from REDIS_POOL_SIZE"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TIMEOUT": "1ns"}, []string{"--redis-timeout: want 1ms or more, got 1ns", "--redis-timeout is set from REDIS_TIMEOUT"}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "NaN"}, []string{`XDS_CLIENT_BACKOFF_RANDOM_FACTOR: want a finite number, got "NaN"`}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1ns"},
			[]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: want 10ms or more, got 1ns"}},
		// Our own variables are named as the reference's are.
		{map[string]string{"RLS_IDLE_TIMEOUT": "1ns"}, []string{"--idle-timeout: want 100ms or more, got 1ns", "--idle-timeout is set from RLS_IDLE_TIMEOUT"}},
		{map[string]string{"RLS_MEMORY_LIMIT": "1"}, []string{`--memory-limit: want 0 (none) or 16MiB or more, got "1"`, "--memory-limit is set from RLS_MEMORY_LIMIT"}},
		{map[string]string{"RLS_NEAR_LIMIT_RATIO": "NaN"}, []string{"--near-limit-ratio is set from RLS_NEAR_LIMIT_RATIO"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(slices.Sorted(maps.Keys(tt.give)), ","), func(t *testing.T) {
			_, err := parseEnv("ratelimit-sidecar", tt.give)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestRefEnvRefused: the reference's settings that are not honoured are
// named with their reason in one warning; the values we honour as they
// are, and names the reference never reads, are not.
func TestRefEnvRefused(t *testing.T) {
	env := map[string]string{
		"USE_STATSD": "true", "STATSD_HOST": "statsd", "REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "r2:6379",
		"TRACING_ENABLED": "true", "QUOTA_MODE": "true", "CONFIG_TYPE": "GRPC_XDS_SOTW",
		"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211", "EXPIRATION_JITTER_MAX_SECONDS": "60",
		"RUNTIME_IGNOREDOTFILES": "false", "PROMETHEUS_MAPPER_YAML": "/etc/m.yaml", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true",
		"REDIS_POOL_ON_EMPTY_BEHAVIOR": "ERROR", "REDIS_STARTUP_MAX_ELAPSED_TIME": "1m", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false",
		"REDIS_PIPELINE_WINDOW": "150us", "DISABLE_STATS": "true",
	}
	c := mustParseEnv(t, "ratelimit-sidecar", env)
	want := []string{
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
	if diff := cmp.Diff(want, c.env.Refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if c.store.redis.Configured() {
		t.Errorf("BACKEND_TYPE=memcache: Redis configured (%q)", c.store.redis.URL)
	}

	core, logs := observer.New(zapcore.InfoLevel)
	logEnv(zap.New(core), c)
	warns := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessage("envoyproxy/ratelimit settings not honoured").All()
	if len(warns) != 1 {
		t.Fatalf("%d warnings of settings not honoured, want 1: %v", len(warns), logs.All())
	}
	if got, _ := warns[0].ContextMap()["settings"].([]any); len(got) != len(want) {
		t.Errorf("the warning names %d settings, want %d: %v", len(got), len(want), got)
	}

	// Values that are what we do, or the defaults, are honoured silently.
	honoured := map[string]string{
		"USE_STATSD": "false", "RUNTIME_IGNOREDOTFILES": "true", "REDIS_POOL_ON_EMPTY_BEHAVIOR": "wait", "CONFIG_TYPE": "FILE",
		"BACKEND_TYPE": "redis", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "GRPC_SERVER_USE_TLS": "false",
		"EXPIRATION_JITTER_MAX_SECONDS": "300", "REDIS_PIPELINE_WINDOW": "0s", "STATSD_PORT": "8125",
		// Set by Envoy Gateway, never read by the reference.
		"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318",
	}
	for _, argv0 := range []string{"ratelimit-sidecar", "ratelimit"} {
		if c := mustParseEnv(t, argv0, honoured); len(c.env.Refused) != 0 {
			t.Errorf("run as %s, refused %q", argv0, c.env.Refused)
		}
	}
	// The reference sends statsd by default, over TCP to localhost:8125:
	// run as it, so do we; nothing is refused.
	c = mustParseEnv(t, "ratelimit", nil)
	if len(c.env.Refused) != 0 {
		t.Errorf("run as ratelimit with nothing set, refused %q", c.env.Refused)
	}
	if c.push.statsdAddr != "localhost:8125" || c.push.statsdProtocol != "tcp" || c.push.format != statsd.Statsd {
		t.Errorf("run as ratelimit with nothing set: --statsd-addr=%q --statsd-protocol=%s --statsd-format=%s, want localhost:8125, tcp, statsd",
			c.push.statsdAddr, c.push.statsdProtocol, c.push.statsdFormat)
	}
}

// TestEnvoyGatewayNamesChangeNothing: names that Envoy Gateway sets but
// the reference never reads do not change a setting.
func TestEnvoyGatewayNamesChangeNothing(t *testing.T) {
	base := map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "REDIS_URL": "r:6379", "USE_STATSD": "false"}
	with := maps.Clone(base)
	with["GRPC_SERVER_TLS_CA_CERT"] = "/certs/ca.crt"
	with["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://otel:4318"
	a := mustParseEnv(t, "ratelimit", base)
	b := mustParseEnv(t, "ratelimit", with)
	if diff := cmp.Diff(a.env, b.env); diff != "" {
		t.Errorf("settings differ (-without +with):\n%s", diff)
	}
}

// TestUnknownRLSVariables: an RLS_ variable that no setting reads is
// warned about once, with its name.
func TestUnknownRLSVariables(t *testing.T) {
	c := mustParseEnv(t, "ratelimit-sidecar", map[string]string{
		"RLS_GRPC_ADR": "127.0.0.1:1", "RLS_REDIS_PASSWORD": "x", "RLS_LOG_LEVEL": "debug", "RLS_CONFG": "/rules",
	})
	if want := []string{"RLS_CONFG", "RLS_GRPC_ADR"}; !cmp.Equal(c.env.UnknownRLS, want) {
		t.Errorf("unknown RLS_ variables %q, want %q", c.env.UnknownRLS, want)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	logEnv(zap.New(core), c)
	if n := logs.FilterMessageSnippet("RLS_ environment variables that no setting reads").Len(); n != 1 {
		t.Errorf("%d warnings, want 1: %v", n, logs.All())
	}
}

// TestLogEnvSources: the start log says where each setting from the
// environment came from, and never shows a password.
func TestLogEnvSources(t *testing.T) {
	c := mustParseEnv(t, "ratelimit", map[string]string{
		"GRPC_PORT": "9001", "REDIS_URL": "redis://app:urlpw@r:6379", "REDIS_AUTH": "app:authpw", "RLS_LOG_LEVEL": "debug",
	})
	var out strings.Builder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&out), zapcore.InfoLevel))
	logEnv(log, c)
	for _, want := range []string{
		`"msg":"run as ratelimit: envoyproxy/ratelimit's defaults apply to settings not set"`,
		`"grpc-addr":{"value":"0.0.0.0:9001","from":"GRPC_PORT"}`,
		`"http-addr":{"value":"0.0.0.0:8080","from":"the defaults of HOST, PORT (run as ratelimit)"}`,
		`"log-level":{"value":"debug","from":"RLS_LOG_LEVEL"}`,
		`"redis-url":{"value":"redis://app:xxxxx@r:6379","from":"REDIS_URL"}`,
		`"redis-username":{"value":"app","from":"REDIS_AUTH"}`,
		`"redis password":"from REDIS_AUTH"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, out.String())
		}
	}
	// A variable that sets what is our default anyway is named too; a
	// reference's default that is ours is not.
	c = mustParseEnv(t, "ratelimit", map[string]string{"HOST": "127.0.0.1"})
	if c.env.From["http-addr"] != "HOST" || c.env.From["merge-domains"] != "" {
		t.Errorf("http-addr from %q, merge-domains from %q; want HOST, and merge-domains not logged", c.env.From["http-addr"], c.env.From["merge-domains"])
	}
	for _, secret := range []string{"urlpw", "authpw"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("log shows a password:\n%s", out.String())
		}
	}
}

// tracingView is the tracing settings, in order.
func tracingView(c *settings) []any {
	t := c.tracing
	return []any{t.enabled, t.protocol, t.serviceName, t.serviceNamespace, t.serviceInstanceID, t.samplingRate}
}
