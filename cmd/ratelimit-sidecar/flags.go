package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/envlog"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/gctune"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// settings is every flag's value.
type settings struct {
	configPath      string
	grpcAddr        string
	httpAddr        string
	adminAddr       string
	logLevel        string
	logFormat       string
	mergeDomains    bool
	calendarMonths  bool
	allowEmptyRules bool
	drainDelay      time.Duration
	shutdownTimeout time.Duration
	request         limits.RequestLimits
	version         bool
	nearLimitRatio  float64
	metricMaxValues int
	responseHeaders envoy.HeaderMode
	reloadDebounce  time.Duration
	overrideKeys    limits.OverrideKeys

	failureMode      limits.FailureMode
	localDivisor     uint64
	denyCacheEntries int
	memoryMaxKeys    int

	redis             redis.Options
	redisURLInArgs    bool // --redis-url is on the command line, for ps to show
	redisHostPort     bool // --redis-url was host:port, taken as redis://host:port: redisurl.go
	redisPasswordFile string
	sentinelPassFile  string
	redisAuth         redisAuthSettings // rediscreds.go
	redisSentinels    string
	redisCluster      string

	bounds serverBounds

	tls tlsSettings // --grpc-tls-*: see tls.go

	rejections   rejectionSettings // --log-rejections*
	counterReset bool              // --admin-counter-reset

	gc          gctune.Settings
	memoryLimit string // --memory-limit's text, for finish to parse

	xds xdsSettings   // --config-type xds: see xds.go
	ref refSettings   // what envoyproxy/ratelimit's deployments rely on: reference.go
	env envlog.Report // where the settings came from: environ.go

	tracing tracingSettings // --tracing*: see tracing.go
	push    pushSettings    // --statsd-*, --otlp-metrics*: see push.go

	rlqs rlqs.Options // --rlqs-*: its BucketTTL, IdleAfter, MaxBuckets and Margin

	// onReady, if set, is called with the listeners' addresses once the
	// servers are about to serve. Tests use it to find ports chosen by :0.
	onReady func(grpcAddr, httpAddr, adminAddr string)
}

// parseFlags parses args, taking a flag's default from the environment
// variable RLS_<FLAG> (upper case, '-' as '_') when it is set.
func parseFlags(args []string, getenv func(string) (string, bool), stderr io.Writer) (*settings, error) {
	return parseFlagsAs("ratelimit-sidecar", args, getenv, nil, stderr)
}

