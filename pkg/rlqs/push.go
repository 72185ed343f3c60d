package rlqs

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
)

// pushQuantum is the shortest time between two pushes of a stream:
// buckets that come due within it of the last push wait for the next,
// so that a stream of many buckets, each due at a time of its own, does
// not wake the server once per bucket (each push visits every bucket).
const pushQuantum = 20 * time.Millisecond

// arm sets the stream's timer to the earliest time a bucket wants a push,
// but no sooner than pushQuantum after the last.
// It requires st.mu.
func (st *streamState) arm() {
	s := st.srv
	var next time.Time
	for _, b := range st.buckets {
		for _, at := range [2]time.Time{b.push, b.refresh} {
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
	}
	if soonest := st.pushed.Add(pushQuantum); !next.IsZero() && next.Before(soonest) {
		next = soonest // a push visits every bucket: not once per bucket
	}
	if st.stop != nil {
		if next.Equal(st.due) {
			return
		}
		st.stop()
		st.stop = nil
	}
	if next.IsZero() || st.closed {
		return
	}
	st.due = next
	st.timer++
	gen := st.timer
	st.stop = s.o.AfterFunc(max(next.Sub(s.o.Now()), 0), func() { st.push(gen) })
}

// push sends, between reports, a new assignment for each busy bucket
// whose time has come: a window's grant when its window ends, a bucket's
// before its grant's time to live does, either when a limit that ran dry
// can grant again, and a grant that the last report's rate says is
// spent before the next report, when it is. A bucket whose last report held no requests gets
// none: it needs no quota until it asks.
func (st *streamState) push(gen uint64) {
	s := st.srv
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || gen != st.timer {
		// A timer that fired while arm replaced it, which it could not
		// stop any more: the one armed after it stands.
		return
	}
	st.stop = nil
	st.pushed = s.o.Now()
	if s.o.Tracer != nil {
		var span trace.Span
		st.op, span = s.o.Tracer.Start(st.ctx, "rlqs push", trace.WithSpanKind(trace.SpanKindServer))
		st.sent = 0
		defer func() {
			st.endSpan(span, len(st.buckets), nil)
			st.op = nil
		}()
	}
	now := s.o.Now()
	resp := &rlqspb.RateLimitQuotaResponse{}
	for _, b := range st.buckets {
		if !b.refresh.IsZero() && !b.refresh.After(now) && (b.push.IsZero() || b.push.After(now)) {
			if a := st.refreshed(b); a != nil {
				resp.BucketAction = append(resp.BucketAction, a)
			}
			continue
		}
		if b.push.IsZero() || b.push.After(now) {
			continue
		}
		b.push = time.Time{}
		topUp := b.topUp
		b.topUp = false
		if b.demand == 0 {
			continue // idle at its last report
		}
		st.rematch(b, true)
		if b.plan.kind != planGrant {
			continue // blanket answers are sent again with every report
		}
		if a := st.grant(b, topUp, true); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	if len(resp.BucketAction) > 0 {
		st.sent = len(resp.BucketAction)
		s.m.Pushed()
		// An error ends the stream, which its handler sees.
		_ = st.send(st.finish(resp))
	}
	st.arm()
}

// refreshed sends b's live grant again, unchanged but for a time to live
// that ends the margin before its window does (see grant), or nil when
// it is too late for a whole second.
func (st *streamState) refreshed(b *bucket) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	b.refresh = time.Time{}
	ttl := b.g.ttl(s.o.Now(), s.o.Margin)
	if !b.g.live || ttl < time.Second {
		return nil
	}
	s.m.Assigned(st.label, "token_bucket", "refresh")
	a := tokenBucket(b.bucketID(), b.g.granted, b.g.every, b.gen, ttl)
	st.timed = append(st.timed, timed{a: a, at: s.o.Now(), window: true, until: b.g.until, ttl: ttl})
	return a
}

// finish readies resp, the message of st being built, to be sent.
//
// The times to live of its token buckets (st.timed) are shortened by the
// time spent since they were computed, once that is more than sendSlack,
// so that a grant sent late cannot be spent later than it was counted
// for: a window's must still end the margin before its window, and a
// bucket's within its time to live of being counted. A time to live under
// a second becomes zero: Envoy drops it at once.
//
// Before each new token bucket goes a blanket rule for its bucket. Envoy
// (since 1.33) starts a token bucket that replaces another as full as the
// old one was: a grant that follows one Envoy ran dry would start empty.
// Envoy applies a message's actions in order and uses the result once all
// are applied, so the blanket is never in force; the token bucket after
// it replaces no token bucket and starts full. A refresh (the same token
// bucket again) is not new.
func (st *streamState) finish(resp *rlqspb.RateLimitQuotaResponse) *rlqspb.RateLimitQuotaResponse {
	s := st.srv
	now := s.o.Now()
	fresh := 0
	for _, t := range st.timed {
		if t.fresh {
			fresh++
		}
		late := now.Sub(t.at)
		if late <= sendSlack {
			continue
		}
		ttl := t.ttl - late
		if t.window {
			ttl = t.until.Sub(now) - s.o.Margin
		}
		t.a.GetQuotaAssignmentAction().AssignmentTimeToLive.Seconds = int64(max(ttl, 0) / time.Second)
	}
	if fresh > 0 {
		// st.timed is in the order its actions were added to resp.
		out := make([]*rlqspb.RateLimitQuotaResponse_BucketAction, 0, len(resp.BucketAction)+fresh)
		j := 0
		for _, a := range resp.BucketAction {
			if j < len(st.timed) && st.timed[j].a == a {
				if st.timed[j].fresh {
					out = append(out, blanket(a.GetBucketId(), typev3.RateLimitStrategy_DENY_ALL, time.Second))
				}
				j++
			}
			out = append(out, a)
		}
		resp.BucketAction = out
	}
	// Keep no action of resp alive past its send, nor room for a large
	// message's many: a stream between reports holds only its buckets.
	if cap(st.timed) > 64 {
		st.timed = nil
	} else {
		clear(st.timed)
		st.timed = st.timed[:0]
	}
	return resp
}

// timed is a token bucket action of the message being built, and what
// its time to live was computed from.
type timed struct {
	a      *rlqspb.RateLimitQuotaResponse_BucketAction
	fresh  bool          // a new grant, not a refresh
	at     time.Time     // when
	window bool          // a window's grant, which must end the margin before until
	until  time.Time     // its window's end
	ttl    time.Duration // a bucket grant's time to live from at
}

// sendSlack is how long a message may take to build before the times to
// live in it are computed again: the margin allows for the answer's way
// to Envoy, and a message of many buckets, each a Redis call, can take
// longer than that.
const sendSlack = 50 * time.Millisecond
