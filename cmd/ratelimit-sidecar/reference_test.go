package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// httpDo sends a request to addr and returns the status and body.
func httpDo(t *testing.T, method, addr, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func healthOf(t *testing.T, h healthpb.HealthClient, name string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
	if err != nil {
		t.Fatalf("health %q: %v", name, err)
	}
	return r.Status
}

func code(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

const (
	rlsOK   = rlsv3.RateLimitResponse_OK
	rlsOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// istioRules is the rule file of Istio's sample, with a limit per minute.
func istioRules(perMinute int) string {
	return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", perMinute)
}

// istioEnv is the environment of Istio's sample
// (samples/ratelimit/rate-limit-service.yaml), with loopback addresses
// and free ports.
func istioEnv(root, redisAddr string) map[string]string {
	return map[string]string{
		"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisAddr, "USE_STATSD": "false",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
}

// TestIstioSample starts two replicas as Istio's sample starts the
// reference: /bin/ratelimit, its environment, no flags, the rules a
// ConfigMap mounted at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. They
// enforce the rules on the shared Redis, and a ConfigMap update (the
// kubelet's ..data symlink swap) applies to both.
func TestIstioSample(t *testing.T) {
	srv := redistest.StartServer(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	swapConfigMap(t, dir, "01", map[string]string{"config.yaml": istioRules(1)})
	env := istioEnv(root, srv.Addr)
	a := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: env, args: []string{"--reload-debounce=50ms"}})
	b := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: env, args: []string{"--reload-debounce=50ms"}})

	if !strings.Contains(a.log.String(), `"store":"redis"`) {
		t.Errorf("start log does not say the store is Redis:\n%s", a.log)
	}
	if got := code(t, a.rls, userRequest("alice", 0)); got != rlsOK {
		t.Errorf("first request on a: %v, want OK", got)
	}
	if got := code(t, b.rls, userRequest("alice", 0)); got != rlsOver {
		t.Errorf("second request, on b: %v, want OVER_LIMIT: the replicas must share Redis", got)
	}

	// The reference's surface.
	for _, s := range []*sidecar{a, b} {
		if st := healthOf(t, s.health, "ratelimit"); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health of ratelimit: %v", st)
		}
		if status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK || body != "OK" {
			t.Errorf("/healthcheck on PORT: %d %q", status, body)
		}
		if status, body := httpDo(t, "GET", s.debugAddr, "/rlconfig", ""); status != http.StatusOK ||
			body != "edge.user: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n" {
			t.Errorf("/rlconfig on DEBUG_PORT: %d %q", status, body)
		}
	}
	status, body := httpDo(t, "POST", a.httpAddr, "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`)
	if status != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("POST /json on PORT: %d %s", status, body)
	}

	// The ConfigMap changes: 3 a minute. Counters are kept, so alice has
	// 2 left (/json's request was rejected and took nothing).
	swapConfigMap(t, dir, "02", map[string]string{"config.yaml": istioRules(3)})
	for _, s := range []*sidecar{a, b} {
		waitFor(t, func() bool {
			_, body := httpDo(t, "GET", s.debugAddr, "/rlconfig", "")
			return strings.Contains(body, "requests_per_unit=3")
		})
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsOK, rlsOK, rlsOver} {
		s := []*sidecar{a, b}[i%2]
		if got := code(t, s.rls, userRequest("alice", 0)); got != want {
			t.Errorf("after the swap, request %d: %v, want %v", i, got, want)
		}
	}
}

// TestHealthWiring is the end-to-end case of the health verdict
// (internal/admin specifies it): run as the reference with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED and no rule files, gRPC health
// is NOT_SERVING for every name and /healthcheck 500 until a reload
// brings rules; then SERVING and 200 until SIGTERM, after which
// /healthcheck is 500 while the sidecar drains and health NOT_SERVING.
func TestHealthWiring(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: refModeEnv(dir, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
		args: []string{"--redis-url=", "--reload-debounce=50ms", "--drain-delay=3s"}})
	if status, _ := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusInternalServerError {
		t.Errorf("/healthcheck without rules: %d, want 500", status)
	}
	for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
		if st := healthOf(t, s.health, name); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("gRPC health of %q without rules: %v", name, st)
		}
	}
	writeAll(t, filepath.Join(dir, "config", "rules.yaml"), istioRules(5))
	awaitRefHealth(t, s, healthpb.HealthCheckResponse_SERVING)
	if status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck with rules: %d %q", status, body)
	}

	s.cancel() // as SIGTERM does
	waitFor(t, func() bool {
		status, _ := httpDo(t, "GET", s.httpAddr, "/healthcheck", "")
		return status == http.StatusInternalServerError
	})
	awaitRefHealth(t, s, healthpb.HealthCheckResponse_NOT_SERVING)
}

