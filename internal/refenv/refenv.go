// Package refenv reads the environment of envoyproxy/ratelimit (the
// reference) onto the sidecar's flags: each of its variables is mapped
// onto a flag (with its meaning translated where ours differs) or onto
// one of the few settings without a flag (Applied.Settings), honoured as
// it is, or refused with a reason. Standard library only.
package refenv

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The environment of envoyproxy/ratelimit (the reference), which Envoy
// Gateway's rate-limit deployment and Istio's sample start it with, and no
// flags. Each of the reference's variables is mapped onto our flags (with
// its meaning translated where ours differs), honoured as it is, or
// refused with a reason, named in one warning at start.
//
// Precedence, for each of our flags: the command line, then its RLS_
// variable, then the reference's variables, then the default. Run as
// Name (the reference image's /bin/ratelimit), the default is the
// reference's, for the settings whose default describes the deployment
// (listeners, rule files, Redis, ...); run under any other name, ours.

// Name is the name the reference's image runs it as: /bin/ratelimit.
const Name = "ratelimit"

// refKind is how the reference parses a variable (with envconfig).
type refKind uint8

const (
	refString   refKind = iota
	refBool             // strconv.ParseBool
	refInt              // strconv.ParseInt, base 0
	refFloat            // strconv.ParseFloat
	refDuration         // time.ParseDuration
)

// refVar is one of the reference's variables and its default.
type refVar struct {
	def  string
	kind refKind
}

