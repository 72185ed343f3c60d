package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xdstest"
)

// egAPIRoute is the outer descriptor's key and value that Envoy Gateway
// generates for rule 0, match 0 of HTTPRoute default/api, and
// egUserHeader the key of its first client-selector header.
const (
	egAPIRoute   = "httproute/default/api/rule/0/match/0/*"
	egUserHeader = "rule-0-match-0"
)

// egAPIConfig is what Envoy Gateway pushes for a BackendTrafficPolicy
// limiting each x-user-id to 1000 an hour on route default/api.
func egAPIConfig() *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: egAPIRoute, Value: egAPIRoute,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       egUserHeader,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 1000},
		}},
	}}}
}

// egUserCode is the answer to one hit of user on route default/api.
func (s *sidecar) egUserCode(t *testing.T, user string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := s.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: egAPIRoute, Value: egAPIRoute}, {Key: egUserHeader, Value: user}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

// TestXDSOverlayFlag: --xds-overlay adds a daily cap of 2 to the rule
// Envoy Gateway pushes (1000 an hour), which then decides; an edit of the
// file is read again; a push that drops the route is ACKed and the
// unmatched entry counted in the metrics.
func TestXDSOverlayFlag(t *testing.T) {
	overlay := filepath.Join(t.TempDir(), "overlay.yaml")
	write := func(cap string) {
		t.Helper()
		text := "overlays:\n  - domain: default/eg/http\n    path:\n      - {key: " + egAPIRoute + ", value: " + egAPIRoute + "}\n      - {key: " + egUserHeader + "}\n    add_rate_limits: [{unit: day, requests_per_unit: " + cap + "}]\n"
		if err := os.WriteFile(overlay+".tmp", []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(overlay+".tmp", overlay); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	srv := xdstest.Start(t)
	srv.Set(t, "envoy-ratelimit", "1", egAPIConfig())
	s := startSidecar(t, xdsOpts(srv, "--xds-overlay", overlay, "--reload-debounce", "20ms"))
	s.awaitHealth(t, healthpb.HealthCheckResponse_SERVING)
	_, n := srv.Await(t, 0, "ACKing version 1", isACK("1"))
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := s.egUserCode(t, "alice"); got != want {
			t.Fatalf("alice's hit %d under the overlay's cap of 2 a day: %v, want %v", i+1, got, want)
		}
	}

	sum := s.debugConfig(t).Checksum
	write("4")
	waitFor(t, func() bool { return s.debugConfig(t).Checksum != sum })
	if got := s.egUserCode(t, "alice"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("alice under the edited cap of 4 a day: %v, want OK", got)
	}
	if got := metricValue(t, s, "ratelimit_sidecar_xds_overlay_unmatched_entries"); got != 0 {
		t.Errorf("xds_overlay_unmatched_entries %v, want 0", got)
	}

	cfg := egAPIConfig()
	cfg.Descriptors[0].Key, cfg.Descriptors[0].Value = "httproute/default/web/rule/0/match/0/*", "httproute/default/web/rule/0/match/0/*"
	srv.Set(t, "envoy-ratelimit", "2", cfg)
	srv.Await(t, n, "ACKing version 2", isACK("2"))
	waitFor(t, func() bool { return metricValue(t, s, "ratelimit_sidecar_xds_overlay_unmatched_entries") == 1 })
}
