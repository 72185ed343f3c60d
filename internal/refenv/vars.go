package refenv

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