// refVars is every variable the reference's settings read (its
// src/settings/settings.go), with the reference's default. A name not in
// it is not the reference's: Envoy Gateway sets some of those
// (GRPC_SERVER_TLS_CA_CERT, OTEL_EXPORTER_OTLP_ENDPOINT), which the
// reference's settings never read, and neither do ours; the OTLP
// exporter reads OTEL_EXPORTER_OTLP_* itself once tracing is on.
var refVars = map[string]refVar{
	"HOST":                          {"0.0.0.0", refString},
	"PORT":                          {"8080", refInt},
	"DEBUG_HOST":                    {"0.0.0.0", refString},
	"DEBUG_PORT":                    {"6070", refInt},
	"GRPC_UDS":                      {"", refString},
	"GRPC_HOST":                     {"0.0.0.0", refString},
	"GRPC_PORT":                     {"8081", refInt},
	"GRPC_MAX_CONNECTION_AGE":       {"24h", refDuration},
	"GRPC_MAX_CONNECTION_AGE_GRACE": {"1h", refDuration},
	"GRPC_SERVER_USE_TLS":           {"false", refBool},
	"GRPC_SERVER_TLS_CERT":          {"", refString},
	"GRPC_SERVER_TLS_KEY":           {"", refString},
	"GRPC_CLIENT_TLS_CACERT":        {"", refString},
	"GRPC_CLIENT_TLS_SAN":           {"", refString},

	"LOG_LEVEL":  {"WARN", refString},
	"LOG_FORMAT": {"text", refString},

	"CONFIG_TYPE":                                   {"FILE", refString},
	"FORCE_START_WITHOUT_INITIAL_CONFIG":            {"false", refBool},
	"CONFIG_GRPC_XDS_NODE_ID":                       {"default", refString},
	"CONFIG_GRPC_XDS_NODE_METADATA":                 {"", refString},
	"CONFIG_GRPC_XDS_SERVER_URL":                    {"localhost:18000", refString},
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": {"3s", refDuration},
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS":     {"", refString},
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":                {"false", refBool},
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":               {"", refString},
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":                {"", refString},
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":             {"", refString},
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN":                {"", refString},
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           {"10s", refDuration},
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               {"60s", refDuration},
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":              {"0.5", refFloat},
	"XDS_CLIENT_BACKOFF_JITTER":                     {"true", refBool},
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":              {"", refInt},

	"USE_DOG_STATSD":            {"false", refBool},
	"USE_DOG_STATSD_MOGRIFIERS": {"", refString},
	"USE_STATSD":                {"true", refBool},
	"STATSD_HOST":               {"localhost", refString},
	"STATSD_PORT":               {"8125", refInt},
	"EXTRA_TAGS":                {"", refString},
	"STATS_FLUSH_INTERVAL":      {"10s", refDuration},
	"DISABLE_STATS":             {"false", refBool},
	"USE_PROMETHEUS":            {"false", refBool},
	"PROMETHEUS_ADDR":           {":9090", refString},
	"PROMETHEUS_PATH":           {"/metrics", refString},
	"PROMETHEUS_MAPPER_YAML":    {"", refString},
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": {"false", refBool},

	"RUNTIME_ROOT":           {"/srv/runtime_data/current", refString},
	"RUNTIME_SUBDIRECTORY":   {"", refString},
	"RUNTIME_APPDIRECTORY":   {"config", refString},
	"RUNTIME_IGNOREDOTFILES": {"false", refBool},
	"RUNTIME_WATCH_ROOT":     {"true", refBool},

	"EXPIRATION_JITTER_MAX_SECONDS":           {"300", refInt},
	"LOCAL_CACHE_SIZE_IN_BYTES":               {"0", refInt},
	"NEAR_LIMIT_RATIO":                        {"0.8", refFloat},
	"CACHE_KEY_PREFIX":                        {"", refString},
	"BACKEND_TYPE":                            {"redis", refString},
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": {"false", refBool},

	"LIMIT_RESPONSE_HEADERS_ENABLED": {"false", refBool},
	"LIMIT_LIMIT_HEADER":             {"RateLimit-Limit", refString},
	"LIMIT_REMAINING_HEADER":         {"RateLimit-Remaining", refString},
	"LIMIT_RESET_HEADER":             {"RateLimit-Reset", refString},

	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": {"false", refBool},

	"REDIS_SOCKET_TYPE":                            {"unix", refString},
	"REDIS_TYPE":                                   {"SINGLE", refString},
	"REDIS_URL":                                    {"/var/run/nutcracker/ratelimit.sock", refString},
	"REDIS_POOL_SIZE":                              {"10", refInt},
	"REDIS_AUTH":                                   {"", refString},
	"REDIS_TLS":                                    {"false", refBool},
	"REDIS_TLS_CLIENT_CERT":                        {"", refString},
	"REDIS_TLS_CLIENT_KEY":                         {"", refString},
	"REDIS_TLS_CACERT":                             {"", refString},
	"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION":         {"false", refBool},
	"REDIS_PIPELINE_WINDOW":                        {"0", refDuration},
	"REDIS_PIPELINE_LIMIT":                         {"0", refInt},
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           {"1", refInt},
	"REDIS_PERSECOND":                              {"false", refBool},
	"REDIS_PERSECOND_SOCKET_TYPE":                  {"unix", refString},
	"REDIS_PERSECOND_TYPE":                         {"SINGLE", refString},
	"REDIS_PERSECOND_URL":                          {"/var/run/nutcracker/ratelimitpersecond.sock", refString},
	"REDIS_PERSECOND_POOL_SIZE":                    {"10", refInt},
	"REDIS_PERSECOND_AUTH":                         {"", refString},
	"REDIS_PERSECOND_TLS":                          {"false", refBool},
	"REDIS_SENTINEL_AUTH":                          {"", refString},
	"REDIS_PERSECOND_SENTINEL_AUTH":                {"", refString},
	"REDIS_PERSECOND_PIPELINE_WINDOW":              {"0", refDuration},
	"REDIS_PERSECOND_PIPELINE_LIMIT":               {"0", refInt},
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": {"1", refInt},
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":         {"false", refBool},
	"REDIS_TIMEOUT":                                {"10s", refDuration},
	"REDIS_PERSECOND_TIMEOUT":                      {"10s", refDuration},
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 {"WAIT", refString},
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       {"WAIT", refString},
	"REDIS_STARTUP_INITIAL_INTERVAL":               {"1s", refDuration},
	"REDIS_STARTUP_MAX_INTERVAL":                   {"30s", refDuration},
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               {"0", refDuration},

	"MEMCACHE_HOST_PORT":                      {"", refString},
	"MEMCACHE_MAX_IDLE_CONNS":                 {"2", refInt},
	"MEMCACHE_SRV":                            {"", refString},
	"MEMCACHE_SRV_REFRESH":                    {"0", refDuration},
	"MEMCACHE_TLS":                            {"false", refBool},
	"MEMCACHE_TLS_CLIENT_CERT":                {"", refString},
	"MEMCACHE_TLS_CLIENT_KEY":                 {"", refString},
	"MEMCACHE_TLS_CACERT":                     {"", refString},
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": {"false", refBool},

	"SHADOW_MODE":               {"false", refBool},
	"QUOTA_MODE":                {"false", refBool},
	"RESPONSE_DYNAMIC_METADATA": {"false", refBool},
	"MERGE_DOMAIN_CONFIG":       {"false", refBool},

	"USE_CALENDAR_MONTH_RATE_LIMIT": {"false", refBool},

	"TRACING_ENABLED":             {"false", refBool},
	"TRACING_SERVICE_NAME":        {"RateLimit", refString},
	"TRACING_SERVICE_NAMESPACE":   {"", refString},
	"TRACING_SERVICE_INSTANCE_ID": {"", refString},
	"TRACING_EXPORTER_PROTOCOL":   {"http", refString},
	"TRACING_SAMPLING_RATE":       {"1", refFloat},
}

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
	// Stats pushed to statsd or DogStatsD (push.go, internal/statsd);
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

