package envoy

import (
	"context"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Tracing traces the calls a Server decides: one span per call, the child
// of the caller's span when the call's gRPC metadata carries one. The
// context the store gets carries the span, so that a store can trace its
// own round trips beneath it.
//
// A span has the attributes rpc.system, rpc.service, rpc.method and
// rpc.grpc.status_code, and:
//   - ratelimit.domain: the request's domain;
//   - ratelimit.descriptors: how many descriptors it has;
//   - ratelimit.code: OK or OVER_LIMIT, for a call that was answered;
//   - ratelimit.decided_by: what answered: the store (Store), a layer in
//     front of it (deny_cache, lease), failure_mode_<mode> when the store
//     could not decide, or none when the request reached no limit;
//   - ratelimit.store_error: the store's error, when it could not decide.
//
// Descriptor values never appear: they may be secret. A call that fails
// has the span status Error with the gRPC status's message. A malformed
// request that the gRPC path refuses before deciding gets no span.
type Tracing struct {
	// Tracer starts the spans; required.
	Tracer trace.Tracer
	// Propagator reads the caller's span context from the call's
	// incoming gRPC metadata (traceparent, b3, x-b3-traceid, ...); nil
	// reads none, and every span starts a trace.
	Propagator propagation.TextMapPropagator
	// Store names the backend store in the decided_by attribute, for
	// the decisions it made: redis or memory.
	Store string
}

// spanName is the span's name, as gRPC instrumentation names a server
// span: the full method name without its leading slash.
const spanName = ServiceName + "/ShouldRateLimit"

var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// start starts the span of w's call under ctx, and returns ctx carrying
// it.
func (t *Tracing) start(ctx context.Context, w *work) (context.Context, trace.Span) {
	if t.Propagator != nil {
		w.md = incoming{ctx: ctx}
		ctx = t.Propagator.Extract(ctx, &w.md)
		w.md = incoming{} // keep no context in the pool
	}
	return t.Tracer.Start(ctx, spanName, serverSpan...)
}

// end describes the call of w, which err (a gRPC status, or nil) ended, in
// span, if it is recorded, and ends span.
func (t *Tracing) end(span trace.Span, w *work, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	st, _ := status.FromError(err)
	a := [...]attribute.KeyValue{
		attribute.String("rpc.system", "grpc"),
		attribute.String("rpc.service", ServiceName),
		attribute.String("rpc.method", "ShouldRateLimit"),
		attribute.Int64("rpc.grpc.status_code", int64(st.Code())),
		attribute.String("ratelimit.domain", w.req.Domain),
		attribute.Int("ratelimit.descriptors", len(w.req.Descriptors)),
		attribute.String("ratelimit.decided_by", t.decidedBy(&w.dec)),
		{},
		{},
	}
	n := 7
	if err == nil {
		a[n] = attribute.String("ratelimit.code", rlsv3.RateLimitResponse_Code_name[int32(code(w.dec.Code))])
		n++
	}
	if w.dec.StoreErr != nil {
		a[n] = attribute.String("ratelimit.store_error", w.dec.StoreErr.Error())
		n++
	}
	span.SetAttributes(a[:n]...)
	if err != nil {
		span.SetStatus(otelcodes.Error, st.Message())
	}
	span.End()
}

// decidedBy names what answered d.
func (t *Tracing) decidedBy(d *limits.Decision) string {
	switch {
	case d.Fallback != limits.FailDefault:
		return "failure_mode_" + d.Fallback.String()
	case len(d.Checks()) == 0:
		return "none"
	case d.DecidedBy() != "":
		return d.DecidedBy()
	}
	return t.Store
}

// incoming reads a call's incoming gRPC metadata for a propagator, key by
// key: grpcmd.FromIncomingContext would copy all of it. A key that is
// absent costs a pass over the metadata, so once x-b3-traceid is known to
// be absent, the other X-B3-* headers are not looked up: without a trace
// ID they make no span context.
//
// Each key's value is remembered, since a propagator may look a key up
// more than once (see tracing.Propagator).
type incoming struct {
	ctx     context.Context
	noB3IDs bool // x-b3-traceid was looked up and is absent
	seen    [2]struct{ key, value string }
	n       int // entries of seen in use
}

func (c *incoming) Get(key string) string {
	if c.noB3IDs && strings.HasPrefix(key, "x-b3-") {
		return ""
	}
	for _, s := range c.seen[:c.n] {
		if s.key == key {
			return s.value
		}
	}
	var value string
	if v := grpcmd.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		value = v[0]
	}
	if c.n < len(c.seen) {
		c.seen[c.n].key, c.seen[c.n].value = key, value
		c.n++
	}
	if key == "x-b3-traceid" && value == "" {
		c.noB3IDs = true
	}
	return value
}

func (c *incoming) Set(string, string) {}

func (c *incoming) Keys() []string {
	md, _ := grpcmd.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
