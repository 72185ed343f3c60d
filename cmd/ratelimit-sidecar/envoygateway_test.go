package main

import (
	"context"
	"crypto/tls"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// egEnv is the environment Envoy Gateway gives its rate-limit container,
// which it starts as /bin/ratelimit with no flags: its
// internal/infrastructure/kubernetes/ratelimit/resource.go with a Redis
// backend and Prometheus on (its default), tracing off, as in its
// testdata/deployments/default.yaml. Its certificates are the Secret
// envoy-rate-limit mounted at /certs: ca.crt, tls.crt and tls.key.
var egEnv = map[string]string{
	"RUNTIME_ROOT":                       "/data",
	"RUNTIME_SUBDIRECTORY":               "ratelimit",
	"RUNTIME_IGNOREDOTFILES":             "true",
	"RUNTIME_WATCH_ROOT":                 "false",
	"LOG_LEVEL":                          "info",
	"USE_STATSD":                         "false",
	"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
	"CONFIG_GRPC_XDS_SERVER_URL":         "envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
	"GRPC_SERVER_USE_TLS":                "true",
	"GRPC_SERVER_TLS_CERT":               "/certs/tls.crt",
	"GRPC_SERVER_TLS_KEY":                "/certs/tls.key",
	"GRPC_SERVER_TLS_CA_CERT":            "/certs/ca.crt", // read by Envoy Gateway's chart, never by the reference
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    "/certs/tls.crt",
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  "/certs/ca.crt",
	"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"REDIS_SOCKET_TYPE":                  "tcp",
	"REDIS_URL":                          "redis.redis.svc:6379",
	"USE_PROMETHEUS":                     "true",
	"PROMETHEUS_ADDR":                    ":19001",
	"PROMETHEUS_MAPPER_YAML":             "/etc/statsd-exporter/conf.yaml",
}

// egPodEnv is egEnv in this test's world: the Secret envoy-rate-limit
// (one certificate, for the gRPC listener and for the xDS client, and
// the CA) signed by ca and mounted as the kubelet mounts it, the other
// paths under temporary directories, the xDS server and Redis at their
// loopback addresses, and every listener, which the reference defaults
// to 0.0.0.0 and fixed ports (PROMETHEUS_ADDR :19001 too), on a free
// loopback port; and REDIS_TIMEOUT (see below). Nothing else changes:
// each replaced value must be found, and the names stay.
func egPodEnv(t *testing.T, ca *certtest.CA, xdsAddr, redisAddr string) map[string]string {
	t.Helper()
	certs := t.TempDir()
	certtest.NewSecretDir(t, certs, ca.Issue(t, "envoy-ratelimit").Secret(t, ca))
	replace := map[string]string{
		"/certs/ca.crt":                  filepath.Join(certs, "ca.crt"),
		"/certs/tls.crt":                 filepath.Join(certs, "tls.crt"),
		"/certs/tls.key":                 filepath.Join(certs, "tls.key"),
		"/data":                          t.TempDir(),
		"envoy-gateway:18001":            xdsAddr,
		"redis.redis.svc:6379":           redisAddr,
		":19001":                         "127.0.0.1:0",
		"/etc/statsd-exporter/conf.yaml": filepath.Join(t.TempDir(), "conf.yaml"),
	}
	env := maps.Clone(egEnv)
	used := map[string]bool{}
	for k, v := range env {
		if r, ok := replace[v]; ok {
			env[k], used[v] = r, true
		}
	}
	for v := range replace {
		if !used[v] {
			t.Fatalf("%q is not in Envoy Gateway's environment", v)
		}
	}
	for _, name := range []string{"HOST", "GRPC_HOST", "DEBUG_HOST"} {
		env[name] = "127.0.0.1"
	}
	for _, name := range []string{"PORT", "GRPC_PORT", "DEBUG_PORT"} {
		env[name] = "0"
	}
	// The one setting that is not a place: our Redis timeout defaults to
	// 15 ms, within Envoy's 20 ms deadline, and a test's Redis call on a
	// busy machine (make test runs under -race) can take longer. The
	// reference's own default is 10 s.
	env["REDIS_TIMEOUT"] = "5s"
	return env
}

// dialRLS connects to the RLS service and health at addr over TLS with
// cfg.
func dialRLS(t *testing.T, addr string, cfg *tls.Config) (rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

// healthErr is the error of a health check of the service ratelimit.
func healthErr(h healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	return err
}

// TestEnvoyGateway starts the sidecar as Envoy Gateway starts
// envoyproxy/ratelimit, with its environment and nothing else, against
// go-control-plane's own xDS server and snapshot cache over mutual TLS (as
// Envoy Gateway serves the rules) and a real Redis. The rules arrive and
// decide on Redis; an update applies, counters kept; the push of no
// resources Envoy Gateway sends when the last rate-limited route goes is
// ACKed, as the reference ACKs it; a bad push is NACKed, naming the
// resource, the field and the reason, while the rules in use decide; the
// health name ratelimit, /healthcheck and the metrics on PROMETHEUS_ADDR
// (the reference's names and the xDS state among them) are served, and
// the start log warns of serving before the first push. gRPC is served
// over TLS, to a client without a certificate too (Envoy Gateway's
// GRPC_SERVER_TLS_CA_CERT is not the reference's GRPC_CLIENT_TLS_CACERT),
// and plaintext is refused.
func TestEnvoyGateway(t *testing.T) {
	ca := certtest.NewCA(t, t.TempDir(), "ca")
	xsrv := xdstest.Start(t, xdstest.WithTLS(ca.ServerConfig(t, ca.Issue(t, "envoy-gateway"), true)))
	rsrv := redistest.StartServer(t)
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: egPodEnv(t, ca, xsrv.Addr, rsrv.Addr)})
	if err := healthErr(s.health); status.Code(err) != codes.Unavailable {
		t.Errorf("health over plaintext: %v, want Unavailable", err)
	}
	s.rls, s.health = dialRLS(t, s.grpcAddr, ca.ClientConfig(t, nil))

	log := s.log.String()
	if !strings.Contains(log, `"store":"redis"`) || !strings.Contains(log, `"config_type":"xds"`) {
		t.Errorf("start log does not say the store is Redis and the rules come over xDS:\n%s", log)
	}
	if !strings.Contains(log, "serving before the xDS server has delivered rules") {
		t.Errorf("start log does not warn of serving without rules:\n%s", log)
	}
	if strings.Contains(log, "GRPC_SERVER_TLS_CA_CERT") {
		t.Errorf("the log names GRPC_SERVER_TLS_CA_CERT, which the reference never reads:\n%s", log)
	}
	for _, name := range []string{"CONFIG_TYPE", "CONFIG_GRPC_XDS", "FORCE_START"} {
		if w := warnLine(log); strings.Contains(w, name) {
			t.Errorf("the start warning names %s:\n%s", name, w)
		}
	}

	// FORCE_START_WITHOUT_INITIAL_CONFIG: serving before the first push,
	// with no rules.
	if st := healthOf(t, s.health, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit before the first push: %v", st)
	}
	if status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck before the first push: %d %q", status, body)
	}
	if got := code(t, s.rls, userRequest("alice", 1)); got != rlsOK {
		t.Errorf("alice with no rules yet: %v, want OK", got)
	}
	first, _ := xsrv.Await(t, 0, "from node envoy-ratelimit", func(r xdstest.Request) bool { return r.GetNode().GetId() == "envoy-ratelimit" })
	if got := first.GetTypeUrl(); got != "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig" {
		t.Errorf("the stream asks for %q", got)
	}

	// The rules arrive and decide, on Redis.
	xsrv.Set(t, "envoy-ratelimit", "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_MINUTE))
	_, n := xsrv.Await(t, 0, "ACKing version 1", isACK("1"))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
		if got := code(t, s.rls, userRequest("alice", 1)); got != want {
			t.Fatalf("alice's hit %d under 2 a minute: %v, want %v", i+1, got, want)
		}
	}

	// An update applies; the counters stay: alice has 2 of 4 left.
	xsrv.Set(t, "envoy-ratelimit", "2", xdstest.RateLimitConfig("edge", "user", 4, rlsconf.RateLimitUnit_MINUTE))
	_, n = xsrv.Await(t, n, "ACKing version 2", isACK("2"))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
		if got := code(t, s.rls, userRequest("alice", 1)); got != want {
			t.Fatalf("alice's hit %d after the update to 4 a minute: %v, want %v", i+1, got, want)
		}
	}

	// The last rate-limited route goes: Envoy Gateway pushes no resource.
	xsrv.Set(t, "envoy-ratelimit", "3")
	r, n := xsrv.Await(t, n, "answering version 3", func(r xdstest.Request) bool { return r.NACK() || r.GetVersionInfo() == "3" })
	if r.NACK() {
		t.Errorf("the push of no resources is NACKed: %s", r.GetErrorDetail().GetMessage())
	}
	if got := code(t, s.rls, userRequest("alice", 1)); got != rlsOK {
		t.Errorf("alice with no rules: %v, want OK", got)
	}

	xsrv.Set(t, "envoy-ratelimit", "4", xdstest.RateLimitConfig("edge", "user", 1, rlsconf.RateLimitUnit_MINUTE))
	_, n = xsrv.Await(t, n, "ACKing version 4", isACK("4"))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOver} {
		if got := code(t, s.rls, userRequest("bob", 1)); got != want {
			t.Fatalf("bob's hit %d under 1 a minute: %v, want %v", i+1, got, want)
		}
	}

	// A bad push: NACKed with the resource, the field's path and the
	// reason; the rules in use keep deciding.
	xsrv.Set(t, "envoy-ratelimit", "5", xdstest.RateLimitConfig("edge", "user", 5, 42))
	nack, _ := xsrv.Await(t, n, "NACKing version 5", func(r xdstest.Request) bool { return r.NACK() })
	if msg, want := nack.GetErrorDetail().GetMessage(), `RateLimitConfig "edge": descriptors[0].rate_limit.unit: unknown unit "42"`; !strings.HasPrefix(msg, want) {
		t.Errorf("error_detail %q, want it to start %q", msg, want)
	}
	if got := code(t, s.rls, userRequest("bob", 1)); got != rlsOver {
		t.Errorf("bob after the bad push: %v, want OVER_LIMIT (the rules in use, counters kept)", got)
	}
	if got := code(t, s.rls, userRequest("carol", 1)); got != rlsOK {
		t.Errorf("carol after the bad push: %v, want OK", got)
	}

	// The reference's surface: health name, /healthcheck on PORT,
	// Prometheus on PROMETHEUS_ADDR with the reference's names too.
	if st := healthOf(t, s.health, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit: %v", st)
	}
	if status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck: %d %q", status, body)
	}
	if s.metricsAddr == "" || s.metricsAddr == s.httpAddr {
		t.Fatalf("metrics listener %q, want one of their own (PORT is %s)", s.metricsAddr, s.httpAddr)
	}
	status, body := httpDo(t, "GET", s.metricsAddr, "/metrics", "")
	if status != http.StatusOK {
		t.Fatalf("/metrics on PROMETHEUS_ADDR: %d", status)
	}
	for _, want := range []string{
		"ratelimit_sidecar_config_last_reload_successful 0\n",
		`ratelimit_sidecar_config_reloads_total{result="failure"} 1` + "\n",
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="user",key2=""}`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="user",key2=""}`,
		"ratelimit_service_config_load_error 1\n",
		"ratelimit_sidecar_xds_connected 1\n",
		"ratelimit_sidecar_xds_rules_received 1\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics on PROMETHEUS_ADDR lacks %s", want)
		}
	}
}

// warnLine is the start warning of the reference's settings not
// honoured, or "".
func warnLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "envoyproxy/ratelimit settings not honoured") {
			return l
		}
	}
	return ""
}
