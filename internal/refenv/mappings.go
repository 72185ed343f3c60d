package refenv

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// refMapping turns some of the reference's variables into values of our
// flags. Each flag it sets is left alone when the command line or the
// flag's RLS_ variable sets it, unless whole is set: then the mapping is
// left out altogether if any of its flags is set so (a Redis topology
// must come from one place, and RUNTIME_ROOT's link means nothing for a
// --config given otherwise).
type refMapping struct {
	vars  []string // the variables it reads
	flags []string // the flags it may set
	whole bool
	// defaults applies the mapping, run as Name, when none of vars is
	// set: the reference's default then describes the deployment.
	defaults bool
	apply    func(v *refValues, out *refOut)
}

// refGRPCMaxConns is --grpc-max-conns run as Name: the gRPC
// connections of a central service, which each worker of each Envoy
// holds one of, as the Helm chart sets it. Each connection holding 100
// half-open streams costs about 0.8 MiB (docs/bounds.md).
const refGRPCMaxConns = 256

// refMappings are the variables that map onto our flags. The variables of
// refRefusals that no mapping reads are honoured for their values that do
// not make the refusal active (RUNTIME_IGNOREDOTFILES=true, ...), since
// those ask for what the sidecar does.
var refMappings = []refMapping{
	{vars: []string{"HOST", "PORT"}, flags: []string{"http-addr"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("http-addr", v.hostPort("HOST", "PORT")) }},
	{vars: []string{"GRPC_HOST", "GRPC_PORT"}, flags: []string{"grpc-addr"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("grpc-addr", v.hostPort("GRPC_HOST", "GRPC_PORT")) }},
	{vars: []string{"GRPC_UDS"}, flags: []string{"grpc-uds"},
		apply: func(v *refValues, out *refOut) { out.set("grpc-uds", v.str("GRPC_UDS")) }},
	{vars: []string{"DEBUG_HOST", "DEBUG_PORT"}, flags: []string{"debug-addr"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("debug-addr", v.hostPort("DEBUG_HOST", "DEBUG_PORT")) }},
	{vars: []string{"GRPC_MAX_CONNECTION_AGE"}, flags: []string{"grpc-max-connection-age"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("grpc-max-connection-age", v.duration("GRPC_MAX_CONNECTION_AGE").String())
		}},
	{vars: []string{"GRPC_MAX_CONNECTION_AGE_GRACE"}, flags: []string{"grpc-max-connection-age-grace"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("grpc-max-connection-age-grace", v.duration("GRPC_MAX_CONNECTION_AGE_GRACE").String())
		}},
	// The reference's log defaults (WARN, text) are not applied: the
	// start log, at Info, says where each setting came from.
	{vars: []string{"LOG_LEVEL"}, flags: []string{"log-level"}, apply: mapLogLevel},
	{vars: []string{"LOG_FORMAT"}, flags: []string{"log-format"},
		apply: func(v *refValues, out *refOut) {
			// The reference logs JSON for "json" in any case, text for
			// anything else.
			if strings.EqualFold(v.str("LOG_FORMAT"), "json") {
				out.set("log-format", "json")
			} else {
				out.set("log-format", "console")
			}
		}},
	{vars: []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT"},
		flags: []string{"config", "watch-link"}, whole: true, defaults: true, apply: mapRuntime},
	{vars: []string{"MERGE_DOMAIN_CONFIG"}, flags: []string{"merge-domains"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("merge-domains", v.boolText("MERGE_DOMAIN_CONFIG")) }},
	// The reference's PR #1206: month limits in UTC calendar months.
	{vars: []string{"USE_CALENDAR_MONTH_RATE_LIMIT"}, flags: []string{"calendar-months"},
		apply: func(v *refValues, out *refOut) {
			out.set("calendar-months", v.boolText("USE_CALENDAR_MONTH_RATE_LIMIT"))
		}},
	{vars: []string{"BACKEND_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL"},
		flags: []string{"redis-url", "redis-sentinel-master", "redis-sentinel-addrs", "redis-cluster-addrs"},
		whole: true, defaults: true, apply: mapRedis},
	{vars: []string{"REDIS_AUTH"}, flags: []string{"redis-username"},
		apply: func(v *refValues, out *refOut) {
			user, pw := splitAuth(v.str("REDIS_AUTH"))
			if user != "" {
				out.set("redis-username", user)
			}
			out.password = &pw
		}},
	{vars: []string{"REDIS_SENTINEL_AUTH"}, flags: []string{"redis-sentinel-username"},
		apply: func(v *refValues, out *refOut) {
			user, pw := splitAuth(v.str("REDIS_SENTINEL_AUTH"))
			if user != "" {
				out.set("redis-sentinel-username", user)
			}
			out.sentinelPassword = &pw
		}},
	{vars: []string{"REDIS_TLS", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"},
		flags: []string{"redis-tls", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-tls-skip-hostname-verification"},
		apply: mapRedisTLS},
	{vars: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"},
		flags: []string{"grpc-tls-cert", "grpc-tls-key", "grpc-tls-client-ca", "grpc-tls-client-san"},
		apply: mapGRPCTLS},
	{vars: []string{"REDIS_POOL_SIZE"}, flags: []string{"redis-pool-size"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("redis-pool-size", strconv.FormatInt(v.integer("REDIS_POOL_SIZE"), 10))
		}},
	// The reference's 10 s default is not applied: a Redis call must fit
	// in Envoy's own deadline (20 ms by default).
	{vars: []string{"REDIS_TIMEOUT"}, flags: []string{"redis-timeout"},
		apply: func(v *refValues, out *refOut) { out.set("redis-timeout", v.duration("REDIS_TIMEOUT").String()) }},
	// The reference's empty default is not applied: our keys differ from
	// its keys anyway, and a prefix of our own keeps them apart from its.
	{vars: []string{"CACHE_KEY_PREFIX"}, flags: []string{"redis-key-prefix"},
		apply: func(v *refValues, out *refOut) {
			if p := v.str("CACHE_KEY_PREFIX"); p != "" {
				out.set("redis-key-prefix", p)
			}
		}},
	{vars: []string{"LOCAL_CACHE_SIZE_IN_BYTES"}, flags: []string{"deny-cache-entries"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("deny-cache-entries", strconv.FormatInt(denyCacheEntriesFor(v, "LOCAL_CACHE_SIZE_IN_BYTES"), 10))
		}},
	{vars: []string{"NEAR_LIMIT_RATIO"}, flags: []string{"near-limit-ratio"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("near-limit-ratio", strconv.FormatFloat(v.float("NEAR_LIMIT_RATIO"), 'g', -1, 64))
		}},
	{vars: []string{"SHADOW_MODE"}, flags: []string{"shadow-mode"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("shadow-mode", v.boolText("SHADOW_MODE")) }},
	{vars: []string{"QUOTA_MODE"}, flags: []string{"quota-mode"}, defaults: true,
		apply: func(v *refValues, out *refOut) { out.set("quota-mode", v.boolText("QUOTA_MODE")) }},
	{vars: []string{"RESPONSE_DYNAMIC_METADATA"}, flags: []string{"response-dynamic-metadata"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("response-dynamic-metadata", v.boolText("RESPONSE_DYNAMIC_METADATA"))
		}},
	{vars: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"},
		flags: []string{"response-headers", "response-header-names"}, defaults: true, apply: mapHeaders},
	{vars: []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, flags: []string{"health-requires-rules"}, defaults: true,
		apply: func(v *refValues, out *refOut) {
			out.set("health-requires-rules", v.boolText("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"))
		}},
	{vars: []string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"}, flags: []string{"metrics-addr", "metrics-path", "reference-metrics"},
		apply: func(v *refValues, out *refOut) {
			// Without USE_PROMETHEUS the reference serves no Prometheus
			// metrics; ours stay on --http-addr. With it, its names are
			// served too, for the dashboards built on them.
			if v.boolean("USE_PROMETHEUS") {
				out.set("metrics-addr", v.str("PROMETHEUS_ADDR"))
				out.set("metrics-path", v.str("PROMETHEUS_PATH"))
				out.set("reference-metrics", "true")
			}
		}},
	// Stats pushed to statsd or DogStatsD (internal/statsd);
	// Prometheus metrics are served either way.
	{vars: []string{"USE_STATSD", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS",
		"STATS_FLUSH_INTERVAL", "DISABLE_STATS"},
		flags:    []string{"statsd-addr", "statsd-protocol", "statsd-format", "statsd-tags", "statsd-mogrifiers", "statsd-flush-interval"},
		defaults: true, apply: mapStatsd},
	{vars: []string{"TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
		"TRACING_SERVICE_INSTANCE_ID", "TRACING_SAMPLING_RATE"},
		flags: []string{"tracing", "tracing-protocol", "tracing-service-name", "tracing-service-namespace",
			"tracing-service-instance-id", "tracing-sampling-rate"}, defaults: true, apply: mapTracing},
	// No variable: the reference fails a request it cannot decide (a
	// Redis error is a gRPC error, and Envoy's failure_mode_deny decides),
	// which is our failure mode error.
	{flags: []string{"failure-mode"}, defaults: true,
		apply: func(_ *refValues, out *refOut) { out.set("failure-mode", "error") }},
	// No variable: with failure mode error every request fails while
	// Redis refuses the configuration (a wrong REDIS_AUTH, an ACL, TLS),
	// which Envoy then lets through; /healthcheck, the probe Envoy
	// Gateway's deployment uses, and gRPC health say so, as /readyz does.
	// The reference does not start at all with a wrong password.
	{flags: []string{"health-requires-redis-config"}, defaults: true,
		apply: func(_ *refValues, out *refOut) { out.set("health-requires-redis-config", "true") }},
	// No variable: the reference caps no connections, and run as a
	// central service every worker of every Envoy connects to it (Envoy
	// Gateway: each Envoy pod's workers). Our default, 64, is for one
	// Envoy beside the sidecar.
	{flags: []string{"grpc-max-conns"}, defaults: true,
		apply: func(_ *refValues, out *refOut) { out.set("grpc-max-conns", strconv.Itoa(refGRPCMaxConns)) }},
	// No variable: the reference bounds a request only by gRPC's message
	// size. Envoy Gateway sends one descriptor per matching rule of a
	// policy, up to its 128 rules, each with an entry per header match
	// (up to 16 per selector, 8 selectors) besides its generic keys: a
	// drop-in must not refuse them, where our defaults (64 and 32) would.
	{flags: []string{"max-descriptors", "max-entries"}, defaults: true,
		apply: func(_ *refValues, out *refOut) {
			out.set("max-descriptors", "128")
			out.set("max-entries", "160")
		}},
	// Rules over xDS (xds.go, docs/xds.md).
	{vars: []string{"CONFIG_TYPE"}, flags: []string{"config-type", "allow-empty-rules"}, apply: mapConfigType},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_URL"}, flags: []string{"xds-server"},
		apply: func(v *refValues, out *refOut) { out.set("xds-server", v.str("CONFIG_GRPC_XDS_SERVER_URL")) }},
	{vars: []string{"CONFIG_GRPC_XDS_NODE_ID"}, flags: []string{"xds-node-id"},
		apply: func(v *refValues, out *refOut) { out.set("xds-node-id", v.str("CONFIG_GRPC_XDS_NODE_ID")) }},
	{vars: []string{"CONFIG_GRPC_XDS_NODE_METADATA"}, flags: []string{"xds-node-metadata"}, apply: mapNodeMetadata},
	{vars: []string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}, flags: []string{"xds-headers"},
		apply: func(v *refValues, out *refOut) {
			out.set("xds-headers", v.str("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"))
		}},
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"},
		flags: []string{"xds-tls", "xds-tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-server-name"}, apply: mapXDSTLS},
	{vars: []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
		"XDS_CLIENT_BACKOFF_JITTER"},
		flags: []string{"xds-backoff-initial", "xds-backoff-max", "xds-backoff-jitter"}, defaults: true, apply: mapXDSBackoff},
	{vars: []string{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}, flags: []string{"xds-max-message-bytes"},
		apply: func(v *refValues, out *refOut) {
			// envconfig leaves an int at 0 for an empty value.
			if v.str("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") == "" {
				return
			}
			n := v.integer("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
			if n < 0 {
				v.fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "want 0 or more bytes, got %d", n)
				return
			}
			out.set("xds-max-message-bytes", strconv.FormatInt(n, 10))
		}},
	// With rule files the reference reads them at start whether or not
	// it waits for them, and so do we: the setting means something over
	// xDS only.
	{vars: []string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}, flags: []string{"force-start-without-rules"},
		apply: func(v *refValues, out *refOut) {
			if force := v.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG"); refXDS(v) {
				out.set("force-start-without-rules", strconv.FormatBool(force))
			}
		}},
	// The reference passes it to a gRPC retry interceptor that it gives
	// no retry count, and so never retries: it changes nothing there
	// either. The value is checked.
	{vars: []string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"},
		apply: func(v *refValues, _ *refOut) { v.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") }},
}

func mapLogLevel(v *refValues, out *refOut) {
	// The reference parses logrus levels, in any case.
	switch l := strings.ToLower(v.str("LOG_LEVEL")); l {
	case "trace", "debug":
		out.set("log-level", "debug")
	case "warning", "warn":
		out.set("log-level", "warn")
	case "info", "error", "fatal", "panic":
		out.set("log-level", l)
	default:
		v.fail("LOG_LEVEL", "want trace, debug, info, warn, error, fatal or panic, got %q", v.str("LOG_LEVEL"))
	}
}

// mapRuntime maps the reference's rule directory, RUNTIME_ROOT/
// RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (both with RUNTIME_WATCH_ROOT
// and without, it reads the files there). With RUNTIME_WATCH_ROOT the
// reference reloads when RUNTIME_ROOT, a symbolic link, is replaced:
// --watch-link does that; the config directory is watched either way.
func mapRuntime(v *refValues, out *refOut) {
	root := v.str("RUNTIME_ROOT")
	out.set("config", filepath.Join(root, v.str("RUNTIME_SUBDIRECTORY"), v.str("RUNTIME_APPDIRECTORY")))
	if v.boolean("RUNTIME_WATCH_ROOT") {
		out.set("watch-link", filepath.Clean(root))
	} else {
		out.set("watch-link", "")
	}
}

// mapGRPCTLS maps the reference's TLS on its gRPC listener. As there, the
// files count only with GRPC_SERVER_USE_TLS, which needs the certificate
// and key, and the client SAN only with a client CA: without one no client
// certificate is asked for, so there is no SAN to check.
func mapGRPCTLS(v *refValues, out *refOut) {
	if !v.boolean("GRPC_SERVER_USE_TLS") {
		return
	}
	cert, key := v.str("GRPC_SERVER_TLS_CERT"), v.str("GRPC_SERVER_TLS_KEY")
	if cert == "" && key == "" {
		v.fail("GRPC_SERVER_USE_TLS", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		return
	}
	out.set("grpc-tls-cert", cert)
	out.set("grpc-tls-key", key)
	if ca := v.str("GRPC_CLIENT_TLS_CACERT"); ca != "" {
		out.set("grpc-tls-client-ca", ca)
		out.set("grpc-tls-client-san", v.str("GRPC_CLIENT_TLS_SAN"))
	}
}

// DenyEntryBytes is what one deny-cache entry is taken to cost, to turn
// the reference's LOCAL_CACHE_SIZE_IN_BYTES (the size of its cache of
// over-limit keys) into --deny-cache-entries. Measured with Go's heap
// statistics over 60000 entries: 177 bytes an entry with 40-byte keys,
// 215 with 80-byte keys; 256 keeps the cache within the reference's
// budget for keys up to about 120 bytes.
const DenyEntryBytes = 256

func denyCacheEntriesFor(v *refValues, name string) int64 {
	n := v.integer(name)
	switch {
	case n < 0:
		v.fail(name, "want 0 or more bytes, got %d", n)
		return 0
	case n == 0:
		return 0
	}
	return max(1, n/DenyEntryBytes)
}

func mapHeaders(v *refValues, out *refOut) {
	if v.boolean("LIMIT_RESPONSE_HEADERS_ENABLED") {
		out.set("response-headers", "draft03")
	} else {
		out.set("response-headers", "none")
	}
	if v.anySetNonDefault("LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER") {
		out.set("response-header-names", v.str("LIMIT_LIMIT_HEADER")+","+v.str("LIMIT_REMAINING_HEADER")+","+v.str("LIMIT_RESET_HEADER"))
	}
}

// Flags returns the flags that the reference's variables may set, sorted,
// without the settings that have no flag: a caller checks that it
// defines each of them.
func Flags() []string {
	var out []string
	for _, m := range refMappings {
		for _, f := range m.flags {
			if !flagless[f] && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out
}