// refOut collects what a mapping sets.
type refOut struct {
	flags            []refFlag
	password         *string
	sentinelPassword *string
}

type refFlag struct{ name, value string }

func (o *refOut) set(name, value string) { o.flags = append(o.flags, refFlag{name, value}) }

// refValues reads the reference's variables with their defaults.
type refValues struct {
	getenv  func(string) (string, bool)
	refMode bool
	errs    []error
}

func (v *refValues) isSet(name string) bool {
	_, ok := v.getenv(name)
	return ok
}

// str is the variable's value, or the reference's default if it is unset.
func (v *refValues) str(name string) string {
	if s, ok := v.getenv(name); ok {
		return s
	}
	return refVars[name].def
}

func (v *refValues) fail(name, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
}

func (v *refValues) boolean(name string) bool {
	b, err := strconv.ParseBool(v.str(name))
	if err != nil {
		v.fail(name, "want true or false, got %q", v.str(name))
	}
	return b
}

func (v *refValues) boolText(name string) string { return strconv.FormatBool(v.boolean(name)) }

func (v *refValues) integer(name string) int64 {
	n, err := strconv.ParseInt(v.str(name), 0, 64)
	if err != nil {
		v.fail(name, "want an integer, got %q", v.str(name))
	}
	return n
}

func (v *refValues) float(name string) float64 {
	f, err := strconv.ParseFloat(v.str(name), 64)
	if err != nil {
		v.fail(name, "want a number, got %q", v.str(name))
	}
	return f
}

func (v *refValues) duration(name string) time.Duration {
	d, err := time.ParseDuration(v.str(name))
	if err != nil {
		v.fail(name, "want a duration such as 10s or 1h30m, got %q", v.str(name))
	}
	return d
}

// hostPort joins a host and a port variable into an address.
func (v *refValues) hostPort(host, port string) string {
	p := v.integer(port)
	if p < 0 || p > 65535 {
		v.fail(port, "want a port from 0 to 65535, got %d", p)
	}
	return net.JoinHostPort(v.str(host), strconv.FormatInt(p, 10))
}

