package rlqs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// streamState is one stream: its buckets, and what serving it needs.
type streamState struct {
	srv  *Server // the server it belongs to
	ctx  context.Context
	mu   sync.Mutex // guards what follows, and send
	send func(*rlqspb.RateLimitQuotaResponse) error
	// closed is set when the stream's handler returns; stop, when set,
	// stops the timer armed to push at due.
	closed  bool
	stop    func() bool
	due     time.Time
	timer   uint64    // the armed timer's number; an older one that fires does nothing
	pushed  time.Time // when the last push ran
	refused bool      // a refusal was logged
	// op is the context of the message being handled, when traced; sent
	// the actions it sent (blankets before new grants aside).
	op   context.Context
	sent int
	// timed are the token buckets of the message being built.
	timed   []timed
	domain  string
	label   string             // domain for metrics: "" when the rules do not define it
	buckets map[string]*bucket // by bucketKey
	h       *holder            // the stream's connection's share (share.go)
}

// serveReport answers one message of usage reports.
func (st *streamState) serveReport(msg *rlqspb.RateLimitQuotaUsageReports) (err error) {
	s := st.srv
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.o.Tracer != nil {
		var span trace.Span
		st.op, span = s.o.Tracer.Start(st.ctx, "rlqs report", trace.WithSpanKind(trace.SpanKindServer))
		defer func() {
			st.endSpan(span, len(msg.GetBucketQuotaUsages()), err)
			st.op = nil
		}()
	}
	// Envoy names the domain in every report; one stream serves one.
	switch d := msg.GetDomain(); {
	case st.domain == "" && d == "":
		return status.Error(codes.InvalidArgument, "domain: must be set in the first message")
	case st.domain == "":
		st.domain = d
	case d != "" && d != st.domain:
		return status.Errorf(codes.InvalidArgument, "domain: %q, but the stream serves %q, named by its first message", d, st.domain)
	}
	if s.rules.Rules().HasDomain(st.domain) {
		st.label = st.domain
	} else {
		st.label = ""
	}
	resp := &rlqspb.RateLimitQuotaResponse{}
	for i, u := range msg.GetBucketQuotaUsages() {
		a, err := st.report(u)
		if err != nil {
			// One bucket Envoy cannot be served for does not end the
			// stream: Envoy would send it again with every report, and
			// every other bucket would go without quota.
			a = st.refuse(u, fmt.Errorf("bucket_quota_usages[%d].%w", i, err))
		}
		if a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	resp.BucketAction = append(resp.BucketAction, st.repay()...)
	st.sent = len(resp.BucketAction)
	resp = st.finish(resp)
	// Armed before the answer goes out, so that whoever has the answer
	// knows the next push is set (a fake clock's test advances at once);
	// the push waits for st.mu, which the send holds.
	st.arm()
	return st.send(resp)
}

// report handles one bucket's usage report and returns the action to
// send for it, or nil when its assignment stands.
func (st *streamState) report(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) (*rlqspb.RateLimitQuotaResponse_BucketAction, error) {
	s := st.srv
	ents, err := entriesOf(u.GetBucketId())
	if err != nil {
		return nil, err
	}
	now := s.o.Now()
	k := bucketKey(ents)
	b := st.buckets[k]
	if b == nil {
		var unheld *rlqspb.RateLimitQuotaResponse_BucketAction
		if b, unheld, err = st.subscribe(u, k, ents, now); b == nil {
			return unheld, err
		}
	}
	allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
	s.m.Usage(st.label, allowed, denied)
	b.counted(allowed, denied, now)
	st.settle(b, allowed, now)
	if allowed+denied > 0 {
		b.active = now
	} else if now.Sub(b.active) >= s.o.IdleAfter {
		// Idle: Envoy drops the bucket and subscribes again at its next
		// request, and the stream's room for buckets is kept for busy ones.
		st.drop(k)
		s.m.Assigned(st.label, "abandon", "idle")
		return abandon(b.bucketID()), nil
	}
	st.rematch(b, false)
	if b.plan.kind != planGrant {
		// The rules changed under it: no longer served from a limit, so
		// no longer kept.
		st.drop(k)
		return st.unheld(u, b.plan), nil
	}
	return st.grant(b, false, false), nil
}

// subscribe keeps a bucket new to st, under k, if a limit serves it; a
// bucket no limit serves is answered (unheld) and not kept, so that such
// buckets cost nothing between reports. What a stream holds is bounded
// by MaxBuckets times what one bucket may hold: the RLS path's bounds on
// entries and bytes.
func (st *streamState) subscribe(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, k string, ents []limits.Entry, now time.Time) (b *bucket, unheld *rlqspb.RateLimitQuotaResponse_BucketAction, err error) {
	s := st.srv
	req := limits.Request{Domain: st.domain, Descriptors: []limits.Descriptor{{Entries: ents}}}
	if err := s.rules.Validate(&req); err != nil {
		return nil, nil, fmt.Errorf("bucket_id, matched as a descriptor: %w", err)
	}
	rs := s.rules.Rules()
	s.noteRules(rs)
	p := s.plans.match(rs, st.domain, ents)
	if p.kind != planGrant {
		return nil, st.unheld(u, p), nil
	}
	if len(st.buckets) >= s.o.MaxBuckets {
		return nil, nil, fmt.Errorf("bucket_id: more than %d buckets on one stream", s.o.MaxBuckets)
	}
	// The id is held once, and the limit's store key, which holds the
	// values again, beside it.
	cost := len(k) + len(p.key)
	if err := s.hold(st.h, cost); err != nil {
		return nil, nil, err
	}
	// Grants are told apart by a number (see tokenBucket); it starts
	// anywhere, so that a new stream's first grant does not repeat the
	// one Envoy still holds from a stream before.
	b = &bucket{entries: compactEntries(k, len(ents)), cost: cost, active: now, last: now, gen: rand.Int32N(maxGen)}
	st.buckets[k] = b
	s.m.Buckets(1)
	return b, nil, nil
}

// settle gives back, once a report surely tells all Envoy spent of
// them, the hits of a replaced grant that were never spent, and ends a
// live grant that Envoy can no longer spend.
func (st *streamState) settle(b *bucket, allowed uint64, now time.Time) {
	s := st.srv
	if r := b.ret; r.hits > 0 {
		// At most allowed of its hits were spent since it was last
		// reported on; once a report is surely later than the last
		// spending, the rest never will be.
		r.hits -= min(allowed, r.hits)
		b.ret = r
		if !now.Before(r.after) {
			b.ret = giveBack{}
			if r.ends.IsZero() || now.Before(r.ends) {
				st.giveBack(r)
			}
		}
	}
	if b.g.over(now) {
		// What is left goes back once a report surely tells all it spent
		// (but a window's, whose window has ended, where nothing is taken
		// back).
		b.g.live = false
		if r := b.g.unspent(); b.g.from == fromShared && b.g.limit.Algorithm.Bucketed() && r > 0 && b.ret.hits == 0 {
			g := b.g.back(r, b.g.dead.Add(s.o.Margin))
			if now.Before(g.after) {
				b.ret = g // this report may have been sent before the end
			} else {
				st.giveBack(g)
			}
		}
	}
}

// rematch matches b again when the rules changed since it last was; a
// bucket whose limit changed is assigned anew (by a push when pushed).
func (st *streamState) rematch(b *bucket, pushed bool) {
	s := st.srv
	rs := s.rules.Rules()
	if rs == b.rules {
		return
	}
	s.noteRules(rs)
	p := s.plans.match(rs, st.domain, b.entries)
	if p.kind != b.plan.kind || p.key != b.plan.key || p.ttl != b.plan.ttl ||
		(p.rule != nil && !p.rule.GrantsLike(b.plan.rule)) {
		if p.kind != planGrant && p.reason != "no_rule" {
			s.log.Warn("rlqs bucket not served from a limit", zap.String("domain", st.domain),
				zap.String("bucket", bucketKey(b.entries)), zap.String("reason", p.why))
		}
		b.replaced(s.o.Now(), pushed, s.o.Margin)
		b.g.live, b.push = false, time.Time{} // assign anew under the new plan
	}
	b.rules, b.plan = rs, p
}

// unheld answers a bucket that is not kept because p does not serve it
// from a limit: by p's blanket rule while Envoy reports requests in it,
// and with abandon at the first report without any, so that Envoy's
// report does not carry it for good. Envoy then decides its next request
// by no_assignment_behavior and subscribes it again.
func (st *streamState) unheld(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, p plan) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	id := u.GetBucketId()
	if u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() == 0 {
		s.m.Assigned(st.label, "abandon", p.reason)
		return abandon(id)
	}
	if p.kind == planDeny {
		s.m.Assigned(st.label, "deny_all", p.reason)
		return blanket(id, typev3.RateLimitStrategy_DENY_ALL, s.o.BlanketTTL)
	}
	s.m.Assigned(st.label, "allow_all", p.reason)
	return blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, s.o.BlanketTTL)
}

