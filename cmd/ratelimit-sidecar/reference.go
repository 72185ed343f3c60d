package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
)

// The flags of what deployments of envoyproxy/ratelimit (the reference)
// rely on around the RPC: its gRPC health name, /healthcheck and the
// debug port's /rlconfig (internal/admin), a Unix socket for gRPC and
// Prometheus on an address of its own (listen.go), reloads on a swapped
// RUNTIME_ROOT link (config.WatchLink), and the response settings
// SHADOW_MODE, RESPONSE_DYNAMIC_METADATA and the header names.
// internal/refenv maps the reference's variables onto these flags.

// refHealthName is the gRPC health service name the reference reports.
const refHealthName = "ratelimit"

// refSettings are the flags of what the reference's deployments rely on.
type refSettings struct {
	debugAddr           string
	grpcUDS             string
	connGrace           time.Duration
	metricsAddr         string
	metricsPath         string
	referenceMetrics    bool
	watchLink           string
	healthRequiresRules bool
	shadowMode          bool
	quotaMode           bool
	dynamicMetadata     bool
	headerNames         string
	names               envoy.HeaderNames // headerNames, parsed

	// healthRequiresRedisConfig: health is NOT_SERVING while Redis
	// refuses the configuration (health.go).
	healthRequiresRedisConfig bool

	// onListen, if set, is called with the debug and metrics listeners'
	// addresses ("" for none) once the servers are about to serve. Tests
	// use it to find ports chosen by :0.
	onListen func(debugAddr, metricsAddr string)
}

const defaultHeaderNames = "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"

// defineRef defines the flags of refSettings on fs.
func (c *settings) defineRef(fs *flag.FlagSet) {
	r := &c.ref
	fs.StringVar(&r.debugAddr, "debug-addr", "", "address for /rlconfig (the rules in use as text, as on envoyproxy/ratelimit's debug port) and /debug/config; empty: no debug listener")
	fs.StringVar(&r.grpcUDS, "grpc-uds", "", "path of a Unix socket to serve the RLS gRPC service, health and reflection on instead of --grpc-addr; a stale socket left there is removed")
	fs.DurationVar(&r.connGrace, "grpc-max-connection-age-grace", 0, "how long calls in flight on a connection past --grpc-max-connection-age may take before it is closed (0: --shutdown-timeout)")
	fs.StringVar(&r.metricsAddr, "metrics-addr", "", "address for the Prometheus metrics on a listener of their own; empty serves them on --http-addr")
	fs.StringVar(&r.metricsPath, "metrics-path", "/metrics", "path of the Prometheus metrics")
	fs.BoolVar(&r.referenceMetrics, "reference-metrics", false, "serve envoyproxy/ratelimit's metric names too (ratelimit_service_*, as its default Prometheus mapping names them), derived from ours at each scrape")
	fs.StringVar(&r.watchLink, "watch-link", "", "a symbolic link at or above --config whose replacement reloads the rules, as envoyproxy/ratelimit's RUNTIME_ROOT with RUNTIME_WATCH_ROOT")
	fs.BoolVar(&r.healthRequiresRules, "health-requires-rules", false, "report gRPC health, /healthcheck and /readyz as not serving while no rule is loaded")
	fs.BoolVar(&r.healthRequiresRedisConfig, "health-requires-redis-config", false, "report gRPC health and /healthcheck as not serving while Redis refuses the sidecar's configuration (password, ACL or TLS), as /readyz does; on by default run as ratelimit, whose requests then all fail")
	fs.BoolVar(&r.shadowMode, "shadow-mode", false, "answer OK to every request whatever its limits say (descriptor statuses and metrics still say OVER_LIMIT), as envoyproxy/ratelimit's SHADOW_MODE")
	fs.BoolVar(&r.quotaMode, "quota-mode", false, "count every descriptor as a quota_mode one, which rejects a request only when every quota_mode descriptor of it is over, as envoyproxy/ratelimit's QUOTA_MODE")
	fs.BoolVar(&r.dynamicMetadata, "response-dynamic-metadata", false, "add the request's domain, descriptors and hits, and the metadata of the rules of the descriptors that passed, to each response's dynamic_metadata, as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA")
	fs.StringVar(&r.headerNames, "response-header-names", defaultHeaderNames, "names of the limit, remaining and reset headers of --response-headers=draft03, comma-separated")
	fs.BoolVar(&c.store.redis.TLS.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "check Redis's certificate against the CAs but not its host name")
}

// check checks the flags of refSettings.
func (r *refSettings) check() error {
	if !strings.HasPrefix(r.metricsPath, "/") || strings.ContainsAny(r.metricsPath, " \t{}") {
		return fmt.Errorf("--metrics-path: want a path starting with /, without spaces or braces, got %q", r.metricsPath)
	}
	if r.connGrace < 0 {
		return fmt.Errorf("--grpc-max-connection-age-grace: want 0 or more, got %v", r.connGrace)
	}
	names := strings.Split(r.headerNames, ",")
	if len(names) != 3 {
		return fmt.Errorf("--response-header-names: want three comma-separated names, got %q", r.headerNames)
	}
	for _, n := range names {
		if !validHeaderName(n) {
			return fmt.Errorf("--response-header-names: %q is not a valid header name", n)
		}
	}
	if r.headerNames != defaultHeaderNames {
		r.names = envoy.HeaderNames{Limit: names[0], Remaining: names[1], Reset: names[2]}
	}
	return nil
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// healthNames are the gRPC health service names the sidecar reports: the
// server's, the RLS service's and the reference's; newServers adds RLQS's
// when it is served.
var healthNames = []string{"", envoy.ServiceName, refHealthName}