// nonDefault reports whether name is set to a value other than the
// reference's default, comparing as the reference parses it; a value it
// could not parse is not the default.
func (v *refValues) nonDefault(name string) bool {
	s, ok := v.getenv(name)
	if !ok {
		return false
	}
	rv := refVars[name]
	if s == rv.def {
		return false
	}
	switch rv.kind {
	case refBool:
		a, err1 := strconv.ParseBool(s)
		b, err2 := strconv.ParseBool(rv.def)
		return err1 != nil || err2 != nil || a != b
	case refInt:
		a, err1 := strconv.ParseInt(s, 0, 64)
		b, err2 := strconv.ParseInt(rv.def, 0, 64)
		return err1 != nil || err2 != nil || a != b
	case refFloat:
		a, err1 := strconv.ParseFloat(s, 64)
		b, err2 := strconv.ParseFloat(rv.def, 64)
		return err1 != nil || err2 != nil || a != b
	case refDuration:
		a, err1 := time.ParseDuration(s)
		b, err2 := time.ParseDuration(rv.def)
		return err1 != nil || err2 != nil || a != b
	}
	return true
}

func (v *refValues) anySetNonDefault(names ...string) bool {
	return slices.ContainsFunc(names, v.nonDefault)
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

// mapRedis maps the reference's Redis topology. REDIS_URL is host:port
// (or a socket's path) for a single Redis, master-name,host:port,... for
// Sentinel, and host:port,... for Cluster.
func mapRedis(v *refValues, out *refOut) {
	switch b := v.str("BACKEND_TYPE"); strings.ToLower(b) {
	case "redis", "":
	case "memcache":
		return // refused: the memory store decides, with a warning
	default:
		v.fail("BACKEND_TYPE", "want redis or memcache, got %q", b)
		return
	}
	url := strings.TrimSpace(v.str("REDIS_URL"))
	if url == "" {
		v.fail("REDIS_URL", "empty")
		return
	}
	switch t := v.str("REDIS_TYPE"); strings.ToLower(t) {
	case "single":
		out.set("redis-url", singleRedisURL(v, url))
	case "sentinel":
		parts := addrList(url)
		if len(parts) < 2 {
			v.fail("REDIS_URL", "with REDIS_TYPE=%s, want <master name>,<sentinel host:port>,..., got %q", t, url)
			return
		}
		out.set("redis-sentinel-master", parts[0])
		out.set("redis-sentinel-addrs", strings.Join(plainAddrs(v, parts[1:]), ","))
	case "cluster":
		out.set("redis-cluster-addrs", strings.Join(plainAddrs(v, addrList(url)), ","))
	default:
		v.fail("REDIS_TYPE", "want SINGLE, SENTINEL or CLUSTER, got %q", t)
	}
}

// singleRedisURL turns a single Redis's REDIS_URL into our URL. The
// reference dials REDIS_URL with REDIS_SOCKET_TYPE as the network, and
// defaults to unix; when REDIS_SOCKET_TYPE is not set, a URL that is not
// a path is taken to be host:port over TCP, since that is what it names.
func singleRedisURL(v *refValues, url string) string {
	for _, scheme := range []string{"redis://", "rediss://", "unix://"} {
		if strings.HasPrefix(url, scheme) {
			return url
		}
	}
	sock := v.str("REDIS_SOCKET_TYPE")
	if !v.isSet("REDIS_SOCKET_TYPE") && !strings.HasPrefix(url, "/") {
		sock = "tcp"
	}
	switch strings.ToLower(sock) {
	case "tcp":
		return "redis://" + url
	case "unix":
		return "unix://" + url
	}
	v.fail("REDIS_SOCKET_TYPE", "want tcp or unix, got %q", sock)
	return ""
}

// plainAddrs checks Sentinel and Cluster addresses, which must be
// host:port.
func plainAddrs(v *refValues, addrs []string) []string {
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			v.fail("REDIS_URL", "want host:port addresses, got %q", a)
		}
	}
	return addrs
}

