package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// refModeEnv is the reference's environment for a sidecar run as
// /bin/ratelimit with its rules under root/config and every listener on
// a free loopback port.
func refModeEnv(root string, more ...string) map[string]string {
	env := map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_WATCH_ROOT": "false", "USE_STATSD": "false",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
	for i := 0; i+1 < len(more); i += 2 {
		env[more[i]] = more[i+1]
	}
	return env
}

// TestRefModeAdminNotPublic: run as /bin/ratelimit, whose HTTP port
// listens on every address, the admin endpoints the reference does not
// have (/debug/counters shows any counter one can name) are served
// nowhere, and /debug/config is not on the reference's debug port;
// /json, /healthcheck and /rlconfig stay where the reference has them.
// --admin-addr (RLS_ADMIN_ADDR) asks for the admin endpoints, there.
func TestRefModeAdminNotPublic(t *testing.T) {
	root := t.TempDir()
	writeAll(t, filepath.Join(root, "config", "rules.yaml"), istioRules(5))
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: refModeEnv(root), args: []string{"--redis-url="}})
	for _, tt := range []struct{ method, addr, path string }{
		{"GET", s.httpAddr, "/debug/counters?domain=edge&descriptor=user=alice"},
		{"POST", s.httpAddr, "/debug/counters/reset?domain=edge&descriptor=user=alice"},
		{"GET", s.httpAddr, "/debug/config"},
		{"GET", s.debugAddr, "/debug/config"},
	} {
		if status, body := httpDo(t, tt.method, tt.addr, tt.path, ""); status != http.StatusNotFound {
			t.Errorf("%s %s on %s: %d %q, want 404", tt.method, tt.path, tt.addr, status, body)
		}
	}
	if status, body := httpDo(t, "POST", s.httpAddr, "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`); status != http.StatusOK {
		t.Errorf("POST /json on PORT: %d %s", status, body)
	}
	if status, _ := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK {
		t.Errorf("/healthcheck on PORT: %d", status)
	}
	if status, body := httpDo(t, "GET", s.debugAddr, "/", ""); status != http.StatusOK || strings.Contains(body, "/debug/config") {
		t.Errorf("debug index: %d %q, want /rlconfig alone", status, body)
	}
	if status, _ := httpDo(t, "GET", s.debugAddr, "/rlconfig", ""); status != http.StatusOK {
		t.Errorf("/rlconfig on DEBUG_PORT: %d", status)
	}
	if !strings.Contains(s.log.String(), `"admin_addr":"none (run as ratelimit`) {
		t.Errorf("start log does not say the admin endpoints are not served:\n%s", s.log)
	}

	asked := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: refModeEnv(root, "RLS_ADMIN_ADDR", "127.0.0.1:0"), args: []string{"--redis-url="}})
	if asked.adminAddr == asked.httpAddr {
		t.Fatalf("admin address %s is the HTTP address", asked.adminAddr)
	}
	if status, body := httpDo(t, "GET", asked.adminAddr, "/debug/counters?domain=edge&descriptor=user=alice", ""); status != http.StatusOK {
		t.Errorf("/debug/counters on RLS_ADMIN_ADDR: %d %s", status, body)
	}
	if status, _ := httpDo(t, "GET", asked.httpAddr, "/debug/counters?domain=edge&descriptor=user=alice", ""); status != http.StatusNotFound {
		t.Errorf("/debug/counters on PORT with RLS_ADMIN_ADDR set: %d, want 404", status)
	}
}

// TestRefModeRedisRefusalHealth: run as /bin/ratelimit (failure mode
// error: every request fails) against a Redis that refuses REDIS_AUTH,
// /healthcheck, the probe Envoy Gateway's deployment uses, and gRPC
// health say not serving, as /readyz does; once Redis takes the password
// they say serving again. The password shows nowhere.
func TestRefModeRedisRefusalHealth(t *testing.T) {
	const serverPass, sidecarPass = "srv-pass-5d1e", "car-pass-0a7c"
	srv := redistest.StartServer(t)
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", serverPass).Err(); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeAll(t, filepath.Join(root, "config", "rules.yaml"), istioRules(5))
	s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: refModeEnv(root, "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", srv.Addr, "REDIS_AUTH", sidecarPass)})

	awaitRefHealth(t, s, healthpb.HealthCheckResponse_NOT_SERVING)
	status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", "")
	if status != http.StatusInternalServerError || !strings.Contains(body, "WRONGPASS") {
		t.Errorf("/healthcheck while Redis refuses the password: %d %q, want 500 with WRONGPASS", status, body)
	}
	if status, _ := httpDo(t, "GET", s.httpAddr, "/readyz", ""); status != http.StatusServiceUnavailable {
		t.Errorf("/readyz while Redis refuses the password: %d, want 503", status)
	}

	if err := admin.ConfigSet(ctx, "requirepass", sidecarPass).Err(); err != nil {
		t.Fatal(err)
	}
	awaitRefHealth(t, s, healthpb.HealthCheckResponse_SERVING)
	if status, body := httpDo(t, "GET", s.httpAddr, "/healthcheck", ""); status != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck once Redis takes the password: %d %q", status, body)
	}
	// The refusal ends as the connection is made; its scripts load next.
	waitFor(t, func() bool {
		resp, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0))
		return err == nil && resp.OverallCode == rlsOK
	})
	for _, pw := range []string{serverPass, sidecarPass} {
		if strings.Contains(s.log.String(), pw) || strings.Contains(body, pw) {
			t.Errorf("a password shows in the log or on /healthcheck")
		}
	}
}

// awaitRefHealth waits, at most xdstest.Wait, for the health of the
// reference's service name to be want, by the health Watch's updates.
func awaitRefHealth(t *testing.T, s *sidecar, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Wait)
	defer cancel()
	w, err := s.health.Watch(ctx, &healthpb.HealthCheckRequest{Service: refHealthName})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("health of %q never %v: %v\nlog:\n%s", refHealthName, want, err, s.log)
		}
		if r.Status == want {
			return
		}
	}
}