// refuse answers a bucket the stream cannot hold (past MaxBuckets or the
// process's bounds) or whose id breaks the request bounds by the domain's
// failure mode, for BlanketTTL, without keeping it; or, when the report
// holds no requests for it, with abandon, so that Envoy forgets it (see
// unheld). The first refusal of a stream is logged; all are counted.
func (st *streamState) refuse(u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, err error) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	id := u.GetBucketId()
	if u.GetNumRequestsAllowed()+u.GetNumRequestsDenied() == 0 && len(id.GetBucket()) > 0 {
		s.m.Assigned(st.label, "abandon", "refused")
		return abandon(id)
	}
	if errors.Is(err, ErrServerFull) {
		// Logged once for the process, not per stream: many streams
		// past the bound would otherwise log one each.
		if !s.fullLogged.Swap(true) {
			s.log.Warn("rlqs bucket refused: the server holds its most buckets; later refusals are only counted",
				zap.Int("max_total_buckets", s.o.MaxTotalBuckets), zap.Int64("max_total_bytes", s.o.MaxTotalBytes))
		}
	} else if !st.refused {
		st.refused = true
		s.log.Warn("rlqs bucket refused; later refusals on this stream are only counted",
			zap.String("domain", st.domain), zap.Error(err))
	}
	if s.rules.FailureMode(st.domain) == limits.FailOpen {
		s.m.Assigned(st.label, "allow_all", "refused")
		return blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, s.o.BlanketTTL)
	}
	s.m.Assigned(st.label, "deny_all", "refused")
	return blanket(id, typev3.RateLimitStrategy_DENY_ALL, s.o.BlanketTTL)
}