// splitAuth splits the reference's REDIS_AUTH: user:password, or a
// password alone.
func splitAuth(auth string) (user, password string) {
	if u, pw, ok := strings.Cut(auth, ":"); ok {
		return u, pw
	}
	return "", auth
}

// mapRedisTLS maps TLS to Redis. Without REDIS_TLS the reference uses none
// of the files, and neither do we.
func mapRedisTLS(v *refValues, out *refOut) {
	if !v.boolean("REDIS_TLS") {
		out.set("redis-tls", "false")
		return
	}
	out.set("redis-tls", "true")
	for _, f := range []struct{ env, flag string }{
		{"REDIS_TLS_CACERT", "redis-tls-ca"},
		{"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"},
		{"REDIS_TLS_CLIENT_KEY", "redis-tls-key"},
	} {
		if s := v.str(f.env); s != "" {
			out.set(f.flag, s)
		}
	}
	out.set("redis-tls-skip-hostname-verification", v.boolText("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"))
}

// refXDS reports whether the reference's variables take the rules from
// an xDS server.
func refXDS(v *refValues) bool { return v.str("CONFIG_TYPE") == "GRPC_XDS_SOTW" }

// mapConfigType maps CONFIG_TYPE, which the reference compares exactly.
// GRPC_XDS_SOTW allows a push of no resources too: the reference ACKs
// one and runs without rules, and Envoy Gateway sends one whenever the
// last rate-limited route goes, a state it means, which a NACK would
// report as a failed reload for as long as it lasts.
func mapConfigType(v *refValues, out *refOut) {
	switch t := v.str("CONFIG_TYPE"); t {
	case "FILE":
		out.set("config-type", "file")
	case "GRPC_XDS_SOTW":
		out.set("config-type", "xds")
		out.set("allow-empty-rules", "true")
	default:
		v.fail("CONFIG_TYPE", "want FILE or GRPC_XDS_SOTW, got %q", t)
	}
}

// mapNodeMetadata maps the reference's node metadata: entries split at
// commas, each a key and a string value split at its first '=', nothing
// trimmed. The reference skips an entry without '=', which would send
// the server less than was written: that is an error here, but for an
// empty entry (a trailing comma). It is passed on as a JSON object, so
// that --xds-node-metadata reads it exactly.
func mapNodeMetadata(v *refValues, out *refOut) {
	s := v.str("CONFIG_GRPC_XDS_NODE_METADATA")
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			v.fail("CONFIG_GRPC_XDS_NODE_METADATA", "want key=value entries, got %q", kv)
			return
		}
		m[k] = val
	}
	b, _ := json.Marshal(m) // strings always marshal
	out.set("xds-node-metadata", string(b))
}

// mapXDSTLS maps TLS to the xDS server. Without
// CONFIG_GRPC_XDS_SERVER_USE_TLS the reference dials in plaintext and
// reads none of the files, and neither do we.
func mapXDSTLS(v *refValues, out *refOut) {
	if !v.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		out.set("xds-tls", "false")
		return
	}
	out.set("xds-tls", "true")
	for _, f := range []struct{ env, flag string }{
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-server-name"},
	} {
		if s := v.str(f.env); s != "" {
			out.set(f.flag, s)
		}
	}
}

