package envoy_test

import (
	"context"
	"net"
	"sync"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// The caller's span, as Envoy would send it.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// seenStore is a memory store that records the span context of each
// call's context.
type seenStore struct {
	limits.Store
	mu   sync.Mutex
	seen []trace.SpanContext
}

func (s *seenStore) Apply(ctx context.Context, b *limits.Batch) error {
	s.mu.Lock()
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	return s.Store.Apply(ctx, b)
}

// traced is a server whose spans go to a real SDK tracer provider that
// records them as they end.
type traced struct {
	rls   rlsv3.RateLimitServiceClient
	rec   *tracetest.SpanRecorder
	store *seenStore
	down  *storetest.Down
}

// startTraced serves rules, traced and sampled at rate, with the engine's
// failure mode, on a loopback port.
func startTraced(t *testing.T, rate float64, mode limits.FailureMode) *traced {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &traced{rec: tracetest.NewSpanRecorder()}
	tr.store = &seenStore{Store: memory.New(memory.Options{})}
	tr.down = &storetest.Down{Up: tr.store}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate))))
	t.Cleanup(func() { tp.Shutdown(context.Background()) }) //nolint:errcheck // nothing to flush
	engine := limits.NewEngine(rs, tr.down, limits.EngineOptions{FailureMode: mode})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(envoy.ServerOptions()...)
	envoy.NewServer(engine, zap.NewNop(), envoy.Options{Tracing: &envoy.Tracing{
		Tracer: tp.Tracer("test"), Propagator: tracing.Propagator(), Store: "memory",
	}}).Register(gs)
	go gs.Serve(lis) //nolint:errcheck // Serve returns when Stop is called
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	tr.rls = rlsv3.NewRateLimitServiceClient(conn)
	return tr
}

// call sends req with the metadata kv.
func (tr *traced) call(t *testing.T, req *rlsv3.RateLimitRequest, kv ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	return tr.rls.ShouldRateLimit(ctx, req)
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	out := map[string]any{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}

// TestTracingPropagation: a call whose metadata carries the caller's span,
// in W3C trace context or either form of B3, gets a server span in the
// caller's trace, the child of the caller's span, which the store's
// context carries.
func TestTracingPropagation(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{"traceparent", []string{"traceparent", "00-" + callerTrace + "-" + callerSpan + "-01", "tracestate", "vendor=x"}},
		{"b3 single", []string{"b3", callerTrace + "-" + callerSpan + "-1"}},
		{"b3 multi", []string{"x-b3-traceid", callerTrace, "x-b3-spanid", callerSpan, "x-b3-sampled", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := startTraced(t, 0, limits.FailLocal) // only a sampled caller is traced
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("tenant", "acme"), desc("free", "x")}}
			if _, err := tr.call(t, req, tt.give...); err != nil {
				t.Fatal(err)
			}
			spans := tr.rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans ended, want 1", len(spans))
			}
			s := spans[0]
			if got := s.SpanContext().TraceID().String(); got != callerTrace {
				t.Errorf("trace id %s, want the caller's %s", got, callerTrace)
			}
			if got := s.Parent().SpanID().String(); got != callerSpan || !s.Parent().IsRemote() {
				t.Errorf("parent %s (remote %v), want the caller's span %s", got, s.Parent().IsRemote(), callerSpan)
			}
			if s.Name() != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span %q of kind %v", s.Name(), s.SpanKind())
			}
			want := map[string]any{
				"rpc.system": "grpc", "rpc.service": "envoy.service.ratelimit.v3.RateLimitService", "rpc.method": "ShouldRateLimit",
				"rpc.grpc.status_code": int64(0),
				"ratelimit.domain":     "edge", "ratelimit.descriptors": int64(2), "ratelimit.code": "OK", "ratelimit.decided_by": "memory",
			}
			if diff := cmp.Diff(want, attrs(s)); diff != "" {
				t.Errorf("attributes (-want +got):\n%s", diff)
			}
			if got := tr.store.seen; len(got) != 1 || got[0].SpanID() != s.SpanContext().SpanID() {
				t.Errorf("the store's context carried %v, want the server span %s", got, s.SpanContext().SpanID())
			}
		})
	}
}

