package refenv_test

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
)

// ours are the flags the reference's variables map onto, with the
// sidecar's defaults as their text: the flag set these tests apply an
// environment to, as strings, so that a value shows as the mapping gives
// it.
var ours = map[string]string{
	"allow-empty-rules": "false", "calendar-months": "false", "config": "config/", "config-type": "file", "debug-addr": "",
	"deny-cache-entries": "65536", "failure-mode": "local", "force-start-without-rules": "false",
	"grpc-addr": "127.0.0.1:8081", "grpc-max-connection-age": "30m0s", "grpc-max-connection-age-grace": "0s", "grpc-max-conns": "64",
	"grpc-tls-cert": "", "grpc-tls-client-ca": "", "grpc-tls-client-san": "", "grpc-tls-key": "", "grpc-uds": "",
	"health-requires-redis-config": "false", "health-requires-rules": "false", "http-addr": "127.0.0.1:8080",
	"log-format": "json", "log-level": "info", "max-descriptors": "64", "max-entries": "32", "merge-domains": "false",
	"metrics-addr": "", "metrics-path": "/metrics", "near-limit-ratio": "0.8", "quota-mode": "false",
	"redis-cluster-addrs": "", "redis-key-prefix": "rls:", "redis-pool-size": "0", "redis-sentinel-addrs": "",
	"redis-sentinel-master": "", "redis-sentinel-username": "", "redis-timeout": "15ms", "redis-tls": "false", "redis-tls-ca": "",
	"redis-tls-cert": "", "redis-tls-key": "", "redis-tls-skip-hostname-verification": "false", "redis-url": "", "redis-username": "",
	"reference-metrics": "false", "response-dynamic-metadata": "false",
	"response-header-names": "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset", "response-headers": "none", "shadow-mode": "false",
	"statsd-addr": "", "statsd-flush-interval": "10s", "statsd-format": "statsd", "statsd-mogrifiers": "", "statsd-protocol": "udp",
	"statsd-tags": "", "tracing": "false", "tracing-protocol": "", "tracing-sampling-rate": "1", "watch-link": "",
	"xds-headers": "", "xds-node-id": "default", "xds-node-metadata": "", "xds-server": "localhost:18000", "xds-tls": "false",
	"xds-tls-ca": "", "xds-tls-cert": "", "xds-tls-key": "", "xds-tls-server-name": "",
	// Not mapped onto: the flags of the tests of precedence and errors.
	"idle-timeout": "1m0s",
}

// flaglessDefaults are the settings without a flag, with the sidecar's
// defaults.
var flaglessDefaults = map[string]string{
	refenv.XDSBackoffInitial: "10s", refenv.XDSBackoffMax: "1m0s", refenv.XDSBackoffJitter: "0.5", refenv.XDSMaxMessageBytes: "0",
	refenv.TracingServiceName: "", refenv.TracingServiceNamespace: "", refenv.TracingServiceInstanceID: "",
}

// newFlags returns a flag set of ours, and one of the settings without a
// flag, all strings.
func newFlags() (fs, flagless *flag.FlagSet) {
	fs = flag.NewFlagSet("", flag.ContinueOnError)
	for name, def := range ours {
		fs.String(name, def, "")
	}
	flagless = flag.NewFlagSet("", flag.ContinueOnError)
	for name, def := range flaglessDefaults {
		flagless.String(name, def, "")
	}
	return fs, flagless
}

// start loads env onto a flag set of ours whose command line is args,
// run as the reference (refMode) or not.
func start(t *testing.T, refMode bool, env map[string]string, args ...string) (*refenv.Env, *flag.FlagSet, *flag.FlagSet, error) {
	t.Helper()
	fs, flagless := newFlags()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	e, err := refenv.Load(fs, flagless, refMode, lookup(env))
	return e, fs, flagless, err
}

func mustStart(t *testing.T, refMode bool, env map[string]string, args ...string) (*refenv.Env, map[string]string) {
	t.Helper()
	e, fs, flagless, err := start(t, refMode, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return e, changed(fs, flagless)
}

// changed is every flag of the flag sets whose value is not its default.
func changed(sets ...*flag.FlagSet) map[string]string {
	out := map[string]string{}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if v := f.Value.String(); v != f.DefValue {
				out[f.Name] = v
			}
		})
	}
	return out
}

