package redis

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the store's spans.
const tracerName = "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"

var clientSpan = []trace.SpanStartOption{
	trace.WithSpanKind(trace.SpanKindClient),
	trace.WithAttributes(attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "EVALSHA")),
}

// modeNames name apply.lua's modes in spans: apply decides a request,
// and on a Cluster, where a request's keys span slots, reserve decides
// one slot group and report reads a rejected request's state again.
var modeNames = map[string]string{modeApply: "apply", modeReserve: "reserve", modeReport: "report"}

// spanFacts is what a traced call's span tells of the round trip the
// call went in. exec sets a call's facts; the call's own caller copies
// them out once woken (see wait), so that a call whose caller gave up is
// never read by it.
type spanFacts struct {
	queued  bool          // went through the queue, not straight out
	led     bool          // its caller sent the round trip
	batch   int           // the calls of the round trip
	scripts int           // the apply.lua calls they made
	sent    time.Duration // when the round trip started, on clock
}

// traced runs c as do does, within a span that is the child of parent,
// the caller's recording span: one span per call, from when it is made
// to when its reply arrives, so that it covers the wait for a round
// trip under way as well as its own. A call that waited has the event
// "sent" when its round trip started, and says how many calls went in
// that round trip; one that went straight out went alone. A call whose
// caller gave up, or whose context ended, before its round trip started
// says it was queued in a batch of 0.
//
// The span's tracer comes from parent's provider: the store has no
// tracer of its own, and costs nothing when its callers trace nothing.
func (p *pipe) traced(c *call, parent trace.Span) ([]int64, error) {
	_, span := parent.TracerProvider().Tracer(tracerName).Start(c.ctx, "redis EVALSHA", clientSpan...)
	f := spanFacts{batch: 1, scripts: 1}
	c.span = &f
	keys, mode := len(c.keys), modeNames[baseMode(c.mode)]
	reply, err := p.do(c) // recycles c
	span.SetAttributes(
		attribute.String("ratelimit.redis.mode", mode),
		attribute.Int("ratelimit.redis.keys", keys),
		attribute.Bool("ratelimit.redis.queued", f.queued),
		attribute.Int("ratelimit.redis.batch_calls", f.batch),
		attribute.Int("ratelimit.redis.batch_scripts", f.scripts),
	)
	if f.queued && f.batch > 0 {
		span.SetAttributes(attribute.Bool("ratelimit.redis.led", f.led))
		span.AddEvent("sent", trace.WithTimestamp(epoch.Add(f.sent)))
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
	return reply, err
}
