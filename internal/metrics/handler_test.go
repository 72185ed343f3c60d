package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// scrape returns the text of one GET of h.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	r, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %v", r.StatusCode, err)
	}
	return string(b)
}

// TestReferenceMetrics: with reference (--reference-metrics), Handler
// serves the reference's Prometheus names (as its default
// statsd_exporter mapping, which Envoy Gateway ships, names them) beside
// ours, with the same counts; without it, none.
func TestReferenceMetrics(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`domain: edge
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
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	clk := storetest.NewClock(storetest.Epoch)
	e := limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{Observer: m})
	for _, entries := range [][]limits.Entry{
		{{Key: "user", Value: "alice"}}, {{Key: "user", Value: "alice"}}, {{Key: "user", Value: "alice"}},
		{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "bob"}}, {{Key: "tenant", Value: "acme"}, {Key: "user", Value: "bob"}},
		{{Key: "ip", Value: "10.0.0.1"}},
	} {
		var d limits.Decision
		if err := e.Decide(context.Background(), &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: entries}}}, &d); err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, metrics.Handler(m.Registry, e.Rules, true))
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
			t.Errorf("the reference's metrics lack %s", want)
		}
	}

	if body := scrape(t, metrics.Handler(m.Registry, e.Rules, false)); strings.Contains(body, "ratelimit_service_") ||
		!strings.Contains(body, "ratelimit_sidecar_rule_over_limit_total") {
		t.Error("without the reference's names: want ours alone")
	}
}
