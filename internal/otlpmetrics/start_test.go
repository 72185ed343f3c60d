package otlpmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlpmetrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
)

// env returns a getenv of the variables kv.
func env(kv map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) { v, ok := kv[name]; return v, ok }
}

// TestCheck: with --otlp-metrics, bad values are errors naming the flags
// or the variable, an empty protocol is the variables', else http;
// without it they are not read.
func TestCheck(t *testing.T) {
	tests := []struct {
		env  map[string]string
		give otlpmetrics.Options
		want string
	}{
		{nil, otlpmetrics.Options{Endpoint: "collector:4317"}, "--otlp-metrics flags: endpoint: want an http:// or https:// URL"},
		{nil, otlpmetrics.Options{Protocol: "udp"}, `--otlp-metrics flags: protocol: want grpc or http, got "udp"`},
		{nil, otlpmetrics.Options{Endpoint: "http://c:4318", TLSCA: "/ca.pem"}, "TLS files need an https:// URL"},
		{nil, otlpmetrics.Options{Interval: -time.Second}, "interval: want 0 (the SDK's) or more, got -1s"},
		{nil, otlpmetrics.Options{TLSKey: "/key.pem"}, "a key its certificate"},
		{map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}, otlpmetrics.Options{},
			`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: want grpc or http/protobuf, got "http/json"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, otlpmetrics.Options{},
			`OTEL_EXPORTER_OTLP_PROTOCOL: want grpc or http/protobuf, got "thrift"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			o := tt.give
			if err := o.Check(env(tt.env)); err != nil {
				t.Errorf("without --otlp-metrics: Check() = %v, want nil", err)
			}
			o.Enabled = true
			if err := o.Check(env(tt.env)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check() = %v, want it to say %s", err, tt.want)
			}
		})
	}
	for give, want := range map[string]string{"": "http", "grpc": "grpc", "http/protobuf": "http"} {
		o := otlpmetrics.Options{Enabled: true}
		vars := map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": give, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
		if give == "" {
			vars = nil
		}
		if err := o.Check(env(vars)); err != nil || o.Protocol != want {
			t.Errorf("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=%q: Check() = %v, protocol %q; want %q", give, err, o.Protocol, want)
		}
	}
}

// TestStart: Start pushes the gatherer's metrics, says so in the log with
// the endpoint's password hidden, and Stop sends the last export, once;
// without Enabled nothing starts.
func TestStart(t *testing.T) {
	rcv := otlptest.StartHTTP(t)
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_sidecar_test_total"})
	reg.MustRegister(c)
	c.Add(3)
	endpoint := strings.Replace(rcv.BaseURL, "http://", "http://user:secret@", 1)
	log, buf := logtest.JSON(zap.InfoLevel)
	o := otlpmetrics.Options{Enabled: true, Protocol: "http", Endpoint: endpoint, Interval: time.Hour}
	p, err := otlpmetrics.Start(context.Background(), o, reg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(5 * time.Second)
	p.Stop(5 * time.Second)
	ok := rcv.WaitMetrics(5*time.Second, func(ms []otlptest.Metric) bool {
		v, _ := otlptest.Sum(ms, "ratelimit_sidecar_test_total", nil)
		return v == 3
	})
	if !ok {
		t.Errorf("no ratelimit_sidecar_test_total of 3 in %d exports", rcv.Exports())
	}
	lines := buf.Lines(t, "pushing metrics over OTLP")
	if len(lines) != 1 || lines[0]["endpoint"] != strings.Replace(endpoint, "secret", "xxxxx", 1) || lines[0]["protocol"] != "http" {
		t.Errorf("start lines %v", lines)
	}

	o.Enabled = false
	if p, err := otlpmetrics.Start(context.Background(), o, reg, nil, log); p != nil || err != nil {
		t.Errorf("without Enabled: Start() = %v, %v; want nil, nil", p, err)
	}
	var none *otlpmetrics.Pusher
	none.Stop(time.Second)
}

// TestStartError: options that New refuses stop Start, under
// "otlp metrics: ".
func TestStartError(t *testing.T) {
	_, err := otlpmetrics.Start(context.Background(), otlpmetrics.Options{Enabled: true, Protocol: "udp"}, prometheus.NewRegistry(), nil, zap.NewNop())
	if err == nil || !strings.HasPrefix(err.Error(), "otlp metrics: protocol: ") {
		t.Errorf("Start() = %v, want an otlp metrics: protocol: error", err)
	}
}
