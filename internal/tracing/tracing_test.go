package tracing_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidate(t *testing.T) {
	good := tracing.Options{Protocol: "grpc", ServiceName: "rls", SamplingRate: 0.5}
	tests := []struct {
		name string
		give func(o *tracing.Options)
		want string // "" for valid
	}{
		{"valid", func(*tracing.Options) {}, ""},
		{"http with an endpoint", func(o *tracing.Options) { o.Protocol, o.Endpoint = "http", "https://otel:4318/custom" }, ""},
		{"protocol", func(o *tracing.Options) { o.Protocol = "http/json" }, `protocol: want grpc or http, got "http/json"`},
		{"endpoint without scheme", func(o *tracing.Options) { o.Endpoint = "otel:4317" }, `endpoint: want an http:// or https:// URL, got "otel:4317"`},
		{"endpoint without host", func(o *tracing.Options) { o.Endpoint = "http:///v1/traces" }, `endpoint: no host in "http:///v1/traces"`},
		{"rate", func(o *tracing.Options) { o.SamplingRate = -0.1 }, "sampling rate: want a number from 0 to 1, got -0.1"},
		{"no service name", func(o *tracing.Options) { o.ServiceName = "" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.give(&o)
			err := o.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestPropagator: W3C trace context and both forms of B3 are read; when
// a caller sends both, W3C's wins.
func TestPropagator(t *testing.T) {
	const w3cTrace, b3Trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "80f198ee56343ba864fe8b2a57d3eff7", "00f067aa0ba902b7"
	tests := []struct {
		name        string
		give        map[string]string
		wantTrace   string
		wantSampled bool
	}{
		{"traceparent", map[string]string{"traceparent": "00-" + w3cTrace + "-" + span + "-01"}, w3cTrace, true},
		{"b3", map[string]string{"b3": b3Trace + "-" + span + "-0"}, b3Trace, false},
		{"x-b3", map[string]string{"x-b3-traceid": b3Trace, "x-b3-spanid": span, "x-b3-sampled": "1"}, b3Trace, true},
		{"both", map[string]string{"traceparent": "00-" + w3cTrace + "-" + span + "-01", "b3": b3Trace + "-" + span + "-1"}, w3cTrace, true},
		{"bad traceparent, good b3", map[string]string{"traceparent": "00-zz-" + span + "-01", "b3": b3Trace + "-" + span + "-1"}, b3Trace, true},
		{"none", map[string]string{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tracing.Propagator().Extract(context.Background(), propagation.MapCarrier(tt.give))
			sc := trace.SpanContextFromContext(ctx)
			if tt.wantTrace == "" {
				if sc.IsValid() {
					t.Errorf("span context %v, want none", sc)
				}
				return
			}
			if sc.TraceID().String() != tt.wantTrace || sc.SpanID().String() != span || !sc.IsRemote() || sc.IsSampled() != tt.wantSampled {
				t.Errorf("span context %s/%s remote %v sampled %v, want %s/%s remote, sampled %v",
					sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.IsSampled(), tt.wantTrace, span, tt.wantSampled)
			}
		})
	}
}

// TestExport: spans reach a real receiver over either protocol, an HTTP
// endpoint without a path getting /v1/traces, with the service's resource
// attributes and a random instance ID when none is given; Shutdown sends
// what is queued.
func TestExport(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
		endpoint func(r *otlptest.Receiver) string
	}{
		{"grpc", otlptest.StartGRPC, func(r *otlptest.Receiver) string { return r.URL }},
		{"http", otlptest.StartHTTP, func(r *otlptest.Receiver) string { return strings.TrimSuffix(r.URL, "/v1/traces") }},
	} {
		t.Run(tt.protocol, func(t *testing.T) {
			r := tt.start(t)
			p, err := tracing.New(context.Background(), tracing.Options{Protocol: tt.protocol, Endpoint: tt.endpoint(r),
				ServiceName: "rls", ServiceNamespace: "edge", ServiceVersion: "v1", SamplingRate: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, span := p.Tracer("test").Start(context.Background(), "op")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			spans := r.WaitSpans(1, 5*time.Second)
			if len(spans) != 1 || spans[0].GetName() != "op" {
				t.Fatalf("received %v, want the span op", spans)
			}
			res := spans[0].Resource
			if res["service.name"] != "rls" || res["service.namespace"] != "edge" || res["service.version"] != "v1" {
				t.Errorf("resource %v", res)
			}
			uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
			if id := res["service.instance.id"]; !uuid.MatchString(id) {
				t.Errorf("service.instance.id %q, want a random UUID", id)
			}
		})
	}
}