// parseFlagsAs is parseFlags for the program run as argv0 (os.Args[0]),
// in an environment of which getenv reads one variable and environ lists
// all (nil: unknown). Below the RLS_ variables come envoyproxy/ratelimit's
// (refenv.go), and run as "ratelimit" its defaults.
func parseFlagsAs(argv0 string, args []string, getenv func(string) (string, bool), environ []string, _ io.Writer) (*settings, error) {
	c := newSettings()
	fs := flag.NewFlagSet("ratelimit-sidecar", flag.ContinueOnError)
	// A command line that does not parse is one line (flagError), not
	// the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	failure := c.define(fs)
	// The command line is parsed once, first; the variables then set only
	// the flags it left alone, so it wins whatever order they are set in.
	if err := fs.Parse(args); err != nil {
		return nil, flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	inArgs := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { inArgs[f.Name] = true })
	ref, err := applyRefEnv(fs, refenv.IsRefMode(argv0), getenv, explicitFlags(fs, inArgs, getenv))
	if err != nil {
		return nil, err
	}
	if err := c.setFlagless(ref); err != nil {
		return nil, err
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := rlsEnvName(f.Name)
		if v, ok := getenv(name); ok && !inArgs[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	ref.noteRLS(fs, inArgs, getenv)
	c.redisURLInArgs = inArgs["redis-url"]
	if err := c.finish(*failure, getenv); err != nil {
		return nil, ref.explain(err)
	}
	if err := c.ref.check(); err != nil {
		return nil, ref.explain(err)
	}
	ref.finish(c, fs, inArgs, getenv, environ)
	return c, nil
}

// newSettings returns the settings flags are defined on: the defaults a
// flag takes from a field rather than a literal (the request's bounds)
// set, so that parsing and help show the same ones.
func newSettings() *settings {
	return &settings{request: limits.DefaultRequestLimits}
}

// define defines every flag on fs, writing into c. It returns where
// --failure-mode's text goes, for finish to parse.
func (c *settings) define(fs *flag.FlagSet) *string {
	fs.StringVar(&c.configPath, "config", "config/", "rule file or directory of *.yaml/*.yml rule files")
	fs.StringVar(&c.grpcAddr, "grpc-addr", "127.0.0.1:8081", "address for the RLS gRPC service, health and reflection")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "address for /healthz, /readyz and /metrics (and the admin endpoints unless --admin-addr is set)")
	fs.StringVar(&c.adminAddr, "admin-addr", "", "address for POST /json, /debug/config and /debug/counters; empty serves them on --http-addr. Set it to a loopback address when --http-addr must listen on the pod address, since /json spends quota")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&c.rejections.level, "log-rejections", "debug", "`level` of one log line per request answered OVER_LIMIT, saying why (domain, descriptors, rule, limit, key, remaining, reset) and what decided (redis, memory, deny_cache or a failure mode): off, debug (shown only with --log-level debug) or info")
	fs.Float64Var(&c.rejections.rate, "log-rejections-rate", 10, "most rejection lines per second, in bursts of as many; the rest are counted in ratelimit_sidecar_rejection_logs_suppressed_total and in the next line's not_logged")
	fs.StringVar(&c.rejections.values, "log-rejections-values", "hash", "how rejection lines and the counter reset's log line show descriptor values and counter keys, which may be secret: hash (sha256: and 12 hex digits) or plain")
	fs.BoolVar(&c.counterReset, "admin-counter-reset", false, "allow POST /debug/counters/reset on the admin address, which deletes counters from the store")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "let several rule files add to one domain")
	fs.BoolVar(&c.calendarMonths, "calendar-months", false, "count every fixed window of one month that sets no calendar of its own, and every month Envoy sends without an override, as a UTC calendar month, as envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT; without it a month is 30 days from the Unix epoch")
	fs.BoolVar(&c.allowEmptyRules, "allow-empty-rules", false, "start, and accept reloads, with no rule files, answering OK to every request (logged at Warn); without it no rules is a config error")
	fs.DurationVar(&c.drainDelay, "drain-delay", 0, "on SIGTERM, how long to report NOT_SERVING before stopping, so Envoy and Kubernetes stop sending")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight requests may take to finish at shutdown")
	fs.IntVar(&c.request.MaxDescriptors, "max-descriptors", c.request.MaxDescriptors, "most descriptors in one request")
	fs.IntVar(&c.request.MaxEntries, "max-entries", c.request.MaxEntries, "most entries in one descriptor")
	fs.IntVar(&c.request.MaxValueBytes, "max-value-bytes", c.request.MaxValueBytes, "longest domain, entry key or entry value, in bytes")
	fs.Uint64Var(&c.request.MaxHits, "max-hits-addend", c.request.MaxHits, "largest hits_addend accepted")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	fs.Var(&c.responseHeaders, "response-headers", "`mode` of rate-limit headers for Envoy to add to responses: none, draft03 (RateLimit-Limit, -Remaining, -Reset) or ietf (RateLimit-Policy and RateLimit); both add Retry-After when over limit")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", 0.8, "share of a limit past which admitted hits count as near the limit in metrics")
	fs.Var(&c.overrideKeys, "override-keys", "`mode` of the counters of Envoy's per-request limits (descriptor.limit): shared with the rules' fixed windows of the same window, as envoyproxy/ratelimit, or separate, one per override's requests and unit; not for those a rule's override counts (default shared)")
	fs.IntVar(&c.metricMaxValues, "metric-max-values", metrics.DefaultMaxValues, "how many distinct value names each detailed_metric or value_to_metric rule gets series for; later ones share the rule's rule=\"_other.<rule>\" series (0: all do)")
	fs.DurationVar(&c.rlqs.BucketTTL, "rlqs-bucket-ttl", 6*time.Second, "RLQS: the longest time to live of a quota assignment on a token or leaky bucket, in whole seconds; set Envoy's reporting_interval to at most this, and the same on every sidecar (see docs/rlqs.md)")
	fs.DurationVar(&c.rlqs.Margin, "rlqs-margin", time.Second, "RLQS: how long an assignment may take to reach Envoy; a window's grant ends this long before its window, so quota is never spent in the window after it was counted in (lower: shorter denials at window ends, if answers reach Envoy faster)")
	fs.IntVar(&c.rlqs.MaxBuckets, "rlqs-max-buckets", 10_000, "RLQS: most buckets one stream may hold; a bucket past it is answered by its domain's failure mode and not kept")
	fs.DurationVar(&c.rlqs.IdleAfter, "rlqs-idle-after", time.Minute, "RLQS: abandon a bucket that has reported no requests for this long; Envoy subscribes to it again at its next request")
	fs.DurationVar(&c.reloadDebounce, "reload-debounce", 200*time.Millisecond, "how long file changes must settle before rules are reloaded")
	fs.IntVar(&c.gc.Percent, "gc-percent", gctune.DefaultPercent, "the Go garbage collector's GOGC, unless the GOGC environment variable is set")
	fs.StringVar(&c.memoryLimit, "memory-limit", gctune.DefaultMemoryLimit, "the Go runtime's soft memory limit (64MiB, 1GiB, ...; 0: none), unless the GOMEMLIMIT environment variable is set")

	// Bounds on what clients can make the servers hold: see bounds.go.
	fs.UintVar(&c.bounds.grpcMaxStreams, "grpc-max-streams", 100, "most gRPC calls in flight on one connection; the server refuses more, and Envoy opens another connection for them")
	fs.IntVar(&c.bounds.grpcMaxConns, "grpc-max-conns", 64, "most gRPC connections open at once (0: no cap); a new one closes the connection quiet for longest of the peer holding the most. Keep it above Envoy's --concurrency")
	fs.IntVar(&c.bounds.httpMaxConns, "http-max-conns", 128, "most connections open at once on --http-addr, and on --admin-addr (0: no cap); a new one closes the connection quiet for longest of the peer holding the most")
	fs.DurationVar(&c.bounds.requestTimeout, "grpc-request-timeout", 2*time.Second, "how long a gRPC call may take to send its request: a unary call without a sooner deadline of its own is cancelled after this, and so is a streaming call that has sent no message by then; also bounds a new connection's TLS and HTTP/2 handshakes")
	fs.DurationVar(&c.bounds.maxConnAge, "grpc-max-connection-age", 30*time.Minute, "close a gRPC connection after about this long (0: never), with a GOAWAY first and --shutdown-timeout for its calls in flight to finish")
	fs.DurationVar(&c.bounds.idleTimeout, "idle-timeout", time.Minute, "close a gRPC connection with no call in flight, or an HTTP connection with no request, after this long")

	// TLS on the gRPC listener: see tls.go.
	fs.StringVar(&c.tls.cert, "grpc-tls-cert", "", "PEM certificate (chain) of the gRPC listener; with --grpc-tls-key, gRPC is served over TLS only. Read again when it changes")
	fs.StringVar(&c.tls.key, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fs.StringVar(&c.tls.clientCA, "grpc-tls-client-ca", "", "PEM CAs of client certificates: clients must present a certificate one of them signed (mutual TLS). Read again when it changes")
	fs.StringVar(&c.tls.clientSAN, "grpc-tls-client-san", "", "a name the client certificate must hold: a DNS name or IP address, matched as a server's name is, or a URI (spiffe://...) exactly; needs --grpc-tls-client-ca")
	fs.StringVar(&c.tls.minVersion, "grpc-tls-min-version", "1.2", "least TLS version of the gRPC listener: 1.2 or 1.3")
	fs.Float64Var(&c.tls.handshakeRate, "grpc-tls-handshake-rate", 500, "most TLS handshakes the gRPC listener starts a second, in bursts of as many (0: no limit); one that would wait past --grpc-request-timeout for its turn fails")

	failure := "local"
	fs.StringVar(&failure, "failure-mode", failure, "what requests get while Redis cannot decide: open, closed, local or error; rule files may override it per domain")
	fs.Uint64Var(&c.localDivisor, "local-fallback-divisor", 1, "with failure mode local, divide every limit by this (the number of sidecar replicas)")
	fs.IntVar(&c.memoryMaxKeys, "memory-max-keys", memory.DefaultMaxKeys, "most keys a memory store (the store without Redis, and failure mode local's) holds; past it, least recently used keys are evicted, never so as to admit more than a limit (docs/memory-store.md). A key longer than 256 bytes counts once per 256")
	fs.IntVar(&c.denyCacheEntries, "deny-cache-entries", store.DefaultDenyCacheEntries, "with Redis, how many over-limit keys to remember, so that requests that must be over their limit are rejected without a Redis call; 0 turns the cache off")

	fs.StringVar(&c.redis.URL, "redis-url", "", "standalone Redis: redis://[user[:password]@]host:port[/db], or rediss:// for TLS; empty uses the embedded memory store")
	fs.StringVar(&c.redis.SentinelMaster, "redis-sentinel-master", "", "Redis Sentinel: the master's name (with --redis-sentinel-addrs)")
	fs.StringVar(&c.redisSentinels, "redis-sentinel-addrs", "", "Redis Sentinel: comma-separated sentinel host:port list")
	fs.StringVar(&c.redisCluster, "redis-cluster-addrs", "", "Redis Cluster: comma-separated seed host:port list")
	fs.StringVar(&c.redis.Username, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&c.redis.SentinelUsername, "redis-sentinel-username", "", "Redis Sentinel: user name for the sentinels themselves")
	fs.StringVar(&c.sentinelPassFile, "redis-sentinel-password-file", "", "Redis Sentinel: file holding the sentinels' own password, re-read as it changes (or set RLS_REDIS_SENTINEL_PASSWORD)")
	fs.StringVar(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password, re-read as it changes, for new connections (or set RLS_REDIS_PASSWORD; there is no password flag, so it never shows in ps)")
	fs.StringVar(&c.redisAuth.userFile, "redis-username-file", "", "file holding the Redis ACL user name, re-read as it changes (instead of --redis-username)")
	fs.StringVar(&c.redisAuth.sentinelUserFile, "redis-sentinel-username-file", "", "Redis Sentinel: file holding the sentinels' user name, re-read as it changes")
	fs.DurationVar(&c.redis.ConnMaxLifetime, "redis-conn-max-lifetime", 0, redisConnMaxLifetimeHelp)
	fs.StringVar(&c.redisAuth.aws, "redis-aws-iam", "", "authenticate with AWS IAM auth tokens from the AWS SDK's default credential chain: elasticache, elasticache-serverless or memorydb (needs --redis-username and --redis-aws-cache-name)")
	fs.StringVar(&c.redisAuth.awsName, "redis-aws-cache-name", "", "with --redis-aws-iam: the ElastiCache replication group ID or serverless cache name, or the MemoryDB cluster name")
	fs.StringVar(&c.redisAuth.awsRegion, "redis-aws-region", "", "with --redis-aws-iam: the cache's AWS region (default: the SDK's, from AWS_REGION or the profile)")
	fs.BoolVar(&c.redisAuth.gcp, "redis-gcp-iam", false, "authenticate to Memorystore with IAM access tokens of Google's Application Default Credentials (GKE Workload Identity, GOOGLE_APPLICATION_CREDENTIALS, the metadata server)")
	fs.BoolVar(&c.redis.TLS.Enabled, "redis-tls", false, "use TLS to Redis (implied by rediss://)")
	fs.StringVar(&c.redis.TLS.CAFile, "redis-tls-ca", "", "PEM file of CAs for Redis's certificate (default: system roots)")
	fs.StringVar(&c.redis.TLS.CertFile, "redis-tls-cert", "", "PEM client certificate for Redis")
	fs.StringVar(&c.redis.TLS.KeyFile, "redis-tls-key", "", "PEM key of the client certificate")
	fs.IntVar(&c.redis.PoolSize, "redis-pool-size", 0, "connections per Redis node (0: go-redis's default)")
	fs.IntVar(&c.redis.MaxInflight, "redis-max-inflight", redis.DefaultMaxInflight, "request round trips to Redis (on Cluster: to each master) under way at once before requests wait to go together in the next; when Redis is 1 ms or more away the sidecar adds up to 16 more (docs/slow-redis.md)")
	fs.DurationVar(&c.redis.Timeout, "redis-timeout", redis.DefaultTimeout, "bound on each Redis operation; the RPC's own deadline bounds it too")
	fs.StringVar(&c.redis.KeyPrefix, "redis-key-prefix", redis.DefaultKeyPrefix, "prefix of every Redis key")

	// Rules over xDS: see xds.go.
	fs.StringVar(&c.xds.configType, "config-type", "file", "where the rules come from: file (--config) or xds (a management server's RateLimitConfig pushes, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW; see docs/xds.md)")
	fs.StringVar(&c.xds.server, "xds-server", "localhost:18000", "xDS management server, host:port (Envoy Gateway: envoy-gateway:18001)")
	fs.StringVar(&c.xds.nodeID, "xds-node-id", "default", "node ID sent to the xDS server, which picks the node's snapshot by it (Envoy Gateway: envoy-ratelimit)")
	fs.StringVar(&c.xds.nodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS server: key=value,key=value, or a JSON object")
	fs.StringVar(&c.xds.headers, "xds-headers", "", "gRPC headers sent to the xDS server when the stream opens: name:value,name:value")
	fs.BoolVar(&c.xds.tls, "xds-tls", false, "use TLS to the xDS server (implied by the other --xds-tls-* flags)")
	fs.StringVar(&c.xds.tlsCA, "xds-tls-ca", "", "PEM file of CAs for the xDS server's certificate (default: system roots)")
	fs.StringVar(&c.xds.tlsCert, "xds-tls-cert", "", "PEM client certificate for the xDS server (mutual TLS); read again at every reconnect")
	fs.StringVar(&c.xds.tlsKey, "xds-tls-key", "", "PEM key of --xds-tls-cert")
	fs.StringVar(&c.xds.tlsServerName, "xds-tls-server-name", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.StringVar(&c.xds.overlay, "xds-overlay", "", "YAML file that gives pushed rules our algorithms, windows, bursts, leases, extra limits and failure modes, matched by domain and descriptor path or limit name; reread when it changes (see docs/xds.md)")
	fs.Var(&c.xds.sources, "xds-source", "one more xDS server to take rules from, beside --xds-server or the rule files: name=NAME,server=HOST:PORT,node-id=ID[,force-start=true,tls-ca=FILE,tls-cert=FILE,tls-key=FILE,tls-server-name=NAME]; repeat it, or separate several with ';'. A domain belongs to the first source that holds it; another's rules for it are refused (see docs/xds.md#several-rule-sources)")
	fs.BoolVar(&c.xds.forceStart, "force-start-without-rules", false, "with --config-type xds or --xds-source, be ready before the first push, with no rules until it arrives (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG); without it, health and /readyz report not serving until the first good push")
	c.tracing.define(fs)
	c.push.define(fs)
	c.defineRef(fs)
	return &failure
}

// finish checks the parsed flags and derives what they imply.
func (c *settings) finish(failure string, getenv func(string) (string, bool)) error {
	for _, step := range []func() error{
		func() error { return c.finishLogs(failure) },
		func() error { return c.finishRedisAddrs(getenv) },
		func() error { return c.finishMemory(getenv) },
		c.bounds.check,
		c.tls.check,
		c.xds.finish,
		func() error { return c.tracing.check(getenv) },
		func() error { return c.push.check(getenv) },
		c.checkRequestLimits,
		c.rlqs.Validate,
		c.checkRedis,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// finishLogs checks the log's flags and reads the failure mode.
func (c *settings) finishLogs(failure string) error {
	var err error
	switch c.logFormat {
	case "json", "console":
	default:
		return fmt.Errorf("--log-format: want json or console, got %q", c.logFormat)
	}
	if c.failureMode, err = limits.ParseFailureMode(failure); err != nil {
		return fmt.Errorf("--failure-mode: %w", err)
	}
	if err := c.rejections.check(); err != nil {
		return err
	}
	if !(c.nearLimitRatio > 0 && c.nearLimitRatio <= 1) { // NaN too
		return fmt.Errorf("--near-limit-ratio: want a number above 0 and at most 1, got %v", c.nearLimitRatio)
	}
	return nil
}

// finishRedisAddrs reads Redis's URL, its address lists and its
// passwords.
func (c *settings) finishRedisAddrs(getenv func(string) (string, bool)) error {
	var err error
	if c.redis.URL, c.redisHostPort, err = redisURL(c.redis.URL); err != nil {
		return err
	}
	c.redis.SentinelAddrs = splitList(c.redisSentinels)
	c.redis.ClusterAddrs = splitList(c.redisCluster)
	if c.redis.Password, err = secret(getenv, "RLS_REDIS_PASSWORD", "--redis-password-file", c.redisPasswordFile); err != nil {
		return err
	}
	c.redis.SentinelPassword, err = secret(getenv, "RLS_REDIS_SENTINEL_PASSWORD", "--redis-sentinel-password-file", c.sentinelPassFile)
	return err
}

// finishMemory checks what bounds the process's memory, and reads the
// collector's settings unless GOGC and GOMEMLIMIT gave them.
func (c *settings) finishMemory(getenv func(string) (string, bool)) error {
	var err error
	switch {
	case c.memoryMaxKeys < 1:
		return fmt.Errorf("--memory-max-keys: want 1 or more, got %d", c.memoryMaxKeys)
	case c.metricMaxValues < 0:
		return fmt.Errorf("--metric-max-values: want 0 or more, got %d", c.metricMaxValues)
	case c.denyCacheEntries < 0:
		return fmt.Errorf("--deny-cache-entries: want 0 (off) or more, got %d", c.denyCacheEntries)
	case c.gc.Percent < 1:
		return fmt.Errorf("--gc-percent: want 1 or more, got %d; set GOGC=off to turn the collector off", c.gc.Percent)
	}
	if c.gc.Limit, err = gctune.ParseBytes(c.memoryLimit); err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	if c.gc.Limit != 0 && c.gc.Limit < gctune.MinMemoryLimit {
		return fmt.Errorf("--memory-limit: want 0 (none) or 16MiB or more, got %q: below the live heap the collector never stops", c.memoryLimit)
	}
	_, gogc := getenv("GOGC")
	_, gomemlimit := getenv("GOMEMLIMIT")
	c.gc.SetPercent, c.gc.SetLimit = !gogc, !gomemlimit
	return nil
}

// checkRedis checks the Redis flags: a flag that names only part of a
// topology is a mistake to report now, not a reason to run on the
// memory store.
func (c *settings) checkRedis() error {
	if c.redis.PoolSize < 0 || c.redis.PoolSize > maxRedisPoolSize {
		return fmt.Errorf("--redis-pool-size: want 0 (go-redis's default) to %d connections per Redis node, got %d", maxRedisPoolSize, c.redis.PoolSize)
	}
	if c.redis.Timeout != 0 && c.redis.Timeout < time.Millisecond {
		return fmt.Errorf("--redis-timeout: want 1ms or more, got %v", c.redis.Timeout)
	}
	if err := c.checkRedisAuth(); err != nil {
		return err
	}
	if c.redis.Configured() {
		if err := c.redis.Validate(); err != nil {
			return fmt.Errorf("redis flags (--redis-url, --redis-sentinel-master and --redis-sentinel-addrs, or --redis-cluster-addrs): %w", err)
		}
	}
	return nil
}

// checkRequestLimits reports the first of the request's bounds out of
// range.
func (c *settings) checkRequestLimits() error {
	for _, f := range []struct {
		name string
		n    int
	}{
		{"--max-descriptors", c.request.MaxDescriptors},
		{"--max-entries", c.request.MaxEntries},
		{"--max-value-bytes", c.request.MaxValueBytes},
	} {
		if f.n < 1 {
			return fmt.Errorf("%s: want 1 or more, got %d", f.name, f.n)
		}
	}
	if h := c.request.MaxHits; h < 1 || h > limits.MaxHitsAddend {
		return fmt.Errorf("--max-hits-addend: want 1 to %d (2^52, so that counters in debt stay exact), got %d", uint64(limits.MaxHitsAddend), h)
	}
	return nil
}

// maxRedisPoolSize is the most connections --redis-pool-size asks for
// per Redis node: a tenth of Redis's default maxclients, so that ten
// sidecars at it fill no node. Requests are pipelined, so a handful of
// connections carries the load of thousands.
const maxRedisPoolSize = 1000

// inArgs reports whether args, which parse, set the flag name. The flag
// set cannot tell: the environment's values are set on it too.

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