// environ lists env as NAME=value.
func environ(env map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// TestFlagsAreOurs: the flags these tests define are those the mappings
// set (Flags), so that no mapping sets a flag they leave out.
func TestFlagsAreOurs(t *testing.T) {
	got := refenv.Flags()
	want := slices.DeleteFunc(slices.Sorted(maps.Keys(ours)), func(f string) bool { return f == "idle-timeout" })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Flags() (-ours +got):\n%s", diff)
	}
}

// TestMapping: each of the reference's variables that maps onto a flag
// sets exactly the flags it maps onto, with its meaning translated, when
// the program runs under its own name; none of them is refused.
func TestMapping(t *testing.T) {
	tlsFiles := map[string]string{"GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		give map[string]string
		want map[string]string
	}{
		{"HOST, PORT", map[string]string{"HOST": "::", "PORT": "9000"}, map[string]string{"http-addr": "[::]:9000"}},
		{"PORT alone", map[string]string{"PORT": "9000"}, map[string]string{"http-addr": "0.0.0.0:9000"}},
		{"GRPC_HOST, GRPC_PORT", map[string]string{"GRPC_HOST": "10.0.0.1", "GRPC_PORT": "9001"}, map[string]string{"grpc-addr": "10.0.0.1:9001"}},
		{"GRPC_UDS", map[string]string{"GRPC_UDS": "/run/rl.sock"}, map[string]string{"grpc-uds": "/run/rl.sock"}},
		{"DEBUG_PORT", map[string]string{"DEBUG_PORT": "7000"}, map[string]string{"debug-addr": "0.0.0.0:7000"}},
		{"GRPC_MAX_CONNECTION_AGE", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h"}, map[string]string{"grpc-max-connection-age": "1h0m0s"}},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", map[string]string{"GRPC_MAX_CONNECTION_AGE_GRACE": "5m"}, map[string]string{"grpc-max-connection-age-grace": "5m0s"}},
		{"LOG_LEVEL DEBUG", map[string]string{"LOG_LEVEL": "DEBUG"}, map[string]string{"log-level": "debug"}},
		{"LOG_LEVEL trace", map[string]string{"LOG_LEVEL": "trace"}, map[string]string{"log-level": "debug"}},
		{"LOG_LEVEL Warning", map[string]string{"LOG_LEVEL": "Warning"}, map[string]string{"log-level": "warn"}},
		{"LOG_LEVEL panic", map[string]string{"LOG_LEVEL": "panic"}, map[string]string{"log-level": "panic"}},
		{"LOG_FORMAT json", map[string]string{"LOG_FORMAT": "JSON"}, map[string]string{}},
		{"LOG_FORMAT text", map[string]string{"LOG_FORMAT": "text"}, map[string]string{"log-format": "console"}},
		{"RUNTIME_* without watching the root", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false"},
			map[string]string{"config": "/data/ratelimit/config"}},
		{"RUNTIME_* watching the root", map[string]string{"RUNTIME_ROOT": "/srv/current/", "RUNTIME_SUBDIRECTORY": "rl", "RUNTIME_APPDIRECTORY": "rules"},
			map[string]string{"config": "/srv/current/rl/rules", "watch-link": "/srv/current"}},
		{"MERGE_DOMAIN_CONFIG", map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, map[string]string{"merge-domains": "true"}},
		{"USE_CALENDAR_MONTH_RATE_LIMIT", map[string]string{"USE_CALENDAR_MONTH_RATE_LIMIT": "true"}, map[string]string{"calendar-months": "true"}},
		{"REDIS_URL over TCP", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, map[string]string{"redis-url": "redis://redis:6379"}},
		{"REDIS_URL host:port, no socket type", map[string]string{"REDIS_URL": "redis:6379"}, map[string]string{"redis-url": "redis://redis:6379"}},
		{"REDIS_URL a socket", map[string]string{"REDIS_URL": "/var/run/redis.sock"}, map[string]string{"redis-url": "unix:///var/run/redis.sock"}},
		{"REDIS_URL a URL", map[string]string{"REDIS_URL": "redis://u:p@redis:6379/2"}, map[string]string{"redis-url": "redis://u:p@redis:6379/2"}},
		{"REDIS_TYPE sentinel", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster, s1:26379,s2:26379"},
			map[string]string{"redis-sentinel-master": "mymaster", "redis-sentinel-addrs": "s1:26379,s2:26379"}},
		{"REDIS_TYPE CLUSTER", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001,"}, map[string]string{"redis-cluster-addrs": "a:7000,b:7001"}},
		{"REDIS_AUTH user:password", map[string]string{"REDIS_URL": "r:1", "REDIS_AUTH": "app:s3:cret"},
			map[string]string{"redis-url": "redis://r:1", "redis-username": "app"}},
		{"REDIS_SENTINEL_AUTH", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "m,s:1", "REDIS_SENTINEL_AUTH": "su:sp"},
			map[string]string{"redis-sentinel-master": "m", "redis-sentinel-addrs": "s:1", "redis-sentinel-username": "su"}},
		{"REDIS_TLS and its files", map[string]string{"REDIS_URL": "r:1", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem",
			"REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			map[string]string{"redis-url": "redis://r:1", "redis-tls": "true", "redis-tls-ca": "/ca.pem", "redis-tls-cert": "/c.pem",
				"redis-tls-key": "/k.pem", "redis-tls-skip-hostname-verification": "true"}},
		{"REDIS_TLS off leaves its files unused", map[string]string{"REDIS_URL": "r:1", "REDIS_TLS_CACERT": "/ca.pem"},
			map[string]string{"redis-url": "redis://r:1"}},
		{"GRPC_SERVER_USE_TLS and its files", with(tlsFiles, "GRPC_SERVER_USE_TLS", "true", "GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt",
			"GRPC_CLIENT_TLS_SAN", "envoy.edge.svc"),
			map[string]string{"grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key", "grpc-tls-client-ca": "/certs/ca.crt",
				"grpc-tls-client-san": "envoy.edge.svc"}},
		// Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT, which the reference
		// never reads.
		{"GRPC_SERVER_USE_TLS as Envoy Gateway sets it", with(tlsFiles, "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
			map[string]string{"grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key"}},
		// The reference checks the SAN only on client certificates, which
		// it asks for only with a client CA.
		{"GRPC_CLIENT_TLS_SAN without a client CA", with(tlsFiles, "GRPC_SERVER_USE_TLS", "true", "GRPC_CLIENT_TLS_SAN", "envoy.edge.svc"),
			map[string]string{"grpc-tls-cert": "/certs/tls.crt", "grpc-tls-key": "/certs/tls.key"}},
		{"GRPC_SERVER_USE_TLS off leaves its files unused", with(tlsFiles, "GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"), map[string]string{}},
		{"REDIS_POOL_SIZE", map[string]string{"REDIS_POOL_SIZE": "20"}, map[string]string{"redis-pool-size": "20"}},
		{"REDIS_TIMEOUT", map[string]string{"REDIS_TIMEOUT": "50ms"}, map[string]string{"redis-timeout": "50ms"}},
		{"CACHE_KEY_PREFIX", map[string]string{"CACHE_KEY_PREFIX": "edge_"}, map[string]string{"redis-key-prefix": "edge_"}},
		{"CACHE_KEY_PREFIX empty keeps ours", map[string]string{"CACHE_KEY_PREFIX": ""}, map[string]string{}},
		{"LOCAL_CACHE_SIZE_IN_BYTES", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
			map[string]string{"deny-cache-entries": fmt.Sprint(1048576 / refenv.DenyEntryBytes)}},
		{"LOCAL_CACHE_SIZE_IN_BYTES below one entry", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "100"}, map[string]string{"deny-cache-entries": "1"}},
		{"LOCAL_CACHE_SIZE_IN_BYTES 0", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "0"}, map[string]string{"deny-cache-entries": "0"}},
		{"NEAR_LIMIT_RATIO", map[string]string{"NEAR_LIMIT_RATIO": "0.5"}, map[string]string{"near-limit-ratio": "0.5"}},
		{"SHADOW_MODE", map[string]string{"SHADOW_MODE": "true"}, map[string]string{"shadow-mode": "true"}},
		{"QUOTA_MODE", map[string]string{"QUOTA_MODE": "true"}, map[string]string{"quota-mode": "true"}},
		{"RESPONSE_DYNAMIC_METADATA", map[string]string{"RESPONSE_DYNAMIC_METADATA": "1"}, map[string]string{"response-dynamic-metadata": "true"}},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, map[string]string{"response-headers": "draft03"}},
		{"LIMIT_*_HEADER", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset"},
			map[string]string{"response-headers": "draft03", "response-header-names": "RateLimit-Limit,RateLimit-Remaining,X-Reset"}},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"},
			map[string]string{"health-requires-rules": "true"}},
		{"USE_PROMETHEUS", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/stats/prometheus"},
			map[string]string{"metrics-addr": ":19001", "metrics-path": "/stats/prometheus", "reference-metrics": "true"}},
		{"PROMETHEUS_* without USE_PROMETHEUS", map[string]string{"PROMETHEUS_ADDR": ":19001"}, map[string]string{}},
		{"TRACING_*", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "rl",
			"TRACING_SERVICE_NAMESPACE": "edge", "TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "0.25"},
			map[string]string{"tracing": "true", "tracing-protocol": "grpc", "tracing-sampling-rate": "0.25", refenv.TracingServiceName: "rl",
				refenv.TracingServiceNamespace: "edge", refenv.TracingServiceInstanceID: "pod-1"}},
		{"TRACING_ENABLED alone: the reference's defaults", map[string]string{"TRACING_ENABLED": "true"},
			map[string]string{"tracing": "true", refenv.TracingServiceName: "RateLimit"}},
		{"TRACING_SAMPLING_RATE above 1: every trace, as the reference", map[string]string{"TRACING_ENABLED": "1", "TRACING_SAMPLING_RATE": "5"},
			map[string]string{"tracing": "true", refenv.TracingServiceName: "RateLimit"}},
		{"TRACING_SAMPLING_RATE below 0: none", map[string]string{"TRACING_ENABLED": "1", "TRACING_SAMPLING_RATE": "-1"},
			map[string]string{"tracing": "true", "tracing-sampling-rate": "0", refenv.TracingServiceName: "RateLimit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, got := mustStart(t, false, tt.give)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flags set (-want +got):\n%s", diff)
			}
			if r := e.Report(environ(tt.give)); len(r.Refused) > 0 {
				t.Errorf("refused: %q", r.Refused)
			}
		})
	}
}

