package main

import (
	"flag"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
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

// TestRefEnvFlagsDefined: every flag the reference's variables may set
// is one of ours, and every setting without a flag is defined for them.
func TestRefEnvFlagsDefined(t *testing.T) {
	c := newSettings()
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	c.define(fs)
	for _, name := range refenv.Flags() {
		if fs.Lookup(name) == nil {
			t.Errorf("refenv maps onto --%s, which is not defined", name)
		}
	}
	flagless := defineFlagless(&c.rules.xds, &c.tracing)
	for _, name := range []string{refenv.XDSBackoffInitial, refenv.XDSBackoffMax, refenv.XDSBackoffJitter, refenv.XDSMaxMessageBytes,
		refenv.TracingServiceName, refenv.TracingServiceNamespace, refenv.TracingServiceInstanceID} {
		if flagless.Lookup(name) == nil || fs.Lookup(name) != nil {
			t.Errorf("%s: want a setting without a flag", name)
		}
	}
}

// TestRefEnvWiring: run as ratelimit, the environment (internal/refenv
// specifies its mapping) reaches the settings the components read: the
// flags, the settings without a flag, the Redis password, the parsed
// header names, the Redis topology, and the start report; the command
// line and a password file come first.
func TestRefEnvWiring(t *testing.T) {
	env := map[string]string{
		"GRPC_PORT": "9001", "REDIS_URL": "r:6379", "REDIS_AUTH": "app:pw", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"LIMIT_RESET_HEADER": "X-Reset", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1024", "TRACING_SERVICE_NAME": "rl", "QUOTA_MODE": "true",
		"SHADOW_MODE": "true", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "RLS_LOG_LEVEL": "debug", "RLS_GRPC_ADR": "x",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "30s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2",
	}
	c := mustParseEnv(t, "/bin/ratelimit", env)
	type view struct {
		GRPC, Redis, User, Password, Level, MetricsAddr, MetricsPath, Debug, Link, Service, Failure string
		Headers                                                                                     envoy.HeaderMode
		Names                                                                                       envoy.HeaderNames
		MaxMessage, GRPCConns                                                                       int
		Grace, BackoffInitial, BackoffMax                                                           time.Duration
		BackoffJitter                                                                               float64
		Quota, Shadow, RefMetrics, HealthRedis, URLInArgs                                           bool
	}
	got := view{c.addrs.grpc, c.store.redis.URL, c.store.redis.Username, c.store.redis.Password, c.log.level, c.addrs.metrics, c.metricsPath, c.addrs.debug,
		c.watchLink, c.tracing.ServiceName, c.engine.FailureMode.String(), c.responseHeaders, c.responseNames, c.rules.xds.MaxMessageBytes,
		c.bounds.GRPCMaxConns, c.connGrace, c.rules.xds.BackoffInitial, c.rules.xds.BackoffMax, c.rules.xds.BackoffJitter,
		c.engine.QuotaMode, c.shadowMode, c.refMetrics, c.health.RequireStoreConfig, c.store.urlInArgs}
	want := view{
		GRPC: "0.0.0.0:9001", Redis: "redis://r:6379", User: "app", Password: "pw", Level: "debug", MetricsAddr: ":19001", MetricsPath: "/metrics",
		Debug: "0.0.0.0:6070", Link: "/srv/runtime_data/current", Service: "rl", Failure: "error", Headers: envoy.HeadersDraft03,
		Names:      envoy.HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "X-Reset"},
		MaxMessage: 1024, GRPCConns: 256, Grace: time.Hour, BackoffInitial: 2 * time.Second, BackoffMax: 30 * time.Second,
		BackoffJitter: 0.5, Quota: true, Shadow: true, RefMetrics: true, HealthRedis: true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if !c.env.RefMode || c.env.From["grpc-addr"] != "GRPC_PORT" || c.env.PasswordFrom != "REDIS_AUTH" || !cmp.Equal(c.env.UnknownRLS, []string{"RLS_GRPC_ADR"}) {
		t.Errorf("report: %+v", c.env)
	}

	file := filepath.Join(t.TempDir(), "pw")
	write(t, file, "fromfile\n")
	c = mustParseEnv(t, "/bin/ratelimit", env, "--redis-password-file", file, "--redis-url=redis://other:6379", "--grpc-addr=:1")
	if c.store.redis.Password != "fromfile" || c.env.PasswordFrom != "" || c.store.redis.URL != "redis://other:6379" || !c.store.urlInArgs || c.addrs.grpc != ":1" {
		t.Errorf("with the command line: password %q from %q, --redis-url %q (in args %v), --grpc-addr %q",
			c.store.redis.Password, c.env.PasswordFrom, c.store.redis.URL, c.store.urlInArgs, c.addrs.grpc)
	}

	// REDIS_TYPE's topologies reach the Redis store's options (pkg/redis
	// opens them).
	c = mustParseEnv(t, "/bin/ratelimit", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "m,s1:26379,s2:26379"})
	if r := c.store.redis; r.URL != "" || r.SentinelMaster != "m" || !slices.Equal(r.SentinelAddrs, []string{"s1:26379", "s2:26379"}) || chooseBackend(c.store).name != "redis" {
		t.Errorf("REDIS_TYPE=SENTINEL: URL %q, master %q, sentinels %q", r.URL, r.SentinelMaster, r.SentinelAddrs)
	}
	c = mustParseEnv(t, "/bin/ratelimit", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"})
	if r := c.store.redis; r.URL != "" || !slices.Equal(r.ClusterAddrs, []string{"a:7000", "b:7001"}) || chooseBackend(c.store).name != "redis" {
		t.Errorf("REDIS_TYPE=cluster: URL %q, cluster %q", r.URL, r.ClusterAddrs)
	}
}

// TestRefEnvExplained: a value from the environment that our flags'
// checks refuse is an error naming the flag and where its value came
// from (refenv.Env.Explain, which refenv's TestExplain specifies; the
// checks are TestFlagsInvalid's and their components').
func TestRefEnvExplained(t *testing.T) {
	tests := []struct {
		give map[string]string
		want []string
	}{
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, []string{"--near-limit-ratio: want a number above 0 and at most 1, got 2", "--near-limit-ratio is set from NEAR_LIMIT_RATIO"}},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, []string{`--metrics-path: want a path starting with /`, "--metrics-path is set from USE_PROMETHEUS, PROMETHEUS_PATH"}},
		{map[string]string{"LIMIT_RESET_HEADER": "Reset Time"}, []string{`--response-header-names: "Reset Time" is not a valid header name`, "--response-header-names is set from LIMIT_RESET_HEADER"}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem"},
			[]string{"--grpc-tls-cert and --grpc-tls-key: set both or neither", "--grpc-tls-cert is set from GRPC_SERVER_USE_TLS"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c.pem"}, []string{"TLS client certificate and key must be set together", "--redis-url is set from REDIS_URL"}},
		{map[string]string{"REDIS_URL": "r:1", "REDIS_POOL_SIZE": "100000000"},
			[]string{"--redis-pool-size: want 0 (go-redis's default) to 1000 connections per Redis node, got 100000000", "--redis-pool-size is set from REDIS_POOL_SIZE"}},
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
