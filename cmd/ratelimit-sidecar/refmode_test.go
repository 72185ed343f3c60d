package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
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
	s := startAs(t, "/bin/ratelimit", refModeEnv(root), "--redis-url=")
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

	asked := startAs(t, "/bin/ratelimit", refModeEnv(root, "RLS_ADMIN_ADDR", "127.0.0.1:0"), "--redis-url=")
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