// TestRefModeDefaults: run as the reference with nothing set, its
// defaults apply to the settings that describe the deployment; run under
// another name, ours stay.
func TestRefModeDefaults(t *testing.T) {
	want := map[string]string{
		"http-addr": "0.0.0.0:8080", "grpc-addr": "0.0.0.0:8081", "debug-addr": "0.0.0.0:6070",
		"config": "/srv/runtime_data/current/config", "watch-link": "/srv/runtime_data/current",
		"redis-url": "unix:///var/run/nutcracker/ratelimit.sock", "redis-pool-size": "10", "deny-cache-entries": "0",
		"grpc-max-connection-age": "24h0m0s", "grpc-max-connection-age-grace": "1h0m0s",
		// The reference fails a request it cannot decide, and bounds a
		// request by its size alone: Envoy Gateway's 128 rules fit.
		"failure-mode": "error", "max-descriptors": "128", "max-entries": "160",
		// A central service, which every Envoy worker connects to; its
		// requests all fail while Redis refuses the configuration, and
		// health says so.
		"grpc-max-conns": "256", "health-requires-redis-config": "true",
		// The reference sends statsd by default, over TCP to
		// localhost:8125.
		"statsd-addr": "localhost:8125", "statsd-protocol": "tcp",
		refenv.TracingServiceName: "RateLimit",
		// Not the reference's (see refMappings): redis-timeout, log-level,
		// log-format, redis-key-prefix.
	}
	e, got := mustStart(t, true, nil)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run as %s (-want +got):\n%s", refenv.Name, diff)
	}
	if r := e.Report(nil); len(r.Refused) != 0 || !r.RefMode {
		t.Errorf("run as %s with nothing set: refused %q, RefMode %v", refenv.Name, r.Refused, r.RefMode)
	}
	if _, got := mustStart(t, false, nil); len(got) != 0 {
		t.Errorf("run under another name, nothing set: %v set", got)
	}
	if !refenv.IsRefMode("/bin/ratelimit") || !refenv.IsRefMode("ratelimit") {
		t.Error("IsRefMode: /bin/ratelimit and ratelimit run as the reference")
	}
	for _, argv0 := range []string{"/usr/local/bin/ratelimit-sidecar", "ratelimit-sidecar", "/bin/ratelimit-old"} {
		if refenv.IsRefMode(argv0) {
			t.Errorf("IsRefMode(%q)", argv0)
		}
	}
}

