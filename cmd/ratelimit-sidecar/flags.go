package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/admin"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/bounds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gctune"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/grpctls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlpmetrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/statsd"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// settings is every flag's value.
type settings struct {
	addrs    listenAddrs     // --*-addr, --grpc-uds: see listen.go
	log      logOptions      // --log-level, --log-format
	shutdown shutdownOptions // --drain-delay, --shutdown-timeout
	// engine holds the request's bounds, --failure-mode,
	// --local-fallback-divisor, --override-keys and --quota-mode;
	// newEngine sets the rest.
	engine limits.EngineOptions

	metricsPath     string
	refMetrics      bool          // --reference-metrics: envoyproxy/ratelimit's metric names too
	connGrace       time.Duration // --grpc-max-connection-age-grace (0: shutdown.timeout)
	version         bool
	nearLimitRatio  float64
	metricMaxValues int
	responseHeaders envoy.HeaderMode
	shadowMode      bool
	dynamicMetadata bool
	headerNames     string            // --response-header-names
	responseNames   envoy.HeaderNames // headerNames, parsed; zero for the default
	watchLink       string            // --watch-link: its replacement reloads the rules (config.WatchLink)

	store storeOptions // --redis-*, --memory-max-keys, --deny-cache-entries: see store.go

	bounds bounds.Server // what clients can make the servers hold

	tls grpctls.Options // --grpc-tls-*

	// health holds --health-requires-*; newHealth sets the rest.
	health admin.HealthOptions

	rejections rejectlog.Settings // --log-rejections*
	// counters holds --admin-counter-reset, and --log-rejections-values
	// parsed; adminOptions sets the rest.
	counters admin.CountersOptions

	gc          gctune.Settings
	memoryLimit string // --memory-limit's text, for finish to parse

	rules rulesOptions  // --config, --config-type, --xds-*: see xds.go
	env   refenv.Report // where the settings came from: internal/refenv

	tracing tracing.Options     // --tracing*, and the reference's TRACING_SERVICE_*
	statsd  statsd.Settings     // --statsd-*
	otlp    otlpmetrics.Options // --otlp-metrics*

	rlqs rlqs.Options // --rlqs-*: its BucketTTL, IdleAfter, MaxBuckets and Margin

	// onReady, if set, is called with the listeners' addresses ("" for
	// none) once the servers are about to serve. Tests use it to find
	// ports chosen by :0.
	onReady func(listenAddrs)
}

// logOptions are the log's flags.
type logOptions struct {
	level, format string
}

// check checks the log's format; newLogger reads the level.
func (o logOptions) check() error {
	switch o.format {
	case "json", "console":
		return nil
	}
	return fmt.Errorf("--log-format: want json or console, got %q", o.format)
}

// shutdownOptions are how the servers stop.
type shutdownOptions struct {
	drainDelay time.Duration // reporting NOT_SERVING before stopping
	timeout    time.Duration // for calls in flight to finish
}

// parseFlags parses args, taking a flag's default from the environment
// variable RLS_<FLAG> (upper case, '-' as '_') when it is set.
func parseFlags(args []string, getenv func(string) (string, bool), stderr io.Writer) (*settings, error) {
	return parseFlagsAs("ratelimit-sidecar", args, getenv, nil, stderr)
}