// TestGRPCUDS: GRPC_UDS serves gRPC on a Unix socket instead of TCP, and
// removes it at exit (internal/bounds's ListenUnix specifies the socket).
func TestGRPCUDS(t *testing.T) {
	dir, err := os.MkdirTemp("", "uds") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "rl.sock")
	writeAll(t, filepath.Join(dir, "config", "rules.yaml"), istioRules(1))
	env := map[string]string{"GRPC_UDS": sock, "RUNTIME_ROOT": dir, "RUNTIME_WATCH_ROOT": "false", "HOST": "127.0.0.1", "PORT": "0"}
	s := startSidecar(t, sidecarOpts{argv0: "ratelimit-sidecar", env: env, args: []string{"--redis-url="}})
	if s.grpcAddr != sock {
		t.Errorf("gRPC listens on %q, want %q", s.grpcAddr, sock)
	}
	if got := code(t, s.rls, userRequest("alice", 0)); got != rlsOK {
		t.Errorf("over the socket: %v", got)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after exit: %v", err)
	}
}

// TestPrometheusAddr: USE_PROMETHEUS with PROMETHEUS_ADDR and
// PROMETHEUS_PATH serves the metrics there, as Envoy Gateway scrapes
// them, and not on PORT.
func TestPrometheusAddr(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "config", "rules.yaml"), istioRules(1))
	env := refModeEnv(dir, "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", "127.0.0.1:0", "PROMETHEUS_PATH", "/stats/prometheus")
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: env, args: []string{"--redis-url="}})
	if s.metricsAddr == "" {
		t.Fatal("no metrics listener")
	}
	if status, body := httpDo(t, "GET", s.metricsAddr, "/stats/prometheus", ""); status != http.StatusOK || !strings.Contains(body, "ratelimit_sidecar_build_info") {
		t.Errorf("metrics at PROMETHEUS_ADDR/PROMETHEUS_PATH: %d", status)
	}
	if status, _ := httpDo(t, "GET", s.httpAddr, "/metrics", ""); status != http.StatusNotFound {
		t.Errorf("/metrics on PORT: %d, want 404", status)
	}
}

// TestWatchRoot: with RUNTIME_WATCH_ROOT (the reference's default), a
// release that swaps the RUNTIME_ROOT link to a new directory reloads the
// rules.
func TestWatchRoot(t *testing.T) {
	base := t.TempDir()
	for v, n := range map[string]int{"v1": 1, "v2": 4} {
		writeAll(t, filepath.Join(base, v, "ratelimit", "config", "rules.yaml"), istioRules(n))
	}
	current := filepath.Join(base, "current")
	if err := os.Symlink("v1", current); err != nil {
		t.Fatal(err)
	}
	env := refModeEnv(current, "RUNTIME_SUBDIRECTORY", "ratelimit")
	delete(env, "RUNTIME_WATCH_ROOT") // the reference's default: true
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: env, args: []string{"--redis-url="}})
	if _, body := httpDo(t, "GET", s.debugAddr, "/rlconfig", ""); !strings.Contains(body, "requests_per_unit=1,") {
		t.Fatalf("/rlconfig before the swap: %q", body)
	}
	tmp := filepath.Join(base, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, body := httpDo(t, "GET", s.debugAddr, "/rlconfig", "")
		return strings.Contains(body, "requests_per_unit=4,")
	})
}

// TestDebugAddr: run under its own name, --debug-addr serves the debug
// port (internal/admin specifies its endpoints) with /debug/config, and
// without --reference-metrics /metrics has none of the reference's names
// (internal/metrics specifies them).
func TestDebugAddr(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n")
	s := startSidecar(t, sidecarOpts{argv0: "ratelimit-sidecar", args: []string{"--config", dir, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--debug-addr=127.0.0.1:0"}})
	if status, body := httpDo(t, "GET", s.debugAddr, "/rlconfig", ""); status != http.StatusOK || body != "a.k: unit=DAY requests_per_unit=7, shadow_mode: false, quota_mode: false\n" {
		t.Errorf("/rlconfig: %d %q", status, body)
	}
	if status, body := httpDo(t, "GET", s.debugAddr, "/debug/config", ""); status != http.StatusOK || !strings.Contains(body, `"checksum"`) {
		t.Errorf("/debug/config on the debug listener: %d", status)
	}
	if _, body := httpDo(t, "GET", s.httpAddr, "/metrics", ""); strings.Contains(body, "ratelimit_service_") {
		t.Error("without --reference-metrics, /metrics has the reference's names")
	}
}

// swapConfigMap lays out dir as the kubelet mounts a ConfigMap, and
// updates it as the kubelet does: the files in a new dot-directory, the
// ..data link swapped to it by a rename, and top-level links through
// ..data.
func swapConfigMap(t *testing.T, dir, stamp string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..2026_11_24_"+stamp)
	for name, content := range files {
		writeAll(t, filepath.Join(data, name), content)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// writeAll writes a file, making its directory.
func writeAll(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, path, data)
}

// TestSameAddr: metrics get a listener of their own only when
// PROMETHEUS_ADDR is not PORT's address.
func TestSameAddr(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{":8080", "0.0.0.0:8080", true},
		{"[::]:8080", ":8080", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{":19001", "0.0.0.0:8080", false},
		{"127.0.0.1:8080", "0.0.0.0:8080", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"bad", "bad", false},
	}
	for _, tt := range tests {
		if got := sameAddr(tt.a, tt.b); got != tt.want {
			t.Errorf("sameAddr(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	c := mustParseEnv(t, "ratelimit", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":8080"})
	if c.addrs.separateMetrics() {
		t.Error("PROMETHEUS_ADDR=:8080 with PORT 8080: a listener of its own")
	}
}