// TestPrecedence: a flag on the command line beats its RLS_ variable,
// which beats the reference's variables, which beat the default (ours,
// or run as the reference its); the report says which.
func TestPrecedence(t *testing.T) {
	tests := []struct {
		name     string
		refMode  bool
		env      map[string]string
		args     []string
		want     string
		wantFrom string // "" for the command line or the default
	}{
		{"default", false, nil, nil, "127.0.0.1:8081", ""},
		{"reference's default", true, nil, nil, "0.0.0.0:8081", "the defaults of GRPC_HOST, GRPC_PORT (run as ratelimit)"},
		{"reference's variable", false, map[string]string{"GRPC_PORT": "9001"}, nil, "0.0.0.0:9001", "GRPC_PORT"},
		{"RLS_ variable", true, map[string]string{"GRPC_PORT": "9001", "RLS_GRPC_ADDR": "127.0.0.1:9002"}, nil, "127.0.0.1:9002", "RLS_GRPC_ADDR"},
		{"flag", true, map[string]string{"GRPC_PORT": "9001", "RLS_GRPC_ADDR": "127.0.0.1:9002"}, []string{"--grpc-addr=127.0.0.1:9003"}, "127.0.0.1:9003", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, fs, _, err := start(t, tt.refMode, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, from := fs.Lookup("grpc-addr").Value.String(), e.Report(nil).From["grpc-addr"]
			if got != tt.want || from != tt.wantFrom {
				t.Errorf("grpc-addr %q from %q, want %q from %q", got, from, tt.want, tt.wantFrom)
			}
			if want := len(tt.args) > 0; e.OnCommandLine("grpc-addr") != want {
				t.Errorf("OnCommandLine(grpc-addr) = %v, want %v", !want, want)
			}
		})
	}
}

