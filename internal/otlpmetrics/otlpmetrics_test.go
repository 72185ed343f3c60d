package otlpmetrics_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/certtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlpmetrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newEngine(t *testing.T, m *metrics.Metrics) *limits.Engine {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch)
	return limits.NewEngine(rs, memory.New(memory.Options{Now: clk.Now}), limits.EngineOptions{Observer: m})
}

func decide(t *testing.T, e *limits.Engine, n int) {
	t.Helper()
	for range n {
		var d limits.Decision
		req := &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: "alice"}}}}}
		if err := e.Decide(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPush: over gRPC and over HTTP, an OTLP receiver gets our metrics
// under their Prometheus names and labels, counters as cumulative sums and
// the decision histogram as a histogram, with the service's resource; the
// next export carries the new totals.
func TestPush(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
	}{
		{otlpmetrics.ProtocolGRPC, otlptest.StartGRPC},
		{otlpmetrics.ProtocolHTTP, otlptest.StartHTTP},
	} {
		t.Run(tt.protocol, func(t *testing.T) {
			rcv := tt.start(t)
			m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
			e := newEngine(t, m)
			p, err := otlpmetrics.New(context.Background(), otlpmetrics.Options{Protocol: tt.protocol, Endpoint: rcv.BaseURL, Interval: time.Hour,
				ServiceVersion: "v9.9.9", Gatherer: m.Registry, Errors: m.PushErrors("otlp")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background()) //nolint:errcheck // checked below
			decide(t, e, 3)
			if err := p.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			rule := map[string]string{"domain": "edge", "rule": "user", "algorithm": "fixed_window", "window": "1m0s"}
			check := func(hits, over float64, decisions uint64) {
				t.Helper()
				ok := rcv.WaitMetrics(30*time.Second, func(ms []otlptest.Metric) bool {
					h, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_hits_total", rule)
					o, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_over_limit_total", rule)
					n, _ := otlptest.HistogramCount(ms, "ratelimit_sidecar_decision_duration_seconds")
					return h == hits && o == over && n == decisions
				})
				if !ok {
					ms := rcv.Metrics()
					h, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_hits_total", rule)
					o, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_over_limit_total", rule)
					n, _ := otlptest.HistogramCount(ms, "ratelimit_sidecar_decision_duration_seconds")
					t.Fatalf("hits %v over %v decisions %v, want %v %v %v (%d metrics in %d exports)", h, o, n, hits, over, decisions, len(ms), rcv.Exports())
				}
			}
			check(3, 1, 3)
			ms := rcv.Metrics()
			var sum *otlptest.Metric
			for i := range ms {
				if ms[i].GetName() == "ratelimit_sidecar_rule_hits_total" {
					sum = &ms[i]
				}
			}
			if s := sum.GetSum(); !s.GetIsMonotonic() || s.GetAggregationTemporality().String() != "AGGREGATION_TEMPORALITY_CUMULATIVE" {
				t.Errorf("rule_hits_total: monotonic %v, %v; want a monotonic cumulative sum", s.GetIsMonotonic(), s.GetAggregationTemporality())
			}
			if sum.Resource["service.name"] != "ratelimit-sidecar" || sum.Resource["service.version"] != "v9.9.9" {
				t.Errorf("resource %v, want service.name ratelimit-sidecar and service.version v9.9.9", sum.Resource)
			}

			decide(t, e, 2)
			if err := p.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			check(5, 3, 5)
			if n := testutil.ToFloat64(m.PushErrors("otlp")); n != 0 {
				t.Errorf("push errors = %v, want 0", n)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPushDeadReceiver: an export to a receiver that is not there fails
// within its timeout and is counted; decisions do not wait for it.
func TestPushDeadReceiver(t *testing.T) {
	for _, protocol := range []string{otlpmetrics.ProtocolGRPC, otlpmetrics.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			lis.Close()
			m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
			e := newEngine(t, m)
			p, err := otlpmetrics.New(context.Background(), otlpmetrics.Options{Protocol: protocol, Endpoint: "http://" + addr, Interval: time.Second,
				Gatherer: m.Registry, Errors: m.PushErrors("otlp")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background()) //nolint:errcheck // the receiver is gone
			done := make(chan struct{})
			go func() {
				defer close(done)
				p.ForceFlush(context.Background()) //nolint:errcheck // counted
			}()
			decide(t, e, 3)
			<-done
			if n := testutil.ToFloat64(m.PushErrors("otlp")); n != 1 {
				t.Errorf("push errors = %v, want 1", n)
			}
		})
	}
}

// TestOptionsInvalid: each bad option is named, all at once.
func TestOptionsInvalid(t *testing.T) {
	m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
	o := otlpmetrics.Options{Protocol: "udp", Endpoint: "http://collector:4318", TLSCA: "/ca.pem", TLSKey: "/key.pem", Interval: -time.Second, Gatherer: m.Registry}
	_, err := otlpmetrics.New(context.Background(), o)
	for _, want := range []string{`protocol: want grpc or http, got "udp"`, "TLS files need an https:// URL", "interval: want 0", "a key its certificate"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %s", err, want)
		}
	}
	if err := otlpmetrics.CheckEndpoint("collector:4317"); err == nil {
		t.Error("CheckEndpoint(collector:4317) passed; want an http:// or https:// URL")
	}
}

// TestPushTLS: to an https:// endpoint the exporter checks the receiver's
// certificate against the CA file and presents the client certificate
// (gRPC, whose receiver requires one; HTTP, whose receiver does not); a
// receiver whose certificate another CA signed gets nothing, counted.
func TestPushTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, dir, "ca")
	server, client := ca.Issue(t, "server"), ca.Issue(t, "client")
	other := certtest.NewCA(t, dir, "other")
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB, *tls.Config) *otlptest.Receiver
		mutual   bool
	}{
		{otlpmetrics.ProtocolGRPC, otlptest.StartGRPCTLS, true},
		{otlpmetrics.ProtocolHTTP, otlptest.StartHTTPTLS, false},
	} {
		t.Run(tt.protocol, func(t *testing.T) {
			rcv := tt.start(t, ca.ServerConfig(t, server, tt.mutual))
			m := metrics.New(metrics.Build{Version: "test"}, 0.8, metrics.DefaultMaxValues)
			push := func(caFile string) error {
				p, err := otlpmetrics.New(context.Background(), otlpmetrics.Options{Protocol: tt.protocol, Endpoint: rcv.BaseURL, Interval: time.Hour,
					TLSCA: caFile, TLSCert: client.CertFile, TLSKey: client.KeyFile, Gatherer: m.Registry, Errors: m.PushErrors("otlp")})
				if err != nil {
					return err
				}
				defer p.Shutdown(context.Background()) //nolint:errcheck // flushed below
				return p.ForceFlush(context.Background())
			}
			if err := push(other.File); err != nil {
				t.Fatal(err)
			}
			// Its flush and its shutdown's last export both fail.
			failed := testutil.ToFloat64(m.PushErrors("otlp"))
			if failed < 1 || rcv.Exports() != 0 {
				t.Errorf("with another CA: push errors %v, exports %d; want some and 0", failed, rcv.Exports())
			}
			if err := push(ca.File); err != nil {
				t.Fatal(err)
			}
			if !rcv.WaitMetrics(30*time.Second, func(ms []otlptest.Metric) bool { return len(ms) > 0 }) {
				t.Fatal("nothing received over TLS")
			}
			if n := testutil.ToFloat64(m.PushErrors("otlp")); n != failed {
				t.Errorf("push errors %v, want still %v", n, failed)
			}
		})
	}
}