// drop lets go of b, kept under k. What its live grant holds is not given
// back: Envoy may spend from it until the abandon or the new answer
// reaches it, and no later report would tell.
func (st *streamState) drop(k string) {
	s := st.srv
	s.release(st.h, st.buckets[k].cost)
	delete(st.buckets, k)
	s.m.Buckets(-1)
}

// endSpan ends the span of a message of st that considered buckets.
func (st *streamState) endSpan(span trace.Span, buckets int, err error) {
	span.SetAttributes(
		attribute.String("ratelimit.domain", st.domain),
		attribute.Int("rlqs.buckets", buckets),
		attribute.Int("rlqs.actions", st.sent),
	)
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// ctxOf is the context of st's store calls: the span of the message
// being handled, if traced, else the stream's.
func (st *streamState) ctxOf() context.Context {
	if st.op != nil {
		return st.op
	}
	return st.ctx
}

// grant takes a new grant from the store for b, unless its live grant
// stands: a grant is replaced only once Envoy has reported all of it
// used, when it ends, or (topUp, from a push) when the rate of the last
// report says it is spent, since a new token bucket replaces Envoy's and
// the tokens left in the old one are lost. It also sets when b wants a
// push.
func (st *streamState) grant(b *bucket, topUp, pushed bool) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	now := s.o.Now()
	if !topUp && b.g.stands(now, s.o.Margin) {
		b.planTopUp(now)
		return nil
	}
	b.replaced(now, pushed, s.o.Margin)
	// Denials the next report holds may be from before a pushed grant
	// reached Envoy, whether or not it replaced one: they do not say it
	// ran out (see counted).
	b.pushed = b.pushed || pushed
	b.g.live, b.push, b.topUp, b.refresh = false, time.Time{}, false, time.Time{}
	p := &b.plan
	want := b.wanted()
	if left := windowLeft(p.limit, now); p.ttl == 0 && left-s.o.Margin < time.Second {
		// Too close to the window's end for a whole-second time to live
		// by the sidecar's clock: deny until the next window without a
		// grant that would go straight back (two Redis calls for none).
		b.push = now.Add(left + pushDelay)
		s.m.Assigned(st.label, "deny_all", "window_ending")
		return blanket(b.bucketID(), typev3.RateLimitStrategy_DENY_ALL, left)
	}
	t, refused := st.take(b, want)
	if refused != nil {
		return refused
	}
	out := t.out
	if out.Over || out.Granted == 0 {
		return st.dry(b, t, now)
	}
	ttl, ok := b.grantTTL(out, now, s.o.Now, s.o.Margin)
	if !ok {
		// Too close to the window's end for a whole-second time to live:
		// the hits go back (if they were taken from the shared store),
		// and Envoy is denied until the next window.
		if t.from == fromShared {
			st.giveBack(giveBack{hits: out.Granted, key: p.key, limit: p.limit, receipt: out.GrantReceipt})
		}
		s.m.Assigned(st.label, "deny_all", "window_ending")
		return blanket(b.bucketID(), typev3.RateLimitStrategy_DENY_ALL, b.g.until.Sub(s.o.Now()))
	}
	b.hold(t, want, now, s.o.Margin)
	b.g.every = max(p.limit.Window(), ttl)
	b.refresh = time.Time{}
	if p.ttl == 0 && ttl-ttl.Truncate(time.Second) > 2*refreshEarly {
		// Envoy reads whole seconds, so the assignment lapses up to a
		// second before it must: a second (and a little: timers fire
		// late) before that, the same token bucket is sent again for one
		// second, which Envoy applies keeping its tokens, to live until
		// about the margin before the window's end.
		b.refresh = b.g.until.Add(-s.o.Margin - time.Second - refreshEarly)
	}
	s.m.Granted(st.label, b.g.granted, t.from == fromLocal)
	s.m.Assigned(st.label, "token_bucket", t.from.reason())
	a := tokenBucket(b.bucketID(), b.g.granted, b.g.every, b.gen, ttl)
	st.timed = append(st.timed, timed{a: a, fresh: true, at: now, window: p.ttl == 0, until: b.g.until, ttl: ttl})
	return a
}

