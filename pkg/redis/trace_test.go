package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// recorder returns a real SDK tracer provider that samples as sampler
// says and records the spans that end.
func recorder(t *testing.T, sampler sdktrace.Sampler) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { tp.Shutdown(context.Background()) }) //nolint:errcheck // nothing to flush
	return tp.Tracer("test"), rec
}

// children returns the ended spans whose parent is parent.
func children(rec *tracetest.SpanRecorder, parent trace.SpanContext) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == parent.SpanID() && s.Parent().TraceID() == parent.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	out := map[string]any{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}

// TestTracingRoundTrip: a request whose context carries a recording span
// gets a child span for its Redis call, which says whether it went alone
// or waited for a round trip under way and went in a batch, and when the
// batch was sent; a request without one gets none.
func TestTracingRoundTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)

	t.Run("alone", func(t *testing.T) {
		tracer, rec := recorder(t, sdktrace.AlwaysSample())
		s := newStore(t, redis.Options{URL: urlOf(srv.Addr), MaxInflight: 1})
		ctx, parent := tracer.Start(context.Background(), "decide")
		if err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("alone", l, 1), check("alone2", l, 1)}}); err != nil {
			t.Fatal(err)
		}
		parent.End()
		spans := children(rec, parent.SpanContext())
		if len(spans) != 1 {
			t.Fatalf("%d child spans, want 1", len(spans))
		}
		sp := spans[0]
		if sp.Name() != "redis EVALSHA" || sp.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %q of kind %v", sp.Name(), sp.SpanKind())
		}
		want := map[string]any{
			"db.system.name": "redis", "db.operation.name": "EVALSHA", "ratelimit.redis.mode": "apply", "ratelimit.redis.keys": int64(2),
			"ratelimit.redis.queued": false, "ratelimit.redis.batch_calls": int64(1), "ratelimit.redis.batch_scripts": int64(1),
		}
		if diff := cmp.Diff(want, spanAttrs(sp)); diff != "" {
			t.Errorf("attributes (-want +got):\n%s", diff)
		}
	})

	t.Run("batch", func(t *testing.T) {
		tracer, rec := recorder(t, sdktrace.AlwaysSample())
		// The pause holds the first round trip until the test ends it,
		// however slow the machine is to queue the traced calls behind
		// it: long, since a pause that ran out first would send them one
		// by one. The store's timeout outlasts it.
		s := newStore(t, redis.Options{URL: urlOf(srv.Addr), MaxInflight: 1, Timeout: time.Minute})
		apply(t, s, check("batch", l, 1)) // connect first
		if err := rc.Do(context.Background(), "CLIENT", "PAUSE", 50_000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rc.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
		var wg sync.WaitGroup
		run := func(ctx context.Context) {
			wg.Go(func() {
				if err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("batch", l, 1)}}); err != nil {
					t.Errorf("Apply: %v", err)
				}
			})
		}
		run(context.Background()) // takes the only round trip, untraced
		waitFor(t, func() bool { return redis.Inflight(s) == 1 })
		const traced = 3
		parents := make([]trace.Span, traced)
		for i := range parents {
			var ctx context.Context
			ctx, parents[i] = tracer.Start(context.Background(), fmt.Sprint("decide", i))
			run(ctx)
		}
		waitFor(t, func() bool { return redis.Queued(s) == traced })
		if err := rc.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		led := 0
		for i, p := range parents {
			p.End()
			spans := children(rec, p.SpanContext())
			if len(spans) != 1 {
				t.Errorf("request %d: %d child spans, want 1", i, len(spans))
				continue
			}
			a := spanAttrs(spans[0])
			if a["ratelimit.redis.queued"] != true || a["ratelimit.redis.batch_calls"] != int64(traced) || a["ratelimit.redis.batch_scripts"] != int64(1) {
				t.Errorf("request %d: attributes %v, want queued, %d calls in one script call", i, a, traced)
			}
			if a["ratelimit.redis.led"] == true {
				led++
			}
			ev := spans[0].Events()
			if len(ev) != 1 || ev[0].Name != "sent" || ev[0].Time.Before(spans[0].StartTime()) || ev[0].Time.After(spans[0].EndTime()) {
				t.Errorf("request %d: events %v, want one sent within the span", i, ev)
			}
		}
		if led != 1 {
			t.Errorf("%d spans say they led the batch, want 1", led)
		}
	})

	t.Run("untraced", func(t *testing.T) {
		tracer, rec := recorder(t, sdktrace.NeverSample())
		s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
		ctx, parent := tracer.Start(context.Background(), "decide")
		apply(t, s, check("untraced", l, 1))
		if err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("untraced", l, 1)}}); err != nil {
			t.Fatal(err)
		}
		parent.End()
		if n := len(rec.Ended()); n != 0 {
			t.Errorf("%d spans recorded under an unsampled parent, want 0", n)
		}
	})

	t.Run("error", func(t *testing.T) {
		down := redistest.StartServer(t)
		tracer, rec := recorder(t, sdktrace.AlwaysSample())
		s := newStore(t, redis.Options{URL: urlOf(down.Addr), Timeout: time.Second})
		down.Kill()
		ctx, parent := tracer.Start(context.Background(), "decide")
		err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("error", l, 1)}})
		parent.End()
		if err == nil {
			t.Fatal("Apply succeeded with Redis down")
		}
		spans := children(rec, parent.SpanContext())
		if len(spans) != 1 || spans[0].Status().Code != otelcodes.Error || spans[0].Status().Description == "" {
			t.Fatalf("child spans %v, want one with status Error and the error", spans)
		}
	})
}

// waitFor waits, up to 5 s, until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}
