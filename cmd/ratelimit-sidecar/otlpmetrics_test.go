package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
)

// TestOTLPMetrics: with --otlp-metrics, an OTLP receiver gets our metrics
// as /metrics serves them (internal/otlpmetrics tests both protocols).
func TestOTLPMetrics(t *testing.T) {
	rcv := otlptest.StartGRPC(t)
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "rules.yaml"), statsdRules)
	s := startSidecar(t, sidecarOpts{argv0: "ratelimit-sidecar", args: []string{"--config", dir, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
		"--otlp-metrics", "--otlp-metrics-protocol", "grpc", "--otlp-metrics-endpoint", rcv.BaseURL, "--otlp-metrics-interval=50ms"}})
	for range 3 {
		if _, err := s.rls.ShouldRateLimit(context.Background(), userRequest("alice", 0)); err != nil {
			t.Fatal(err)
		}
	}
	rule := map[string]string{"domain": "edge", "rule": "user", "algorithm": "fixed_window", "window": "1h0m0s"}
	ok := rcv.WaitMetrics(30*time.Second, func(ms []otlptest.Metric) bool {
		hits, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_hits_total", rule)
		over, _ := otlptest.Sum(ms, "ratelimit_sidecar_rule_over_limit_total", rule)
		return hits == 3 && over == 1
	})
	if !ok {
		t.Fatalf("no rule_hits_total of 3 and over_limit of 1 in %d exports", rcv.Exports())
	}
}

// TestOTLPMetricsFlags: the push flags are checked at start, each naming
// the flag or variable (the cases: internal/otlpmetrics and
// internal/statsd).
func TestOTLPMetricsFlags(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}, []string{"--otlp-metrics"}, `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: want grpc or http/protobuf, got "http/json"`},
		{nil, []string{"--statsd-addr=statsd:8125", "--statsd-tags=team"}, `--statsd-tags: want key=value entries, got "team"`},
	}
	for _, tt := range tests {
		_, err := parseEnv("ratelimit-sidecar", tt.env, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: error %v, want it to say %s", tt.env, tt.args, err, tt.want)
		}
	}
}