// parseFlagsAs is parseFlags for the program run as argv0 (os.Args[0]),
// in an environment of which getenv reads one variable and environ lists
// all (nil: unknown). Below the RLS_ variables come envoyproxy/ratelimit's
// (internal/refenv), and run as "ratelimit" its defaults.
func parseFlagsAs(argv0 string, args []string, getenv func(string) (string, bool), environ []string, _ io.Writer) (*settings, error) {
	c := newSettings()
	fs := flag.NewFlagSet("ratelimit-sidecar", flag.ContinueOnError)
	// A command line that does not parse is one line (flagError), not
	// the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.define(fs)
	// The command line is parsed once, first; the variables then set only
	// the flags it left alone, so it wins whatever order they are set in.
	if err := fs.Parse(args); err != nil {
		return nil, flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	// The variables set only the flags the command line left alone:
	// their RLS_ variables, then envoyproxy/ratelimit's.
	env, err := refenv.Load(fs, defineFlagless(&c.rules.xds, &c.tracing), refenv.IsRefMode(argv0), getenv)
	if err != nil {
		return nil, err
	}
	c.store.urlInArgs = env.OnCommandLine("redis-url")
	if err := c.finish(getenv); err != nil {
		return nil, env.Explain(err)
	}
	env.Passwords(&c.store.redis.Password, &c.store.redis.SentinelPassword, c.store.auth.PasswordFile, c.store.auth.SentinelPasswordFile)
	c.env = env.Report(environ)
	return c, nil
}

// newSettings returns the settings flags are defined on: the defaults a
// flag takes from a field rather than a literal (the request's bounds)
// set, so that parsing and help show the same ones.
func newSettings() *settings {
	return &settings{engine: limits.EngineOptions{Limits: limits.DefaultRequestLimits, FailureMode: limits.FailLocal}, tracing: tracing.Options{ServiceVersion: version},
		otlp: otlpmetrics.Options{ServiceVersion: version}}
}

// define defines every flag on fs, writing into c.
func (c *settings) define(fs *flag.FlagSet) {
	fs.StringVar(&c.rules.path, "config", "config/", "rule file or directory of *.yaml/*.yml rule files")
	fs.StringVar(&c.addrs.grpc, "grpc-addr", "127.0.0.1:8081", "address for the RLS gRPC service, health and reflection")
	fs.StringVar(&c.addrs.http, "http-addr", "127.0.0.1:8080", "address for /healthz, /readyz and /metrics (and the admin endpoints unless --admin-addr is set)")
	fs.StringVar(&c.addrs.admin, "admin-addr", "", "address for POST /json, /debug/config and /debug/counters; empty serves them on --http-addr. Set it to a loopback address when --http-addr must listen on the pod address, since /json spends quota")
	fs.StringVar(&c.log.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.log.format, "log-format", "json", "json or console")
	fs.StringVar(&c.rejections.Level, "log-rejections", "debug", "`level` of one log line per request answered OVER_LIMIT, saying why (domain, descriptors, rule, limit, key, remaining, reset) and what decided (redis, memory, deny_cache or a failure mode): off, debug (shown only with --log-level debug) or info")
	fs.Float64Var(&c.rejections.Rate, "log-rejections-rate", 10, "most rejection lines per second, in bursts of as many; the rest are counted in ratelimit_sidecar_rejection_logs_suppressed_total and in the next line's not_logged")
	fs.StringVar(&c.rejections.Values, "log-rejections-values", "hash", "how rejection lines and the counter reset's log line show descriptor values and counter keys, which may be secret: hash (sha256: and 12 hex digits) or plain")
	fs.BoolVar(&c.counters.AllowReset, "admin-counter-reset", false, "allow POST /debug/counters/reset on the admin address, which deletes counters from the store")
	fs.BoolVar(&c.rules.config.MergeDomains, "merge-domains", false, "let several rule files add to one domain")
	fs.BoolVar(&c.rules.config.CalendarMonths, "calendar-months", false, "count every fixed window of one month that sets no calendar of its own, and every month Envoy sends without an override, as a UTC calendar month, as envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT; without it a month is 30 days from the Unix epoch")
	fs.BoolVar(&c.rules.config.AllowEmpty, "allow-empty-rules", false, "start, and accept reloads, with no rule files, answering OK to every request (logged at Warn); without it no rules is a config error")
	fs.DurationVar(&c.shutdown.drainDelay, "drain-delay", 0, "on SIGTERM, how long to report NOT_SERVING before stopping, so Envoy and Kubernetes stop sending")
	fs.DurationVar(&c.shutdown.timeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish at shutdown")
	fs.IntVar(&c.engine.Limits.MaxDescriptors, "max-descriptors", c.engine.Limits.MaxDescriptors, "most descriptors in one request")
	fs.IntVar(&c.engine.Limits.MaxEntries, "max-entries", c.engine.Limits.MaxEntries, "most entries in one descriptor")
	fs.IntVar(&c.engine.Limits.MaxValueBytes, "max-value-bytes", c.engine.Limits.MaxValueBytes, "longest domain, entry key or entry value, in bytes")
	fs.Uint64Var(&c.engine.Limits.MaxHits, "max-hits-addend", c.engine.Limits.MaxHits, "largest hits_addend accepted")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	fs.Var(&c.responseHeaders, "response-headers", "`mode` of rate-limit headers for Envoy to add to responses: none, draft03 (RateLimit-Limit, -Remaining, -Reset) or ietf (RateLimit-Policy and RateLimit); both add Retry-After when over limit")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", 0.8, "share of a limit past which admitted hits count as near the limit in metrics")
	fs.Var(&c.engine.OverrideKeys, "override-keys", "`mode` of the counters of Envoy's per-request limits (descriptor.limit): shared with the rules' fixed windows of the same window, as envoyproxy/ratelimit, or separate, one per override's requests and unit; not for those a rule's override counts (default shared)")
	fs.IntVar(&c.metricMaxValues, "metric-max-values", metrics.DefaultMaxValues, "how many distinct value names each detailed_metric or value_to_metric rule gets series for; later ones share the rule's rule=\"_other.<rule>\" series (0: all do)")
	fs.DurationVar(&c.rlqs.BucketTTL, "rlqs-bucket-ttl", 6*time.Second, "RLQS: the longest time to live of a quota assignment on a token or leaky bucket, in whole seconds; set Envoy's reporting_interval to at most this, and the same on every sidecar (see docs/rlqs.md)")
	fs.DurationVar(&c.rlqs.Margin, "rlqs-margin", time.Second, "RLQS: how long an assignment may take to reach Envoy; a window's grant ends this long before its window, so quota is never spent in the window after it was counted in (lower: shorter denials at window ends, if answers reach Envoy faster)")
	fs.IntVar(&c.rlqs.MaxBuckets, "rlqs-max-buckets", 10_000, "RLQS: most buckets one stream may hold; a bucket past it is answered by its domain's failure mode and not kept")
	fs.DurationVar(&c.rlqs.IdleAfter, "rlqs-idle-after", time.Minute, "RLQS: abandon a bucket that has reported no requests for this long; Envoy subscribes to it again at its next request")
	fs.DurationVar(&c.rules.debounce, "reload-debounce", 200*time.Millisecond, "how long file changes must settle before rules are reloaded")
	fs.IntVar(&c.gc.Percent, "gc-percent", gctune.DefaultPercent, "the Go garbage collector's GOGC, unless the GOGC environment variable is set")
	fs.StringVar(&c.memoryLimit, "memory-limit", gctune.DefaultMemoryLimit, "the Go runtime's soft memory limit (64MiB, 1GiB, ...; 0: none), unless the GOMEMLIMIT environment variable is set")

	// Bounds on what clients can make the servers hold: see internal/bounds.
	fs.UintVar(&c.bounds.GRPCMaxStreams, "grpc-max-streams", 100, "most gRPC calls in flight on one connection; the server refuses more, and Envoy opens another connection for them")
	fs.IntVar(&c.bounds.GRPCMaxConns, "grpc-max-conns", 64, "most gRPC connections open at once (0: no cap); a new one closes the connection quiet for longest of the peer holding the most. Keep it above Envoy's --concurrency")
	fs.IntVar(&c.bounds.HTTPMaxConns, "http-max-conns", 128, "most connections open at once on --http-addr, and on --admin-addr (0: no cap); a new one closes the connection quiet for longest of the peer holding the most")
	fs.DurationVar(&c.bounds.RequestTimeout, "grpc-request-timeout", 2*time.Second, "how long a gRPC call may take to send its request: a unary call without a sooner deadline of its own is cancelled after this, and so is a streaming call that has sent no message by then; also bounds a new connection's TLS and HTTP/2 handshakes")
	fs.DurationVar(&c.bounds.MaxConnAge, "grpc-max-connection-age", 30*time.Minute, "close a gRPC connection after about this long (0: never), with a GOAWAY first and --shutdown-timeout for its calls in flight to finish")
	fs.DurationVar(&c.bounds.IdleTimeout, "idle-timeout", time.Minute, "close a gRPC connection with no call in flight, or an HTTP connection with no request, after this long")

	// TLS on the gRPC listener: see internal/grpctls.
	fs.StringVar(&c.tls.CertFile, "grpc-tls-cert", "", "PEM certificate (chain) of the gRPC listener; with --grpc-tls-key, gRPC is served over TLS only. Read again when it changes")
	fs.StringVar(&c.tls.KeyFile, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fs.StringVar(&c.tls.ClientCAFile, "grpc-tls-client-ca", "", "PEM CAs of client certificates: clients must present a certificate one of them signed (mutual TLS). Read again when it changes")
	fs.StringVar(&c.tls.ClientSAN, "grpc-tls-client-san", "", "a name the client certificate must hold: a DNS name or IP address, matched as a server's name is, or a URI (spiffe://...) exactly; needs --grpc-tls-client-ca")
	fs.StringVar(&c.tls.MinVersion, "grpc-tls-min-version", "1.2", "least TLS version of the gRPC listener: 1.2 or 1.3")
	fs.Float64Var(&c.tls.HandshakeRate, "grpc-tls-handshake-rate", 500, "most TLS handshakes the gRPC listener starts a second, in bursts of as many (0: no limit); one that would wait past --grpc-request-timeout for its turn fails")

	fs.Var(&c.engine.FailureMode, "failure-mode", "`mode` of what requests get while Redis cannot decide: open, closed, local or error; rule files may override it per domain")
	fs.Uint64Var(&c.engine.LocalDivisor, "local-fallback-divisor", 1, "with failure mode local, divide every limit by this (the number of sidecar replicas)")
	fs.IntVar(&c.store.memoryMaxKeys, "memory-max-keys", memory.DefaultMaxKeys, "most keys a memory store (the store without Redis, and failure mode local's) holds; past it, least recently used keys are evicted, never so as to admit more than a limit (docs/memory-store.md). A key longer than 256 bytes counts once per 256")
	fs.IntVar(&c.store.denyCacheEntries, "deny-cache-entries", store.DefaultDenyCacheEntries, "with Redis, how many over-limit keys to remember, so that requests that must be over their limit are rejected without a Redis call; 0 turns the cache off")

	fs.StringVar(&c.store.redis.URL, "redis-url", "", "standalone Redis: redis://[user[:password]@]host:port[/db], or rediss:// for TLS; empty uses the embedded memory store")
	fs.StringVar(&c.store.redis.SentinelMaster, "redis-sentinel-master", "", "Redis Sentinel: the master's name (with --redis-sentinel-addrs)")
	fs.StringVar(&c.store.sentinels, "redis-sentinel-addrs", "", "Redis Sentinel: comma-separated sentinel host:port list")
	fs.StringVar(&c.store.cluster, "redis-cluster-addrs", "", "Redis Cluster: comma-separated seed host:port list")
	fs.StringVar(&c.store.redis.Username, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&c.store.redis.SentinelUsername, "redis-sentinel-username", "", "Redis Sentinel: user name for the sentinels themselves")
	fs.StringVar(&c.store.auth.SentinelPasswordFile, "redis-sentinel-password-file", "", "Redis Sentinel: file holding the sentinels' own password, re-read as it changes (or set RLS_REDIS_SENTINEL_PASSWORD)")
	fs.StringVar(&c.store.auth.PasswordFile, "redis-password-file", "", "file holding the Redis password, re-read as it changes, for new connections (or set RLS_REDIS_PASSWORD; there is no password flag, so it never shows in ps)")
	fs.StringVar(&c.store.auth.UserFile, "redis-username-file", "", "file holding the Redis ACL user name, re-read as it changes (instead of --redis-username)")
	fs.StringVar(&c.store.auth.SentinelUserFile, "redis-sentinel-username-file", "", "Redis Sentinel: file holding the sentinels' user name, re-read as it changes")
	fs.DurationVar(&c.store.redis.ConnMaxLifetime, "redis-conn-max-lifetime", 0, redisConnMaxLifetimeHelp)
	fs.StringVar(&c.store.auth.AWS, "redis-aws-iam", "", "authenticate with AWS IAM auth tokens from the AWS SDK's default credential chain: elasticache, elasticache-serverless or memorydb (needs --redis-username and --redis-aws-cache-name)")
	fs.StringVar(&c.store.auth.AWSName, "redis-aws-cache-name", "", "with --redis-aws-iam: the ElastiCache replication group ID or serverless cache name, or the MemoryDB cluster name")
	fs.StringVar(&c.store.auth.AWSRegion, "redis-aws-region", "", "with --redis-aws-iam: the cache's AWS region (default: the SDK's, from AWS_REGION or the profile)")
	fs.BoolVar(&c.store.auth.GCP, "redis-gcp-iam", false, "authenticate to Memorystore with IAM access tokens of Google's Application Default Credentials (GKE Workload Identity, GOOGLE_APPLICATION_CREDENTIALS, the metadata server)")
	fs.BoolVar(&c.store.redis.TLS.Enabled, "redis-tls", false, "use TLS to Redis (implied by rediss://)")
	fs.StringVar(&c.store.redis.TLS.CAFile, "redis-tls-ca", "", "PEM file of CAs for Redis's certificate (default: system roots)")
	fs.StringVar(&c.store.redis.TLS.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis")
	fs.StringVar(&c.store.redis.TLS.KeyFile, "redis-tls-key", "", "PEM key of the client certificate")
	fs.IntVar(&c.store.redis.PoolSize, "redis-pool-size", 0, "connections per Redis node (0: go-redis's default)")
	fs.IntVar(&c.store.redis.MaxInflight, "redis-max-inflight", redis.DefaultMaxInflight, "request round trips to Redis (on Cluster: to each master) under way at once before requests wait to go together in the next; when Redis is 1 ms or more away the sidecar adds up to 16 more (docs/slow-redis.md)")
	fs.DurationVar(&c.store.redis.Timeout, "redis-timeout", redis.DefaultTimeout, "bound on each Redis operation; the RPC's own deadline bounds it too")
	fs.StringVar(&c.store.redis.KeyPrefix, "redis-key-prefix", redis.DefaultKeyPrefix, "prefix of every Redis key")

	// Rules over xDS: see xds.go.
	fs.StringVar(&c.rules.xds.ConfigType, "config-type", "file", "where the rules come from: file (--config) or xds (a management server's RateLimitConfig pushes, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW; see docs/xds.md)")
	fs.StringVar(&c.rules.xds.Server, "xds-server", "localhost:18000", "xDS management server, host:port (Envoy Gateway: envoy-gateway:18001)")
	fs.StringVar(&c.rules.xds.NodeID, "xds-node-id", "default", "node ID sent to the xDS server, which picks the node's snapshot by it (Envoy Gateway: envoy-ratelimit)")
	fs.StringVar(&c.rules.xds.NodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS server: key=value,key=value, or a JSON object")
	fs.StringVar(&c.rules.xds.Headers, "xds-headers", "", "gRPC headers sent to the xDS server when the stream opens: name:value,name:value")
	fs.BoolVar(&c.rules.xds.TLS, "xds-tls", false, "use TLS to the xDS server (implied by the other --xds-tls-* flags)")
	fs.StringVar(&c.rules.xds.TLSFiles.CAFile, "xds-tls-ca", "", "PEM file of CAs for the xDS server's certificate (default: system roots)")
	fs.StringVar(&c.rules.xds.TLSFiles.CertFile, "xds-tls-cert", "", "PEM client certificate for the xDS server (mutual TLS); read again at every reconnect")
	fs.StringVar(&c.rules.xds.TLSFiles.KeyFile, "xds-tls-key", "", "PEM key of --xds-tls-cert")
	fs.StringVar(&c.rules.xds.TLSFiles.ServerName, "xds-tls-server-name", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.StringVar(&c.rules.xds.OverlayPath, "xds-overlay", "", "YAML file that gives pushed rules our algorithms, windows, bursts, leases, extra limits and failure modes, matched by domain and descriptor path or limit name; reread when it changes (see docs/xds.md)")
	fs.Var(&c.rules.xds.Sources, "xds-source", "one more xDS server to take rules from, beside --xds-server or the rule files: name=NAME,server=HOST:PORT,node-id=ID[,force-start=true,tls-ca=FILE,tls-cert=FILE,tls-key=FILE,tls-server-name=NAME]; repeat it, or separate several with ';'. A domain belongs to the first source that holds it; another's rules for it are refused (see docs/xds.md#several-rule-sources)")
	fs.BoolVar(&c.rules.xds.StartWithoutRules, "force-start-without-rules", false, "with --config-type xds or --xds-source, be ready before the first push, with no rules until it arrives (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG); without it, health and /readyz report not serving until the first good push")
	fs.BoolVar(&c.tracing.Enabled, "tracing", false, "send an OpenTelemetry span of each ShouldRateLimit call, and of its Redis round trip, to an OTLP receiver (docs/tracing.md)")
	fs.StringVar(&c.tracing.Protocol, "tracing-protocol", "", "OTLP `protocol`: grpc or http (protobuf bodies); default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http")
	fs.StringVar(&c.tracing.Endpoint, "tracing-endpoint", "", "OTLP receiver `URL`, http:// or https://, such as http://otel-collector:4318 (http adds /v1/traces to a URL without a path); empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost")
	fs.Float64Var(&c.tracing.SamplingRate, "tracing-sampling-rate", 1, "share of calls traced, from 0 to 1, among those whose caller sent no trace context; a call whose caller did is traced exactly when the caller's trace is sampled")
	fs.StringVar(&c.statsd.Addr, "statsd-addr", "", "`host:port` of a statsd or DogStatsD receiver (statsd_exporter, a Datadog agent), or with --statsd-protocol unixgram a socket's path, to push envoyproxy/ratelimit's stats to, under its names (docs/metrics.md); empty: none. Prometheus metrics are served either way")
	fs.StringVar(&c.statsd.Protocol, "statsd-protocol", "udp", "udp, tcp (envoyproxy/ratelimit's statsd client's) or unixgram (a Datadog agent's socket)")
	fs.StringVar(&c.statsd.Format, "statsd-format", "statsd", "statsd (tags in the name, as .__key=value) or dogstatsd (tags as |#key:value)")
	fs.StringVar(&c.statsd.Tags, "statsd-tags", "", "tags of every stat pushed: key=value,key=value (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.StringVar(&c.statsd.Mogrifiers, "statsd-mogrifiers", "", `with --statsd-format dogstatsd, a JSON list of renamings, the first that matches a stat's name applying: [{"pattern":"^ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(.*)\\.([^.]+)$","name":"ratelimit.service.rate_limit.$3","tags":{"domain":"$1","descriptor":"$2"}}] (envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_*)`)
	fs.DurationVar(&c.statsd.Interval, "statsd-flush-interval", 10*time.Second, "how often stats are pushed to --statsd-addr")
	fs.BoolVar(&c.otlp.Enabled, "otlp-metrics", false, "push our Prometheus metrics, names and labels as they are, over OTLP through the OpenTelemetry SDK (docs/metrics.md)")
	fs.StringVar(&c.otlp.Protocol, "otlp-metrics-protocol", "", "OTLP `protocol`: grpc or http (protobuf bodies); default: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http")
	fs.StringVar(&c.otlp.Endpoint, "otlp-metrics-endpoint", "", "OTLP receiver `URL`: http:// (plaintext) or https://, such as http://otel-collector:4318 (http adds /v1/metrics to a URL without a path); empty: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost")
	fs.DurationVar(&c.otlp.Interval, "otlp-metrics-interval", 0, "time between OTLP exports (0: OTEL_METRIC_EXPORT_INTERVAL, else 60s)")
	fs.StringVar(&c.otlp.TLSCA, "otlp-metrics-tls-ca", "", "PEM file of CAs for the OTLP receiver's certificate (default: system roots); needs an https:// endpoint")
	fs.StringVar(&c.otlp.TLSCert, "otlp-metrics-tls-cert", "", "PEM client certificate for the OTLP receiver (mutual TLS)")
	fs.StringVar(&c.otlp.TLSKey, "otlp-metrics-tls-key", "", "PEM key of --otlp-metrics-tls-cert")

	// Listeners and what is served beside the RLS decision, and the
	// RLS responses, as envoyproxy/ratelimit's deployments rely on them
	// (internal/refenv maps its variables onto these).
	fs.StringVar(&c.addrs.debug, "debug-addr", "", "address for /rlconfig (the rules in use as text, as on envoyproxy/ratelimit's debug port) and /debug/config; empty: no debug listener")
	fs.StringVar(&c.addrs.grpcUDS, "grpc-uds", "", "path of a Unix socket to serve the RLS gRPC service, health and reflection on instead of --grpc-addr; a stale socket left there is removed")
	fs.DurationVar(&c.connGrace, "grpc-max-connection-age-grace", 0, "how long calls in flight on a connection past --grpc-max-connection-age may take before it is closed (0: --shutdown-timeout)")
	fs.StringVar(&c.addrs.metrics, "metrics-addr", "", "address for the Prometheus metrics on a listener of their own; empty serves them on --http-addr")
	fs.StringVar(&c.metricsPath, "metrics-path", "/metrics", "path of the Prometheus metrics")
	fs.BoolVar(&c.refMetrics, "reference-metrics", false, "serve envoyproxy/ratelimit's metric names too (ratelimit_service_*, as its default Prometheus mapping names them), derived from ours at each scrape")
	fs.StringVar(&c.watchLink, "watch-link", "", "a symbolic link at or above --config whose replacement reloads the rules, as envoyproxy/ratelimit's RUNTIME_ROOT with RUNTIME_WATCH_ROOT")
	fs.BoolVar(&c.health.RequireRules, "health-requires-rules", false, "report gRPC health, /healthcheck and /readyz as not serving while no rule is loaded")
	fs.BoolVar(&c.health.RequireStoreConfig, "health-requires-redis-config", false, "report gRPC health and /healthcheck as not serving while Redis refuses the sidecar's configuration (password, ACL or TLS), as /readyz does; on by default run as ratelimit, whose requests then all fail")
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "answer OK to every request whatever its limits say (descriptor statuses and metrics still say OVER_LIMIT), as envoyproxy/ratelimit's SHADOW_MODE")
	fs.BoolVar(&c.engine.QuotaMode, "quota-mode", false, "count every descriptor as a quota_mode one, which rejects a request only when every quota_mode descriptor of it is over, as envoyproxy/ratelimit's QUOTA_MODE")
	fs.BoolVar(&c.dynamicMetadata, "response-dynamic-metadata", false, "add the request's domain, descriptors and hits, and the metadata of the rules of the descriptors that passed, to each response's dynamic_metadata, as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA")
	fs.StringVar(&c.headerNames, "response-header-names", defaultHeaderNames, "names of the limit, remaining and reset headers of --response-headers=draft03, comma-separated")
	fs.BoolVar(&c.store.redis.TLS.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "check Redis's certificate against the CAs but not its host name")
}

// defineFlagless defines, on a flag set of their own, the settings that
// only envoyproxy/ratelimit's variables set, which have no flag
// (refenv.Applied.Settings): the xDS client's and the tracer's.
func defineFlagless(x *xds.SourceOptions, t *tracing.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.DurationVar(&x.BackoffInitial, refenv.XDSBackoffInitial, xds.DefaultBackoffInitial, "")
	fs.DurationVar(&x.BackoffMax, refenv.XDSBackoffMax, xds.DefaultBackoffMax, "")
	fs.Float64Var(&x.BackoffJitter, refenv.XDSBackoffJitter, xds.DefaultBackoffJitter, "")
	fs.IntVar(&x.MaxMessageBytes, refenv.XDSMaxMessageBytes, 0, "")
	fs.StringVar(&t.ServiceName, refenv.TracingServiceName, "", "")
	fs.StringVar(&t.ServiceNamespace, refenv.TracingServiceNamespace, "", "")
	fs.StringVar(&t.ServiceInstanceID, refenv.TracingServiceInstanceID, "", "")
	return fs
}

// finish checks the parsed flags and derives what they imply.
func (c *settings) finish(getenv func(string) (string, bool)) error {
	c.engine.CalendarMonths = c.rules.config.CalendarMonths
	for _, step := range []func() error{
		c.log.check,
		c.rejections.Check,
		func() (err error) {
			c.counters.Values, err = rejectlog.ParseValues(c.rejections.Values)
			return err
		},
		func() error { return checkNearLimit(c.nearLimitRatio) },
		func() error { return c.store.finishRedis(getenv) },
		c.store.checkMemory,
		func() error { return checkMetricValues(c.metricMaxValues) },
		func() error { return finishGC(&c.gc, c.memoryLimit, getenv) },
		c.bounds.Check,
		c.tls.Check,
		c.rules.xds.Validate,
		func() error { return c.tracing.Check(getenv) },
		func() error { return c.otlp.Check(getenv) },
		func() error { return c.statsd.Check(getenv) },
		func() error { return checkRequestLimits(c.engine.Limits) },
		c.rlqs.Validate,
		c.store.check,
		func() (err error) {
			c.responseNames, err = checkServing(c.metricsPath, c.connGrace, c.headerNames)
			return err
		},
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// checkNearLimit checks --near-limit-ratio.
func checkNearLimit(r float64) error {
	if !(r > 0 && r <= 1) { // NaN too
		return fmt.Errorf("--near-limit-ratio: want a number above 0 and at most 1, got %v", r)
	}
	return nil
}

// checkMetricValues checks --metric-max-values.
func checkMetricValues(n int) error {
	if n < 0 {
		return fmt.Errorf("--metric-max-values: want 0 or more, got %d", n)
	}
	return nil
}

// finishGC checks the collector's flags and reads them into gc
// (memoryLimit is --memory-limit's text), each unless GOGC or
// GOMEMLIMIT gave it.
func finishGC(gc *gctune.Settings, memoryLimit string, getenv func(string) (string, bool)) error {
	if gc.Percent < 1 {
		return fmt.Errorf("--gc-percent: want 1 or more, got %d; set GOGC=off to turn the collector off", gc.Percent)
	}
	var err error
	if gc.Limit, err = gctune.ParseBytes(memoryLimit); err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	if gc.Limit != 0 && gc.Limit < gctune.MinMemoryLimit {
		return fmt.Errorf("--memory-limit: want 0 (none) or 16MiB or more, got %q: below the live heap the collector never stops", memoryLimit)
	}
	_, gogc := getenv("GOGC")
	_, gomemlimit := getenv("GOMEMLIMIT")
	gc.SetPercent, gc.SetLimit = !gogc, !gomemlimit
	return nil
}

// checkRequestLimits reports the first of the request's bounds out of
// range.
func checkRequestLimits(r limits.RequestLimits) error {
	for _, f := range []struct {
		name string
		n    int
	}{
		{"--max-descriptors", r.MaxDescriptors},
		{"--max-entries", r.MaxEntries},
		{"--max-value-bytes", r.MaxValueBytes},
	} {
		if f.n < 1 {
			return fmt.Errorf("%s: want 1 or more, got %d", f.name, f.n)
		}
	}
	if h := r.MaxHits; h < 1 || h > limits.MaxHitsAddend {
		return fmt.Errorf("--max-hits-addend: want 1 to %d (2^52, so that counters in debt stay exact), got %d", uint64(limits.MaxHitsAddend), h)
	}
	return nil
}

// defaultHeaderNames is --response-header-names's default: the draft's
// names, which envoy.HeaderNames's zero value stands for.
const defaultHeaderNames = "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"

// checkServing checks the flags of what the servers serve beside the
// decision: the metrics' path, the connection age's grace and the
// response headers' names, which it returns parsed (zero for the
// default).
func checkServing(metricsPath string, grace time.Duration, headerNames string) (envoy.HeaderNames, error) {
	if !strings.HasPrefix(metricsPath, "/") || strings.ContainsAny(metricsPath, " \t{}") {
		return envoy.HeaderNames{}, fmt.Errorf("--metrics-path: want a path starting with /, without spaces or braces, got %q", metricsPath)
	}
	if grace < 0 {
		return envoy.HeaderNames{}, fmt.Errorf("--grpc-max-connection-age-grace: want 0 or more, got %v", grace)
	}
	names := strings.Split(headerNames, ",")
	if len(names) != 3 {
		return envoy.HeaderNames{}, fmt.Errorf("--response-header-names: want three comma-separated names, got %q", headerNames)
	}
	for _, n := range names {
		if !validHeaderName(n) {
			return envoy.HeaderNames{}, fmt.Errorf("--response-header-names: %q is not a valid header name", n)
		}
	}
	if headerNames == defaultHeaderNames {
		return envoy.HeaderNames{}, nil
	}
	return envoy.HeaderNames{Limit: names[0], Remaining: names[1], Reset: names[2]}, nil
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

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// secret reads a password from a file if one is named, else from the
// environment variable env. Passwords have no flags of their own, so they
// never show in ps.
func secret(getenv func(string) (string, bool), env, flagName, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flagName, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	pw, _ := getenv(env)
	return pw, nil
}
