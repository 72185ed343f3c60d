package metrics_test

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// TestReferenceStats: the reference's statsd names of our counters: the
// rule's path from the top (not a limit's name), values of a
// detailed_metric rule with the dots of an IPv4 address replaced, the
// counts of one path summed, and the service's stats.
func TestReferenceStats(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`domain: edge
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5, name: per-user}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	clk := storetest.NewClock(storetest.Epoch)
	e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{Observer: m})
	for _, entries := range [][]limits.Entry{
		{{Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "bob"}},
	} {
		var d limits.Decision
		if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: entries}}}, &d); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]float64{}
	var timer bool
	for _, s := range metrics.NewReference(m.Registry, e.Rules).Stats() {
		if s.Timer != nil {
			timer = s.Name == "ratelimit_server.ShouldRateLimit.response_time" && s.Timer.GetSampleCount() == 3
			continue
		}
		got[s.Name] = s.Value
	}
	for name, want := range map[string]float64{
		"ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.total_hits": 2,
		"ratelimit.service.rate_limit.edge.remote_address_10_0_0_1.over_limit": 1,
		"ratelimit.service.rate_limit.edge.tenant_acme.user.total_hits":        1,
		"ratelimit.service.rate_limit.edge.tenant_acme.user.within_limit":      1,
		"ratelimit_server.ShouldRateLimit.total_requests":                      3,
		"ratelimit.service.config_load_success":                                1,
		"ratelimit.service.config_load_error":                                  0,
		"ratelimit.service.call.should_rate_limit.redis_error":                 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (found %v), want %v", name, v, ok, want)
		}
	}
	if !timer {
		t.Error("no response_time timer of 3 observations")
	}
	if _, ok := got["ratelimit.service.rate_limit.edge.per-user.total_hits"]; ok {
		t.Error("a limit's name in a stat's name, not the rule's path")
	}
}
