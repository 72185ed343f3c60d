package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestReferenceMetrics: with --reference-metrics, /metrics serves the
// reference's Prometheus names (as its default statsd_exporter mapping,
// which Envoy Gateway ships, names them) beside ours, with the same
// counts; without it, none.
func TestReferenceMetrics(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "rules.yaml"), `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	s := startSidecar(t, sidecarOpts{argv0: "ratelimit-sidecar", args: []string{"--config", dir, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--reference-metrics"}})
	ctx := context.Background()
	for range 3 {
		if _, err := s.rls.ShouldRateLimit(ctx, userRequest("alice", 0)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "bob"}}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	_, body := httpDo(t, "GET", s.httpAddr, "/metrics", "")
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="user",key2=""} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="user",key2=""} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="user",key2=""} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="edge",key1="user",key2=""} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="tenant_acme",key2="user"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="tenant_acme",key2="user"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="ip",key2=""} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 6`,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 6`,
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_config_load_error 0`,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"} 0`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 0`,
		// Ours are still there.
		`ratelimit_sidecar_rule_over_limit_total{algorithm="fixed_window",domain="edge",rule="per-user",window="1m0s"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	plain := startSidecar(t, sidecarOpts{argv0: "ratelimit-sidecar", args: []string{"--config", dir, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0"}})
	if _, body := httpDo(t, "GET", plain.httpAddr, "/metrics", ""); strings.Contains(body, "ratelimit_service_") {
		t.Error("without --reference-metrics, /metrics has the reference's names")
	}
}