// mapXDSBackoff maps the reference's reconnect waits (jpillora/backoff):
// the initial interval multiplied by XDS_CLIENT_BACKOFF_RANDOM_FACTOR, a
// growth factor whatever its name says, at each failure, up to the
// longest, and with XDS_CLIENT_BACKOFF_JITTER each drawn between the
// initial interval and that. A factor of 1 or less never grows a wait,
// so with the reference's default, 0.5, every wait is the initial one:
// --xds-backoff-max is then the initial wait. Ours double otherwise (a
// factor other than 2 is named in the start warning), and spread by
// ±--xds-backoff-jitter unless XDS_CLIENT_BACKOFF_JITTER is false. Run as
// Name, the reference's defaults apply when its rules come over xDS.
func mapXDSBackoff(v *refValues, out *refOut) {
	if !refXDS(v) && !slices.ContainsFunc([]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"}, v.isSet) {
		return
	}
	initial := v.duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")
	longest := v.duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL")
	factor := v.float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")
	if math.IsNaN(factor) || math.IsInf(factor, 0) {
		v.fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "want a finite number, got %q", v.str("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"))
		return
	}
	jitter := v.boolean("XDS_CLIENT_BACKOFF_JITTER")
	// jpillora/backoff's own defaults for values of 0 or less.
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if longest <= 0 {
		longest = 10 * time.Second
	}
	if factor <= 0 {
		factor = 2
	}
	switch {
	case initial >= longest:
		initial = longest
	case factor <= 1:
		longest = initial
	}
	out.set("xds-backoff-initial", initial.String())
	out.set("xds-backoff-max", longest.String())
	if !jitter {
		out.set("xds-backoff-jitter", "0")
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

// mapStatsd maps the reference's stats sinks. As its runner chooses:
// nothing with DISABLE_STATS, else DogStatsD over UDP with
// USE_DOG_STATSD, else statsd over TCP (its statsd client's) with
// USE_STATSD, true by default. The reference refuses to start with both,
// or either beside USE_PROMETHEUS; here Prometheus is served anyway, and
// DogStatsD wins over statsd as in its runner's order.
func mapStatsd(v *refValues, out *refOut) {
	dog := v.boolean("USE_DOG_STATSD")
	if v.boolean("DISABLE_STATS") || !(dog || v.boolean("USE_STATSD")) {
		// Only with a variable set: run as Name with nothing set, the
		// default is USE_STATSD's.
		out.set("statsd-addr", "")
		return
	}
	port := v.integer("STATSD_PORT")
	if port < 1 || port > 65535 {
		v.fail("STATSD_PORT", "want a port from 1 to 65535, got %d", port)
		return
	}
	out.set("statsd-addr", net.JoinHostPort(v.str("STATSD_HOST"), strconv.FormatInt(port, 10)))
	interval := v.duration("STATS_FLUSH_INTERVAL")
	if interval <= 0 {
		v.fail("STATS_FLUSH_INTERVAL", "want more than 0, got %s", interval)
		return
	}
	out.set("statsd-flush-interval", interval.String())
	tags, ok := extraTags(v)
	if !ok {
		return
	}
	out.set("statsd-tags", tags)
	if !dog {
		out.set("statsd-protocol", "tcp")
		out.set("statsd-format", "statsd")
		return
	}
	out.set("statsd-protocol", "udp")
	out.set("statsd-format", "dogstatsd")
	if m, ok := mogrifiers(v); ok {
		out.set("statsd-mogrifiers", m)
	}
}

// extraTags turns EXTRA_TAGS, key:value,key:value as the reference's
// settings parse a map, into --statsd-tags.
func extraTags(v *refValues) (string, bool) {
	var tags []string
	for _, kv := range strings.Split(v.str("EXTRA_TAGS"), ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, ":")
		if !ok {
			v.fail("EXTRA_TAGS", "want key:value entries, got %q", kv)
			return "", false
		}
		tags = append(tags, k+"="+val)
	}
	return strings.Join(tags, ","), true
}

// mogrifierPrefix starts the variables of each of the reference's
// DogStatsD mogrifiers named in USE_DOG_STATSD_MOGRIFIERS:
// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS.
const mogrifierPrefix = "DOG_STATSD_MOGRIFIER_"

