package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// AI Gateway's rate-limit xDS server: its node ID and domain
// (envoyproxy/ai-gateway internal/ratelimit/runner and translator).
const (
	aigwNode   = "envoy-ai-gateway-ratelimit"
	aigwDomain = "ai-gateway-quota"
)

// fastXDS is the reference's environment for quick xDS reconnects.
var fastXDS = map[string]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "100ms",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"}

// hit sends one request of one descriptor, key=value in domain.
func (s *sidecar) hit(t *testing.T, domain, key, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := s.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1,
		Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

// hits sends len(want) requests of key=value in domain and checks each
// answer.
func (s *sidecar) hits(t *testing.T, domain, key, value string, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	for i, w := range want {
		if got := s.hit(t, domain, key, value); got != w {
			t.Fatalf("%s %s=%s hit %d: %v, want %v", domain, key, value, i+1, got, w)
		}
	}
}

// TestSeveralRuleSources: rule files and two xDS servers (Envoy
// Gateway's and AI Gateway's, each go-control-plane's own server and
// snapshot cache) feed one sidecar. It is ready only once both servers
// have pushed; each source's domains decide; a domain the second server
// claims too stays the first's, and the refusal is logged, counted per
// source and shown in /debug/config; and each server has its own
// metrics. What a source does alone is pkg/xds's and pkg/sources' to
// test (TestServerDown, TestCombiner, TestMultiWaitsForEverySource).
func TestSeveralRuleSources(t *testing.T) {
	eg, aigw := xdstest.Start(t), xdstest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "local.yaml"), []byte("domain: local\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log logtest.Buffer
	s := startSidecar(t, sidecarOpts{log: &log, env: fastXDS, args: []string{"--config", dir,
		"--xds-source", "name=eg,server=" + eg.Addr + ",node-id=envoy-ratelimit",
		"--xds-source", "name=aigw,server=" + aigw.Addr + ",node-id=" + aigwNode}})

	// Neither server has pushed: not ready, waiting for both.
	if st := s.healthNow(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before any push: %v, want NOT_SERVING", st)
	}
	code, body := s.get(t, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "rule source eg") || !strings.Contains(body, "rule source aigw") {
		t.Errorf("/readyz before any push: %d %s", code, body)
	}

	// Envoy Gateway's pushes: still waiting for AI Gateway's.
	eg.Set(t, "envoy-ratelimit", "1", xdstest.RateLimitConfig("edge", "user", 2, rlsconf.RateLimitUnit_HOUR))
	eg.Await(t, 0, "ACKing version 1", isACK("1"))
	if st := s.healthNow(t); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health with only eg's rules: %v, want NOT_SERVING", st)
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusServiceUnavailable || strings.Contains(body, "rule source eg") || !strings.Contains(body, "rule source aigw") {
		t.Errorf("/readyz with only eg's rules: %d %s", code, body)
	}

	// AI Gateway's pushes its domain, and edge too, which eg holds.
	aigw.Set(t, aigwNode, "1",
		xdstest.RateLimitConfig(aigwDomain, "backend_name", 1, rlsconf.RateLimitUnit_HOUR),
		xdstest.RateLimitConfig("edge", "user", 100, rlsconf.RateLimitUnit_HOUR))
	aigw.Await(t, 0, "ACKing version 1", isACK("1"))
	s.awaitHealth(t, healthpb.HealthCheckResponse_SERVING)

	s.hits(t, "local", "user", "alice", rlsOK, rlsOver)
	s.hits(t, aigwDomain, "backend_name", "openai", rlsOK, rlsOver)
	s.hits(t, "edge", "user", "alice", rlsOK, rlsOK, rlsOver) // eg's 2 an hour, not aigw's 100

	if !strings.Contains(log.String(), "rule source refused for a domain another rule source holds") {
		t.Errorf("the refused domain is not logged:\n%s", log.String())
	}
	if got := metricValue(t, s, `ratelimit_sidecar_rule_source_refused_domains{source="aigw"}`); got != 1 {
		t.Errorf("refused_domains of aigw: %v, want 1", got)
	}
	if got := metricValue(t, s, `ratelimit_sidecar_rule_source_refused_domains{source="eg"}`); got != 0 {
		t.Errorf("refused_domains of eg: %v, want 0", got)
	}
	if v := s.debugConfig(t); !strings.Contains(v.LastError, `rule source aigw: domain "edge" refused: rule source eg holds it`) {
		t.Errorf("/debug/config last_error: %q", v.LastError)
	}
	for _, src := range []string{"eg", "aigw"} {
		for _, m := range []string{"xds_connected", "xds_rules_received"} {
			if got := metricValue(t, s, `ratelimit_sidecar_`+m+`{source="`+src+`"}`); got != 1 {
				t.Errorf("%s of %s: %v, want 1", m, src, got)
			}
		}
	}
}

// TestXDSSourceFlagsInvalid: a bad --xds-source stops the start with a
// message naming the flag and what is wrong (the cases: pkg/xds's
// TestSourceOptionsRefused and TestSourceListRefused).
func TestXDSSourceFlagsInvalid(t *testing.T) {
	_, err := parseFlags([]string{"--xds-source", "name=files,server=h:1,node-id=n"}, noEnv, nil)
	if want := `--xds-source: name "files": taken`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying %q", err, want)
	}
}
