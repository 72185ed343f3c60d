package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestBoundedStateFlags checks that --metric-max-values and
// --override-keys reach the metrics and the engine.
func TestBoundedStateFlags(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), `domain: edge
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--metric-max-values", "1", "--override-keys", "separate"}})
	ctx := context.Background()
	tenant := func(value string, override *rlscommon.RateLimitDescriptor_RateLimitOverride) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: value}}, Limit: override},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	tenant("a", nil)
	tenant("b", nil)
	tenant("c", nil)
	_, body := s.get(t, "/metrics")
	for _, want := range []string{
		`ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="edge",rule="tenant_a",window="1m0s"} 1`,
		`ratelimit_sidecar_rule_hits_total{algorithm="fixed_window",domain="edge",rule="_other.tenant",window="1m0s"} 2`,
		`ratelimit_sidecar_metric_values_overflowed_total{domain="edge",rule="tenant"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `rule="tenant_b"`) {
		t.Error("/metrics has a series for tenant_b, past --metric-max-values 1")
	}

	// The override of 10 per minute counts apart from the rule's 10 per
	// minute, on which tenant a has spent 1.
	perMinute := &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: 2} // MINUTE
	if got := tenant("a", perMinute).Statuses[0].LimitRemaining; got != 9 {
		t.Errorf("remaining under the override = %d, want 9 (a counter of its own)", got)
	}
	if got := tenant("a", nil).Statuses[0].LimitRemaining; got != 8 {
		t.Errorf("remaining under the rule = %d, want 8", got)
	}
}
