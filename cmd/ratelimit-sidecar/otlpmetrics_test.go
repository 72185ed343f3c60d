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
// as /metrics serves them, over gRPC and over HTTP.
func TestOTLPMetrics(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
	}{
		{"grpc", otlptest.StartGRPC},
		{"http", otlptest.StartHTTP},
	} {
		t.Run(tt.protocol, func(t *testing.T) {
			rcv := tt.start(t)
			dir := t.TempDir()
			writeAll(t, filepath.Join(dir, "rules.yaml"), statsdRules)
			s := startAs(t, "ratelimit-sidecar", nil, "--config", dir, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
				"--otlp-metrics", "--otlp-metrics-protocol", tt.protocol, "--otlp-metrics-endpoint", rcv.BaseURL, "--otlp-metrics-interval=50ms")
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
		})
	}
}

// TestOTLPMetricsFlags: bad --otlp-metrics* values are errors naming the
// flag or variable; without --otlp-metrics they are not read.
func TestOTLPMetricsFlags(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--otlp-metrics", "--otlp-metrics-endpoint=collector:4317"}, "--otlp-metrics flags: endpoint: want an http:// or https:// URL"},
		{nil, []string{"--otlp-metrics", "--otlp-metrics-protocol=udp"}, `protocol: want grpc or http, got "udp"`},
		{nil, []string{"--otlp-metrics", "--otlp-metrics-endpoint=http://c:4318", "--otlp-metrics-tls-ca=/ca.pem"}, "TLS files need an https:// URL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}, []string{"--otlp-metrics"}, `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: want grpc or http/protobuf, got "http/json"`},
		{nil, []string{"--statsd-addr=statsd:8125", "--statsd-tags=team"}, `--statsd-tags: want key=value entries, got "team"`},
		{nil, []string{"--statsd-addr=statsd:8125", "--statsd-mogrifiers=[{\"pattern\":\"a\",\"name\":\"b\"}]"}, "--statsd-mogrifiers: needs --statsd-format dogstatsd"},
		{nil, []string{"--statsd-addr=statsd:8125", "--statsd-format=dogstatsd", "--statsd-mogrifiers=[{\"pattern\":\"(\",\"name\":\"b\"}]"}, "--statsd-mogrifiers[0].pattern: error parsing regexp"},
		{nil, []string{"--statsd-addr=statsd:8125", "--statsd-protocol=unix"}, `--statsd-protocol: want udp, tcp or unixgram, got "unix"`},
		{nil, []string{"--statsd-addr=statsd"}, `--statsd-addr: want host:port, got "statsd"`},
	}
	for _, tt := range tests {
		_, err := parseEnv("ratelimit-sidecar", tt.env, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: error %v, want it to say %s", tt.env, tt.args, err, tt.want)
		}
	}
	if _, err := parseEnv("ratelimit-sidecar", nil, "--otlp-metrics-protocol=udp", "--statsd-tags=team"); err != nil {
		t.Errorf("without --otlp-metrics and --statsd-addr, their flags are checked: %v", err)
	}
}
