package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/otlptest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// The callers' spans the tests send, one trace each.
const (
	traceW3C   = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceB3    = "80f198ee56343ba864fe8b2a57d3eff7"
	traceB3Hdr = "463ac35c9f6413ad48485a3953bb6124"
	callerSpan = "00f067aa0ba902b7"
)

// exportWait bounds a wait for spans that must arrive: the sidecar's stop
// flushes them, so they are there once it has stopped.
const exportWait = 5 * time.Second

// callWith sends userRequest(user) with the metadata kv.
func (s *sidecar) callWith(t *testing.T, user string, kv ...string) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	resp, err := s.rls.ShouldRateLimit(ctx, userRequest(user, 0))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
	}
}

// byName returns the spans named name.
func byName(spans []otlptest.Span, name string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

const (
	serverSpanName = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	redisSpanName  = "redis EVALSHA"
)

// TestTracingExport: with --tracing on Redis, each call whose caller is
// sampled, in W3C trace context or B3 (single header or multiple), sends
// a span in the caller's trace, the child of the caller's span, with a
// child span of its own for the Redis round trip, to an OTLP receiver
// over gRPC or HTTP; a call whose caller is not sampled, and one without a
// caller at sampling rate 0, send nothing. The spans are flushed when the
// sidecar stops.
func TestTracingExport(t *testing.T) {
	// The resource's service attributes come from the standard variables.
	t.Setenv("OTEL_SERVICE_NAME", "rls")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=edge,service.instance.id=pod-1")
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), userRules)
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
	}{
		{"grpc", otlptest.StartGRPC},
		{"http", otlptest.StartHTTP},
	} {
		t.Run(tt.protocol, func(t *testing.T) {
			r := tt.start(t)
			s := startSidecar(t, sidecarOpts{args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--redis-key-prefix", "trace-" + tt.protocol + ":",
				"--tracing", "--tracing-protocol", tt.protocol, "--tracing-endpoint", r.URL, "--tracing-sampling-rate", "0"}})
			s.callWith(t, "w3c", "traceparent", "00-"+traceW3C+"-"+callerSpan+"-01")
			s.callWith(t, "b3", "b3", traceB3+"-"+callerSpan+"-1")
			s.callWith(t, "b3multi", "x-b3-traceid", traceB3Hdr, "x-b3-spanid", callerSpan, "x-b3-sampled", "1")
			s.callWith(t, "unsampled", "traceparent", "00-1234567890abcdef1234567890abcdef-"+callerSpan+"-00")
			s.callWith(t, "none")
			if err := s.stop(); err != nil {
				t.Fatal(err)
			}
			spans := r.WaitSpans(6, exportWait)
			servers, stores := byName(spans, serverSpanName), byName(spans, redisSpanName)
			if len(servers) != 3 || len(stores) != 3 || len(spans) != 6 {
				t.Fatalf("received %d spans (%d server, %d redis), want 3 of each", len(spans), len(servers), len(stores))
			}
			var traces []string
			for _, sp := range servers {
				traces = append(traces, sp.TraceID())
				if sp.ParentID() != callerSpan {
					t.Errorf("server span of trace %s has parent %s, want the caller's %s", sp.TraceID(), sp.ParentID(), callerSpan)
				}
				a := sp.Attrs()
				for k, v := range map[string]any{"ratelimit.domain": "edge", "ratelimit.descriptors": int64(1),
					"ratelimit.code": "OK", "ratelimit.decided_by": "redis", "rpc.grpc.status_code": int64(0)} {
					if a[k] != v {
						t.Errorf("server span of trace %s: %s = %v, want %v", sp.TraceID(), k, a[k], v)
					}
				}
				want := map[string]string{"service.name": "rls", "service.namespace": "edge", "service.instance.id": "pod-1", "service.version": version}
				for k, v := range want {
					if sp.Resource[k] != v {
						t.Errorf("resource %s = %q, want %q", k, sp.Resource[k], v)
					}
				}
				i := slices.IndexFunc(stores, func(c otlptest.Span) bool { return c.ParentID() == sp.SpanID() })
				if i < 0 {
					t.Errorf("no redis span is the child of the server span of trace %s", sp.TraceID())
					continue
				}
				if c := stores[i]; c.TraceID() != sp.TraceID() || c.Attrs()["db.system.name"] != "redis" {
					t.Errorf("redis span: trace %s, attributes %v", c.TraceID(), c.Attrs())
				}
			}
			slices.Sort(traces)
			if want := []string{traceB3Hdr, traceW3C, traceB3}; !cmp.Equal(traces, want) {
				t.Errorf("server spans in traces %v, want the sampled callers' %v", traces, want)
			}
		})
	}
}
