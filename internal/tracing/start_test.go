package tracing_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
)

// env returns a getenv of the variables kv ("NAME=value").
func env(kv ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, e := range kv {
			if k, v, _ := strings.Cut(e, "="); k == name {
				return v, true
			}
		}
		return "", false
	}
}

// TestCheck: with --tracing, each flag's values out of range are refused
// in the flag's name, and an empty protocol is taken from the standard
// variables, else http; without it nothing is checked.
func TestCheck(t *testing.T) {
	good := tracing.Options{Enabled: true, SamplingRate: 1}
	tests := []struct {
		name string
		give func(*tracing.Options)
		env  []string
		want string
	}{
		{"protocol", func(o *tracing.Options) { o.Protocol = "thrift" }, nil, `--tracing-protocol: want grpc or http, got "thrift"`},
		{"protocol variable", func(*tracing.Options) {}, []string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
			`OTEL_EXPORTER_OTLP_PROTOCOL: want grpc or http/protobuf, got "http/json"`},
		{"traces protocol variable", func(*tracing.Options) {}, []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
			`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: want grpc or http/protobuf, got "thrift"`},
		{"sampling rate", func(o *tracing.Options) { o.SamplingRate = 1.5 }, nil, "--tracing-sampling-rate: want a number from 0 to 1, got 1.5"},
		{"sampling rate NaN", func(o *tracing.Options) { o.SamplingRate = math.NaN() }, nil, "--tracing-sampling-rate: want a number from 0 to 1, got NaN"},
		{"endpoint", func(o *tracing.Options) { o.Endpoint = "collector:4317" }, nil, `--tracing-endpoint: want an http:// or https:// URL, got "collector:4317"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.give(&o)
			if err := o.Check(env(tt.env...)); err == nil || err.Error() != tt.want {
				t.Errorf("Check() = %v, want %q", err, tt.want)
			}
			o.Enabled = false
			if err := o.Check(env(tt.env...)); err != nil {
				t.Errorf("Check() without --tracing = %v, want nil", err)
			}
		})
	}
}

// TestCheckProtocol: an empty protocol is the traces variable's, else
// the general one's, else http.
func TestCheckProtocol(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{nil, "http"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "grpc"},
		{[]string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"}, "http"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "http"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "grpc"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			o := tracing.Options{Enabled: true, SamplingRate: 1}
			if err := o.Check(env(tt.give...)); err != nil || o.Protocol != tt.want {
				t.Errorf("Check() = %v, protocol %q; want %q", err, o.Protocol, tt.want)
			}
		})
	}
	o := tracing.Options{Enabled: true, Protocol: "grpc", SamplingRate: 1}
	if err := o.Check(env("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")); err != nil || o.Protocol != "grpc" {
		t.Errorf("--tracing-protocol grpc: Check() = %v, protocol %q; want it kept", err, o.Protocol)
	}
}

// TestStartFromEnvironment: without an endpoint the exporter takes its
// receiver from the standard OTEL_EXPORTER_OTLP_* variables; Start says
// so in the log, and Stop sends what is queued, once.
func TestStartFromEnvironment(t *testing.T) {
	r := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.URL)
	log, buf := logtest.JSON(zap.InfoLevel)
	p, err := tracing.Start(context.Background(), tracing.Options{Enabled: true, Protocol: "http", ServiceName: "rls", SamplingRate: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("test").Start(context.Background(), "op")
	span.End()
	p.Stop(5 * time.Second)
	p.Stop(5 * time.Second)
	spans := r.WaitSpans(1, 5*time.Second)
	if len(spans) != 1 || spans[0].GetName() != "op" {
		t.Fatalf("received %v, want the span op", spans)
	}
	lines := buf.Lines(t, "tracing on")
	if len(lines) != 1 || lines[0]["endpoint"] != "from OTEL_EXPORTER_OTLP_* or localhost" || lines[0]["protocol"] != "http" || lines[0]["service_name"] != "rls" {
		t.Errorf("tracing on lines: %v", lines)
	}
}

// TestStartLogsRedacted: the start line shows the endpoint without its
// password.
func TestStartLogsRedacted(t *testing.T) {
	log, buf := logtest.JSON(zap.InfoLevel)
	p, err := tracing.Start(context.Background(), tracing.Options{Enabled: true, Protocol: "grpc", Endpoint: "http://user:secret@127.0.0.1:1", SamplingRate: 0}, log)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(time.Second)
	lines := buf.Lines(t, "tracing on")
	if len(lines) != 1 || lines[0]["endpoint"] != "http://user:xxxxx@127.0.0.1:1" {
		t.Errorf("tracing on lines: %v", lines)
	}
}

// TestStartOff: without Enabled, no exporter starts: a receiver that the
// OTEL_EXPORTER_OTLP_* variables name gets no connection, and the nil
// Provider traces nothing and stops.
func TestStartOff(t *testing.T) {
	for _, start := range []func(testing.TB) *otlptest.Receiver{otlptest.StartGRPC, otlptest.StartHTTP} {
		r := start(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", strings.TrimSuffix(r.URL, "/v1/traces"))
		p, err := tracing.Start(context.Background(), tracing.Options{Protocol: "grpc", SamplingRate: 1}, zap.NewNop())
		if p != nil || err != nil {
			t.Fatalf("Start() = %v, %v; want nil, nil", p, err)
		}
		if tr := p.Tracer("test"); tr != nil {
			t.Errorf("Tracer() of nil = %v, want nil", tr)
		}
		p.Stop(time.Second)
		if n, spans := r.Conns(), r.Spans(); n != 0 || len(spans) != 0 {
			t.Errorf("%s: %d connections and %d spans, want none", r.URL, n, len(spans))
		}
	}
}

// TestStartError: options that New refuses stop Start, under
// "tracing: ".
func TestStartError(t *testing.T) {
	_, err := tracing.Start(context.Background(), tracing.Options{Enabled: true, Protocol: "thrift"}, zap.NewNop())
	if err == nil || !strings.HasPrefix(err.Error(), "tracing: protocol: ") {
		t.Errorf("Start() = %v, want a tracing: protocol: error", err)
	}
}