// take asks the store for want hits of b's limit. When the store fails,
// the domain's failure mode decides: a blanket answer to send instead
// (refused), or a grant from the memory store.
func (st *streamState) take(b *bucket, want uint64) (t taken, refused *rlqspb.RateLimitQuotaResponse_BucketAction) {
	s := st.srv
	ctx := st.ctxOf()
	p := &b.plan
	own := ownHits(p.limit)
	check := limits.Check{Key: p.key, Limit: p.limit, Hits: own, Extra: want - own}
	batch := limits.Batch{Checks: []limits.Check{check}}
	if err := s.store.Apply(ctx, &batch); err != nil {
		mode := s.rules.FailureMode(st.domain)
		s.log.Warn("rlqs grant failed", zap.String("domain", st.domain), zap.Stringer("failure_mode", mode), zap.Error(err))
		switch mode {
		case limits.FailOpen:
			s.m.Assigned(st.label, "allow_all", "store_error")
			return t, blanket(b.bucketID(), typev3.RateLimitStrategy_ALLOW_ALL, s.o.BlanketTTL)
		case limits.FailLocal:
			batch = limits.Batch{Checks: []limits.Check{check}}
			if err := s.rules.ApplyLocal(ctx, &batch); err == nil {
				t.from = fromLocal
				break
			}
			fallthrough
		default:
			s.m.Assigned(st.label, "deny_all", "store_error")
			return t, blanket(b.bucketID(), typev3.RateLimitStrategy_DENY_ALL, s.o.BlanketTTL)
		}
	}
	t.limit, t.out = batch.Checks[0].Limit, batch.Outcomes[0]
	if own > 0 && !t.out.Over {
		t.out = withOwn(t.limit, t.out, own, s.o.Now())
	}
	return t, nil
}

// dry answers a limit that has run dry (a grant never takes the last
// hit, but on a sliding window: see ownHits): deny until a grant can be
// taken again, and ask again then (a sliding window sooner, as room
// regrows, and at its window's last ask; the push replaces the denial).
func (st *streamState) dry(b *bucket, t taken, now time.Time) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	s.m.Assigned(st.label, "deny_all", "dry")
	d := max(dryFor(t.limit, t.out, now), time.Second)
	next := d
	b.push = now.Add(next + pushDelay)
	if l := b.plan.rule; l.Algorithm == limits.SlidingWindow {
		b.push = regrowAt(l, now, min(next, regrowEvery(l))+pushDelay, 0, s.o.Margin)
	}
	return blanket(b.bucketID(), typev3.RateLimitStrategy_DENY_ALL, d)
}

// giveBack returns r's hits to the shared store, if it takes hits back.
func (st *streamState) giveBack(r giveBack) {
	s := st.srv
	if s.ret == nil || r.hits == 0 {
		return
	}
	c := []limits.Check{{Key: r.key, Limit: r.limit, Hits: r.hits}}
	if err := s.ret.Return(st.ctxOf(), c, []int64{r.receipt}); err != nil {
		s.log.Warn("rlqs return of unspent quota failed", zap.String("domain", st.domain), zap.Error(err))
		return
	}
	s.m.Returned(st.label, r.hits)
}

// repay abandons buckets of st that its connection owes (see holder, in
// share.go), and returns the actions that tell Envoy.
// requires st.mu held
func (st *streamState) repay() []*rlqspb.RateLimitQuotaResponse_BucketAction {
	s := st.srv
	s.hmu.Lock()
	n := min(st.h.owed, len(st.buckets))
	st.h.owed -= n
	s.hmu.Unlock()
	if n == 0 {
		return nil
	}
	out := make([]*rlqspb.RateLimitQuotaResponse_BucketAction, 0, n)
	for k, b := range st.buckets {
		if len(out) == n {
			break
		}
		out = append(out, abandon(b.bucketID()))
		st.drop(k)
		s.m.Assigned(st.label, "abandon", "share")
	}
	return out
}