// TestWholeMappings: a Redis topology comes from one place: an RLS_
// variable or flag for any topology keeps the reference's out
// altogether; and a --config given otherwise keeps RUNTIME_ROOT's link
// unwatched.
func TestWholeMappings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want map[string]string
	}{
		{"RLS_REDIS_CLUSTER_ADDRS and REDIS_URL", map[string]string{"REDIS_URL": "r:6379", "RLS_REDIS_CLUSTER_ADDRS": "c1:7000,c2:7000"}, nil,
			map[string]string{"redis-cluster-addrs": "c1:7000,c2:7000"}},
		{"Sentinel flags and REDIS_URL", map[string]string{"REDIS_URL": "r:6379"}, []string{"--redis-sentinel-master=m", "--redis-sentinel-addrs=s:1"},
			map[string]string{"redis-sentinel-master": "m", "redis-sentinel-addrs": "s:1"}},
		{"RLS_CONFIG and RUNTIME_ROOT", map[string]string{"RUNTIME_ROOT": "/srv/current", "RLS_CONFIG": "/rules"}, nil,
			map[string]string{"config": "/rules"}},
		// A mapping that is not whole leaves only the flags set otherwise.
		{"RLS_GRPC_TLS_KEY and GRPC_SERVER_USE_TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c",
			"GRPC_SERVER_TLS_KEY": "/k", "RLS_GRPC_TLS_KEY": "/ours"}, nil,
			map[string]string{"grpc-tls-cert": "/c", "grpc-tls-key": "/ours"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := mustStart(t, false, tt.env, tt.args...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flags set (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPasswords: the reference's REDIS_AUTH and REDIS_SENTINEL_AUTH give
// the passwords, unless RLS_REDIS_PASSWORD (RLS_REDIS_SENTINEL_PASSWORD)
// or a password file does; the report names the reference's variable
// only when its password is used.
func TestPasswords(t *testing.T) {
	tests := []struct {
		name                       string
		env                        map[string]string
		file, sentinelFile         string
		want, wantSentinel         string // what the passwords are left as, from "ours"
		wantFrom, wantSentinelFrom string
	}{
		{name: "REDIS_AUTH a password", env: map[string]string{"REDIS_AUTH": "s3cret"}, want: "s3cret", wantSentinel: "ours", wantFrom: "REDIS_AUTH"},
		{name: "REDIS_AUTH user:password", env: map[string]string{"REDIS_AUTH": "app:s3:cret"}, want: "s3:cret", wantSentinel: "ours", wantFrom: "REDIS_AUTH"},
		{name: "RLS_REDIS_PASSWORD first", env: map[string]string{"REDIS_AUTH": "u:ref", "RLS_REDIS_PASSWORD": "x"}, want: "ours", wantSentinel: "ours"},
		{name: "a file first", env: map[string]string{"REDIS_AUTH": "ref"}, file: "/pw", want: "ours", wantSentinel: "ours"},
		{name: "REDIS_SENTINEL_AUTH", env: map[string]string{"REDIS_SENTINEL_AUTH": "su:sp"}, want: "ours", wantSentinel: "sp",
			wantSentinelFrom: "REDIS_SENTINEL_AUTH"},
		{name: "RLS_REDIS_SENTINEL_PASSWORD first", env: map[string]string{"REDIS_SENTINEL_AUTH": "sp", "RLS_REDIS_SENTINEL_PASSWORD": "x"},
			want: "ours", wantSentinel: "ours"},
		{name: "a sentinel file first", env: map[string]string{"REDIS_SENTINEL_AUTH": "sp"}, sentinelFile: "/spw", want: "ours", wantSentinel: "ours"},
		{name: "none", want: "ours", wantSentinel: "ours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := mustStart(t, false, tt.env)
			pw, spw := "ours", "ours"
			e.Passwords(&pw, &spw, tt.file, tt.sentinelFile)
			r := e.Report(nil)
			if pw != tt.want || spw != tt.wantSentinel || r.PasswordFrom != tt.wantFrom || r.SentinelPasswordFrom != tt.wantSentinelFrom {
				t.Errorf("passwords %q from %q, %q from %q; want %q from %q, %q from %q", pw, r.PasswordFrom, spw, r.SentinelPasswordFrom,
					tt.want, tt.wantFrom, tt.wantSentinel, tt.wantSentinelFrom)
			}
		})
	}
}

// TestLoadErrors: a value the reference could not parse, or that means
// nothing, is an error naming the variable; every one is reported. A
// value an RLS_ variable or a flag does not take names it too.
func TestLoadErrors(t *testing.T) {
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
		{map[string]string{"REDIS_URL": "mymaster", "REDIS_TYPE": "SENTINEL"},
			[]string{`REDIS_URL: with REDIS_TYPE=SENTINEL, want <master name>,<sentinel host:port>,..., got "mymaster"`}},
		{map[string]string{"REDIS_URL": "a:1,b", "REDIS_TYPE": "cluster"}, []string{`REDIS_URL: want host:port addresses, got "b"`}},
		{map[string]string{"REDIS_URL": " "}, []string{"REDIS_URL: empty"}},
		{map[string]string{"BACKEND_TYPE": "etcd"}, []string{`BACKEND_TYPE: want redis or memcache, got "etcd"`}},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, []string{`CONFIG_TYPE: want FILE or GRPC_XDS_SOTW, got "CONSUL"`}},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "thrift"}, []string{`TRACING_EXPORTER_PROTOCOL: want http or grpc, got "thrift"`}},
		{map[string]string{"TRACING_ENABLED": "on"}, []string{`TRACING_ENABLED: want true or false, got "on"`}},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "half"}, []string{`TRACING_SAMPLING_RATE: want a number, got "half"`}},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, []string{"LOCAL_CACHE_SIZE_IN_BYTES: want 0 or more bytes, got -1"}},
		{map[string]string{"PORT": "x", "GRPC_PORT": "y"}, []string{`PORT: want an integer, got "x"`, `GRPC_PORT: want an integer, got "y"`}},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, []string{"GRPC_SERVER_USE_TLS: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"}},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "NaN"}, []string{`XDS_CLIENT_BACKOFF_RANDOM_FACTOR: want a finite number, got "NaN"`}},
		{map[string]string{"STATS_FLUSH_INTERVAL": "0s"}, []string{"STATS_FLUSH_INTERVAL: want more than 0, got 0s"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(slices.Sorted(maps.Keys(tt.give)), ","), func(t *testing.T) {
			_, _, _, err := start(t, false, tt.give)
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

// TestLoadFlagErrors: a value that a flag does not take is an error
// naming where it came from: the reference's variables, with the value
// they give; an RLS_ variable; or, for a setting without a flag, the
// variables.
func TestLoadFlagErrors(t *testing.T) {
	typed := func() (fs, flagless *flag.FlagSet) {
		fs = flag.NewFlagSet("", flag.ContinueOnError)
		fs.Int("redis-pool-size", 0, "")
		fs.Duration("idle-timeout", 0, "")
		flagless = flag.NewFlagSet("", flag.ContinueOnError)
		flagless.Func(refenv.XDSMaxMessageBytes, "", func(string) error { return errors.New("too big") })
		return fs, flagless
	}
	tests := []struct {
		give map[string]string
		want string
	}{
		{map[string]string{"REDIS_POOL_SIZE": "0x1p40"}, `REDIS_POOL_SIZE: want an integer, got "0x1p40"`},
		{map[string]string{"RLS_IDLE_TIMEOUT": "soon"}, "RLS_IDLE_TIMEOUT: parse error"},
		{map[string]string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: too big"},
	}
	for _, tt := range tests {
		fs, flagless := typed()
		_, err := refenv.Load(fs, flagless, false, lookup(tt.give))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want it to say %s", tt.give, err, tt.want)
		}
	}
	// The reference's value that does not fit the flag's type.
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.Bool("shadow-mode", false, "")
	fs.Int("near-limit-ratio", 0, "")
	_, err := refenv.Load(fs, flag.NewFlagSet("", flag.ContinueOnError), false, lookup(map[string]string{"NEAR_LIMIT_RATIO": "0.5"}))
	if want := "NEAR_LIMIT_RATIO (as --near-limit-ratio=0.5): parse error"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to say %s", err, want)
	}
}

// TestExplain: an error in the settings that names a flag the user set
// through a variable says which variable; other errors are left as they
// are, and a flag whose name starts another's is not taken for it.
func TestExplain(t *testing.T) {
	e, _ := mustStart(t, false, map[string]string{
		"NEAR_LIMIT_RATIO": "2", "USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics", "RLS_IDLE_TIMEOUT": "1ns",
	}, "--grpc-addr=:1")
	base := errors.New("") // wrapped, adding nothing to the text
	tests := []struct {
		give, want string
	}{
		{"--near-limit-ratio: want a number above 0 and at most 1, got 2",
			"--near-limit-ratio: want a number above 0 and at most 1, got 2 (--near-limit-ratio is set from NEAR_LIMIT_RATIO)"},
		{"--metrics-path: want a path starting with /", "--metrics-path: want a path starting with / (--metrics-path is set from USE_PROMETHEUS, PROMETHEUS_PATH)"},
		{"--idle-timeout: want 100ms or more, got 1ns", "--idle-timeout: want 100ms or more, got 1ns (--idle-timeout is set from RLS_IDLE_TIMEOUT)"},
		{"--metrics-addr and --near-limit-ratio", "--metrics-addr and --near-limit-ratio (--metrics-addr is set from USE_PROMETHEUS, PROMETHEUS_PATH; " +
			"--near-limit-ratio is set from NEAR_LIMIT_RATIO)"},
		{"--grpc-addr: bad", "--grpc-addr: bad"},           // the command line's
		{"--metrics-path-x: bad", "--metrics-path-x: bad"}, // another flag
		{"--metrics-path-x or --metrics-path", "--metrics-path-x or --metrics-path (--metrics-path is set from USE_PROMETHEUS, PROMETHEUS_PATH)"},
		{"--redis-url: bad", "--redis-url: bad"}, // not set
	}
	for _, tt := range tests {
		err := e.Explain(fmt.Errorf("%s%w", tt.give, base))
		if got := err.Error(); got != tt.want {
			t.Errorf("Explain(%q) = %q, want %q", tt.give, got, tt.want)
		}
		if !errors.Is(err, base) {
			t.Errorf("Explain(%q) does not wrap the error", tt.give)
		}
	}
}