// TestTracingSampling: the caller's sampled flag decides (parent-based);
// without a caller's span, the sampling rate does.
func TestTracingSampling(t *testing.T) {
	unsampled := []string{"traceparent", "00-" + callerTrace + "-" + callerSpan + "-00"}
	sampled := []string{"traceparent", "00-" + callerTrace + "-" + callerSpan + "-01"}
	tests := []struct {
		name      string
		rate      float64
		give      []string
		wantSpans int
	}{
		{"unsampled caller, rate 1", 1, unsampled, 0},
		{"unsampled b3 caller, rate 1", 1, []string{"b3", callerTrace + "-" + callerSpan + "-0"}, 0},
		{"sampled caller, rate 0", 0, sampled, 1},
		{"no caller, rate 0", 0, nil, 0},
		{"no caller, rate 1", 1, nil, 1},
		{"malformed traceparent, rate 0", 0, []string{"traceparent", "00-xyz-" + callerSpan + "-01"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := startTraced(t, tt.rate, limits.FailLocal)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("tenant", "acme")}}
			if _, err := tr.call(t, req, tt.give...); err != nil {
				t.Fatal(err)
			}
			spans := tr.rec.Ended()
			if len(spans) != tt.wantSpans {
				t.Fatalf("%d spans, want %d", len(spans), tt.wantSpans)
			}
			if len(spans) == 1 && tt.give == nil && spans[0].Parent().IsValid() {
				t.Errorf("a call without a caller's span got parent %v", spans[0].Parent())
			}
		})
	}
}

// TestTracingOutcomes: the span says what answered: the limit over, a
// failure mode with the store's error, or nothing at all; and it marks a
// failed call as an error with its gRPC code.
func TestTracingOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		mode     limits.FailureMode
		down     bool
		give     *rlsv3.RateLimitRequest
		want     map[string]any
		wantCode codes.Code
	}{
		{
			name: "over limit", mode: limits.FailLocal,
			give: &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 101, Descriptors: []*rlscommon.RateLimitDescriptor{desc("generic_key", "global")}},
			want: map[string]any{"ratelimit.code": "OVER_LIMIT", "ratelimit.decided_by": "memory"},
		},
		{
			name: "no limit", mode: limits.FailLocal,
			give: &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*rlscommon.RateLimitDescriptor{desc("k", "v")}},
			want: map[string]any{"ratelimit.code": "OK", "ratelimit.decided_by": "none"},
		},
		{
			name: "failure mode open", mode: limits.FailOpen, down: true,
			give: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("tenant", "acme")}},
			want: map[string]any{"ratelimit.code": "OK", "ratelimit.decided_by": "failure_mode_open",
				"ratelimit.store_error": "dial 127.0.0.1:1: connection refused: store unavailable"},
		},
		{
			name: "failure mode error", mode: limits.FailError, down: true,
			give: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("tenant", "acme")}},
			want: map[string]any{"ratelimit.decided_by": "failure_mode_error",
				"ratelimit.store_error": "dial 127.0.0.1:1: connection refused: store unavailable"},
			wantCode: codes.Unavailable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := startTraced(t, 1, tt.mode)
			tr.down.Down.Store(tt.down)
			_, err := tr.call(t, tt.give)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("call: %v, want code %v", err, tt.wantCode)
			}
			spans := tr.rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			got := attrs(spans[0])
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if _, ok := tt.want["ratelimit.store_error"]; !ok && got["ratelimit.store_error"] != nil {
				t.Errorf("ratelimit.store_error = %v, want none", got["ratelimit.store_error"])
			}
			if got["rpc.grpc.status_code"] != int64(tt.wantCode) {
				t.Errorf("rpc.grpc.status_code = %v, want %d", got["rpc.grpc.status_code"], tt.wantCode)
			}
			wantStatus := otelcodes.Unset
			if tt.wantCode != codes.OK {
				wantStatus = otelcodes.Error
			}
			if st := spans[0].Status(); st.Code != wantStatus {
				t.Errorf("span status %v, want %v", st, wantStatus)
			}
		})
	}
}

// TestTracingMessagePath: a caller holding a message (the HTTP /json
// endpoint, or a gRPC server with an interceptor) is traced too, from the
// metadata in its context.
func TestTracingMessagePath(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background()) //nolint:errcheck // nothing to flush
	srv := envoy.NewServer(limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{}), zap.NewNop(),
		envoy.Options{Tracing: &envoy.Tracing{Tracer: tp.Tracer("test"), Propagator: tracing.Propagator(), Store: "memory"}})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01"))
	if _, err := srv.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("tenant", "acme")}}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].SpanContext().TraceID().String() != callerTrace {
		t.Fatalf("spans %v, want one in the caller's trace", spans)
	}
	if got := attrs(spans[0])["ratelimit.descriptors"]; got != int64(1) {
		t.Errorf("ratelimit.descriptors = %v, want 1", got)
	}
}
