package envoy

import (
	"context"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// discard is a span exporter that drops what it is given, so that the
// benchmark measures the server and the SDK, not a receiver.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkHandlerTracing runs the gRPC handler as BenchmarkHandler does,
// with the metadata Envoy sends, untraced and traced at sampling rates 0.01
// and 1: without a caller's span, and under a caller's unsampled one,
// which a parent-based sampler follows whatever the rate.
func BenchmarkHandlerTracing(b *testing.B) {
	const rules = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 1000000000}\n"
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	data, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "alice"}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	dec := func(v any) error {
		w := v.(*work)
		w.bad = w.decode(string(data))
		return nil
	}
	envoyMD := func(kv ...string) grpcmd.MD {
		return grpcmd.Pairs(append([]string{
			"content-type", "application/grpc", "te", "trailers", "user-agent", "envoy",
			"x-envoy-internal", "true", "x-request-id", "8a1d7f3c-5b52-4e8e-9f0a-1c2d3e4f5a6b", "x-envoy-expected-rq-timeout-ms", "20",
		}, kv...)...)
	}
	unsampled := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	for _, bc := range []struct {
		name string
		rate float64 // < 0: untraced
		md   grpcmd.MD
	}{
		{"off", -1, envoyMD()},
		{"rate=0.01", 0.01, envoyMD()},
		{"rate=0.01/unsampled-parent", 0.01, envoyMD("traceparent", unsampled)},
		{"rate=1", 1, envoyMD()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var o Options
			if bc.rate >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(bc.rate))))
				defer tp.Shutdown(context.Background()) //nolint:errcheck // nothing to flush
				o.Tracing = &Tracing{Tracer: tp.Tracer("bench"), Propagator: tracing.Propagator(), Store: "memory"}
			}
			s := NewServer(limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{}), zap.NewNop(), o)
			ctx := grpcmd.NewIncomingContext(context.Background(), bc.md)
			b.ReportAllocs()
			for b.Loop() {
				r, err := shouldRateLimitHandler(s, ctx, dec, nil)
				if err != nil {
					b.Fatal(err)
				}
				if rp, ok := r.(*reply); ok {
					d, _ := rp.take()
					d.Free()
				}
			}
		})
	}
}