// mogrifiers turns the reference's mogrifiers into --statsd-mogrifiers,
// in the order USE_DOG_STATSD_MOGRIFIERS names them, with the checks the
// reference makes at start.
func mogrifiers(v *refValues) (string, bool) {
	type mogrifier struct {
		Pattern string            `json:"pattern"`
		Name    string            `json:"name"`
		Tags    map[string]string `json:"tags,omitempty"`
	}
	var list []mogrifier
	for _, name := range strings.Split(v.str("USE_DOG_STATSD_MOGRIFIERS"), ",") {
		if name == "" {
			continue
		}
		prefix := mogrifierPrefix + strings.ToUpper(name) + "_"
		m := mogrifier{Tags: map[string]string{}}
		m.Pattern, _ = v.getenv(prefix + "PATTERN")
		m.Name, _ = v.getenv(prefix + "NAME")
		if m.Pattern == "" || m.Name == "" {
			v.fail("USE_DOG_STATSD_MOGRIFIERS", "mogrifier %s: needs %sPATTERN and %sNAME", name, prefix, prefix)
			return "", false
		}
		if _, err := regexp.Compile(m.Pattern); err != nil {
			v.fail(prefix+"PATTERN", "%v", err)
			return "", false
		}
		tags, _ := v.getenv(prefix + "TAGS")
		for _, kv := range strings.Split(tags, ",") {
			if kv == "" {
				continue
			}
			k, val, ok := strings.Cut(kv, ":")
			if !ok || k == "" || val == "" {
				v.fail(prefix+"TAGS", "want key:value entries, got %q", kv)
				return "", false
			}
			m.Tags[k] = val
		}
		list = append(list, m)
	}
	if len(list) == 0 {
		return "", false
	}
	b, _ := json.Marshal(list) // strings always marshal
	return string(b), true
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

// mapTracing maps the reference's OTLP tracing. Its protocol is only
// set when TRACING_EXPORTER_PROTOCOL is, so that without it
// OTEL_EXPORTER_OTLP_PROTOCOL may choose (http by default either way). The
// reference samples every trace at a rate of 1 or more and none at 0 or
// less, where --tracing-sampling-rate refuses such rates.
func mapTracing(v *refValues, out *refOut) {
	out.set("tracing", v.boolText("TRACING_ENABLED"))
	if v.isSet("TRACING_EXPORTER_PROTOCOL") {
		switch p := v.str("TRACING_EXPORTER_PROTOCOL"); p {
		case "http", "":
			out.set("tracing-protocol", "http")
		case "grpc":
			out.set("tracing-protocol", "grpc")
		default:
			v.fail("TRACING_EXPORTER_PROTOCOL", "want http or grpc, got %q", p)
		}
	}
	out.set("tracing-service-name", v.str("TRACING_SERVICE_NAME"))
	out.set("tracing-service-namespace", v.str("TRACING_SERVICE_NAMESPACE"))
	out.set("tracing-service-instance-id", v.str("TRACING_SERVICE_INSTANCE_ID"))
	rate := min(max(v.float("TRACING_SAMPLING_RATE"), 0), 1)
	out.set("tracing-sampling-rate", strconv.FormatFloat(rate, 'g', -1, 64))
}

// IsRefMode reports whether a program run as argv0 (os.Args[0]) runs in
// the reference's place.
func IsRefMode(argv0 string) bool { return filepath.Base(argv0) == Name }

// Applied is what the reference's variables did to a flag set.
type Applied struct {
	// ByFlag names, for each flag the variables set, the variables (or
	// the reference's defaults) it came from.
	ByFlag map[string]string
	// ByDefault holds the flags that the reference's defaults alone set,
	// run as Name.
	ByDefault map[string]bool
	// Password and SentinelPassword are the Redis passwords the variables
	// give, nil if none; PasswordFrom and SentinelPasswordFrom name the
	// variables.
	Password, SentinelPassword         *string
	PasswordFrom, SentinelPasswordFrom string
	// Refused lists the reference's settings in use that are not
	// honoured, each with the reason.
	Refused []string
	// Settings holds the values of the settings that the variables set
	// and that have no flag of their own, by name: the reference's
	// tuning (XDS_CLIENT_BACKOFF_*, XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES,
	// TRACING_SERVICE_*) has no use beside our flags and the standard
	// OTEL_* variables, so it is honoured without one.
	Settings map[string]string
}

// Settings without a flag, which Applied.Settings may hold.
const (
	XDSBackoffInitial        = "xds-backoff-initial"
	XDSBackoffMax            = "xds-backoff-max"
	XDSBackoffJitter         = "xds-backoff-jitter"
	XDSMaxMessageBytes       = "xds-max-message-bytes"
	TracingServiceName       = "tracing-service-name"
	TracingServiceNamespace  = "tracing-service-namespace"
	TracingServiceInstanceID = "tracing-service-instance-id"
)

// flagless are the settings without a flag.
var flagless = map[string]bool{
	XDSBackoffInitial: true, XDSBackoffMax: true, XDSBackoffJitter: true, XDSMaxMessageBytes: true,
	TracingServiceName: true, TracingServiceNamespace: true, TracingServiceInstanceID: true,
}

// Apply sets fs's flags from the reference's variables, except those
// in explicit (set by the command line or an RLS_ variable). Invalid
// values are reported all at once, each naming its variable.
func Apply(fs *flag.FlagSet, refMode bool, getenv func(string) (string, bool), explicit map[string]bool) (*Applied, error) {
	v := &refValues{getenv: getenv, refMode: refMode}
	a := &Applied{ByFlag: map[string]string{}, ByDefault: map[string]bool{}, Settings: map[string]string{}}
	for _, m := range refMappings {
		var set []string
		for _, name := range m.vars {
			if v.isSet(name) {
				set = append(set, name)
			}
		}
		if len(set) == 0 && !(refMode && m.defaults) {
			continue
		}
		if m.whole && slices.ContainsFunc(m.flags, func(f string) bool { return explicit[f] }) {
			continue
		}
		var out refOut
		nerrs := len(v.errs)
		m.apply(v, &out)
		if len(v.errs) > nerrs {
			continue
		}
		from := strings.Join(set, ", ")
		switch {
		case len(m.vars) == 0:
			from = "envoyproxy/ratelimit's behaviour (run as " + Name + ")"
		case len(set) == 0:
			from = "the defaults of " + strings.Join(m.vars, ", ") + " (run as " + Name + ")"
		}
		for _, f := range out.flags {
			if explicit[f.name] {
				continue
			}
			if flagless[f.name] {
				a.Settings[f.name] = f.value
			} else if err := fs.Set(f.name, f.value); err != nil {
				v.errs = append(v.errs, fmt.Errorf("%s (as --%s=%s): %w", strings.Join(m.vars, ", "), f.name, f.value, err))
				continue
			}
			a.ByFlag[f.name] = from
			a.ByDefault[f.name] = len(set) == 0
		}
		if out.password != nil {
			a.Password, a.PasswordFrom = out.password, from
		}
		if out.sentinelPassword != nil {
			a.SentinelPassword, a.SentinelPasswordFrom = out.sentinelPassword, from
		}
	}
	for _, r := range refRefusals {
		var on bool
		if r.active != nil {
			on = r.active(v)
		} else {
			on = v.anySetNonDefault(r.vars...)
		}
		if !on {
			continue
		}
		names := slices.DeleteFunc(slices.Clone(r.vars), func(n string) bool { return !v.nonDefault(n) })
		if len(names) == 0 {
			names = slices.DeleteFunc(slices.Clone(r.vars), func(n string) bool { return !v.isSet(n) })
		}
		if len(names) == 0 {
			names = []string{r.vars[0] + " (its default, run as " + Name + ")"}
		}
		a.Refused = append(a.Refused, strings.Join(names, ", ")+": "+r.reason)
	}
	return a, errors.Join(v.errs...)
}

// addrList splits a comma-separated list of addresses, dropping empty
// entries and the spaces around each.
func addrList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return slices.DeleteFunc(parts, func(p string) bool { return p == "" })
}
