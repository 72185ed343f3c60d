package rlqs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// planKind is how a bucket is answered.
type planKind uint8

const (
	planAllow planKind = iota // no limit applies: ALLOW_ALL
	planDeny                  // the rule cannot be served and its domain fails closed: DENY_ALL
	planGrant                 // quota granted from the limit's counter
)

// plan is what a bucket's entries matched under one ruleset.
type plan struct {
	kind  planKind
	limit *limits.Limit // planGrant only
	key   string        // the limit's store key, as the RLS path builds it
	why   string        // for planAllow and planDeny: why, for the log
}

// bucket is one subscribed bucket of one stream.
type bucket struct {
	id      *rlqspb.BucketId
	entries []limits.Entry // sorted by key
	rules   *limits.Ruleset
	plan    plan
	// The live grant: a token bucket of granted tokens that Envoy may
	// spend until until (local time), by which its window has not ended.
	live    bool
	granted uint64
	used    uint64 // allowed reported since the grant was sent
	until   time.Time
	gen     int32 // grants sent, to tell Envoy each one is new
}

// report handles one bucket's usage report and returns the action to
// send for it, or nil when its assignment stands.
func (s *Server) report(ctx context.Context, st *streamState, u *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) (*rlqspb.RateLimitQuotaResponse_BucketAction, error) {
	ents, err := entriesOf(u.GetBucketId())
	if err != nil {
		return nil, err
	}
	k := bucketKey(ents)
	b := st.buckets[k]
	if b == nil {
		if len(st.buckets) >= s.o.MaxBuckets {
			return nil, fmt.Errorf("bucket_id: more than %d buckets on one stream", s.o.MaxBuckets)
		}
		// What a stream holds is bounded by MaxBuckets times what one
		// bucket may hold: the RLS path's bounds on entries and bytes.
		req := limits.Request{Domain: st.domain, Descriptors: []limits.Descriptor{{Entries: ents}}}
		if err := s.rules.Validate(&req); err != nil {
			return nil, fmt.Errorf("bucket_id, matched as a descriptor: %w", err)
		}
		b = &bucket{id: u.GetBucketId(), entries: ents}
		st.buckets[k] = b
	}
	if rs := s.rules.Rules(); rs != b.rules {
		p := s.match(rs, st.domain, ents)
		if p.kind != b.plan.kind || p.key != b.plan.key || (p.limit != nil && !sameLimit(p.limit, b.plan.limit)) {
			if p.kind != planGrant {
				s.log.Warn("rlqs bucket not served from a limit", zap.String("domain", st.domain),
					zap.String("bucket", k), zap.String("reason", p.why))
			}
			b.live = false // re-assign under the new plan
		}
		b.rules, b.plan = rs, p
	}
	switch b.plan.kind {
	case planAllow:
		return blanket(b.id, typev3.RateLimitStrategy_ALLOW_ALL, s.o.BlanketTTL), nil
	case planDeny:
		return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, s.o.BlanketTTL), nil
	}
	return s.grant(ctx, st.domain, b, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()), nil
}

// grant charges a report against b's live grant and, when the grant is
// spent or ends, takes a new one from the store.
func (s *Server) grant(ctx context.Context, domain string, b *bucket, allowed, denied uint64) *rlqspb.RateLimitQuotaResponse_BucketAction {
	now := s.o.Now()
	b.used += allowed
	if b.live && now.Before(b.until.Add(-s.o.Margin)) && b.used < b.granted-b.granted/4 {
		return nil // three quarters or more of it left
	}
	b.live = false
	l := b.plan.limit
	cap := leaseOf(l)
	// Size the grant from the report rate: twice what the last report
	// asked for (allowed and denied), at least a quarter of the cap.
	want := min(max(2*(allowed+denied), cap/4, 1), cap)
	sent := now
	batch := limits.Batch{Checks: []limits.Check{{Key: b.plan.key, Limit: l, Extra: want}}}
	if err := s.store.Apply(ctx, &batch); err != nil {
		return s.storeFailed(domain, b, err)
	}
	out := batch.Outcomes[0]
	if out.Over || out.Granted == 0 {
		// Run dry (a grant never takes the last hit): deny until it resets.
		return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, max(out.Reset, time.Second))
	}
	until := sent.Add(out.GrantFor)
	ttl := until.Sub(s.o.Now()) - s.o.Margin
	if ttl < time.Second {
		// Too close to the window's end for a whole-second time to live:
		// the hits go back, and Envoy is denied until the next window.
		s.giveBack(ctx, b, out)
		return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, max(until.Sub(s.o.Now()), time.Second))
	}
	g := min(out.Granted, math.MaxUint32)
	b.live, b.granted, b.used, b.until = true, g, 0, until
	b.gen = b.gen%999_999_999 + 1
	return tokenBucket(b.id, g, l.Window(), b.gen, ttl)
}

// giveBack returns a grant that was not assigned, if the store takes
// hits back.
func (s *Server) giveBack(ctx context.Context, b *bucket, out limits.Outcome) {
	if s.ret == nil {
		return
	}
	c := []limits.Check{{Key: b.plan.key, Limit: b.plan.limit, Hits: out.Granted}}
	if err := s.ret.Return(ctx, c, []int64{out.GrantReceipt}); err != nil {
		s.log.Warn("rlqs return of an unassigned grant failed", zap.Error(err))
	}
}

// storeFailed answers b by its domain's failure mode while the store
// cannot grant: open allows all, every other mode denies all (the local
// fallback is not built for RLQS yet), for BlanketTTL.
func (s *Server) storeFailed(domain string, b *bucket, err error) *rlqspb.RateLimitQuotaResponse_BucketAction {
	mode := s.rules.FailureMode(domain)
	s.log.Warn("rlqs grant failed", zap.String("domain", domain), zap.Stringer("failure_mode", mode), zap.Error(err))
	if mode == limits.FailOpen {
		return blanket(b.id, typev3.RateLimitStrategy_ALLOW_ALL, s.o.BlanketTTL)
	}
	return blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, s.o.BlanketTTL)
}

// match maps a bucket's entries, as a descriptor, to a plan under rs.
func (s *Server) match(rs *limits.Ruleset, domain string, ents []limits.Entry) plan {
	x := rs.Explain(domain, ents)
	var enforced []limits.KeyedLimit
	for _, kl := range x.Limits {
		if !kl.Limit.Shadow {
			enforced = append(enforced, kl)
		}
	}
	fail := func(why string) plan {
		if s.rules.FailureMode(domain) == limits.FailOpen {
			return plan{kind: planAllow, why: why}
		}
		return plan{kind: planDeny, why: why}
	}
	switch {
	case x.Result != limits.MatchLimited:
		return plan{kind: planAllow, why: x.Reason}
	case len(enforced) == 0:
		return plan{kind: planAllow, why: "only shadow limits apply"}
	case len(enforced) > 1:
		return fail(fmt.Sprintf("%d limits apply; RLQS serves one limit per bucket", len(enforced)))
	}
	l := enforced[0].Limit
	switch {
	case l.Unlimited:
		return plan{kind: planAllow, why: "the rule is unlimited"}
	case l.Algorithm != limits.FixedWindow:
		return fail(fmt.Sprintf("algorithm %s is not served over RLQS yet (fixed_window is)", l.Algorithm))
	case l.Window() < 3*time.Second:
		return fail(fmt.Sprintf("window %s is too short for Envoy's whole-second assignments", l.Window()))
	}
	return plan{kind: planGrant, limit: l, key: enforced[0].Key}
}

// sameLimit reports whether a and b are the same limit's numbers.
func sameLimit(a, b *limits.Limit) bool {
	return b != nil && a.CountsLike(b) && a.Lease == b.Lease
}

// leaseOf is the most one grant takes: the limit's lease, else a tenth
// of the limit.
func leaseOf(l *limits.Limit) uint64 {
	if l.Lease > 0 {
		return l.Lease
	}
	return max(l.Requests/10, 1)
}

// entriesOf turns a bucket id into descriptor entries, sorted by key.
func entriesOf(id *rlqspb.BucketId) ([]limits.Entry, error) {
	m := id.GetBucket()
	if len(m) == 0 {
		return nil, errors.New("bucket_id.bucket: must not be empty")
	}
	ents := make([]limits.Entry, 0, len(m))
	for k, v := range m {
		if k == "" {
			return nil, errors.New("bucket_id.bucket: empty key")
		}
		ents = append(ents, limits.Entry{Key: k, Value: v})
	}
	slices.SortFunc(ents, func(a, b limits.Entry) int { return strings.Compare(a.Key, b.Key) })
	return ents, nil
}

// bucketKey is an injective string for sorted entries.
func bucketKey(ents []limits.Entry) string {
	var b []byte
	for _, e := range ents {
		b = strconv.AppendInt(b, int64(len(e.Key)), 10)
		b = append(b, ':')
		b = append(b, e.Key...)
		b = strconv.AppendInt(b, int64(len(e.Value)), 10)
		b = append(b, ':')
		b = append(b, e.Value...)
	}
	return string(b)
}

// blanket is an assignment of rule for ttl, in whole seconds (Envoy
// reads only the seconds), at least one.
func blanket(id *rlqspb.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assign(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, max(ttl, time.Second))
}

// tokenBucket assigns a token bucket of n tokens that Envoy can spend
// once: it starts full and refills one token per fill interval, which is
// longer than the window, so within the time to live (shorter than the
// window) it refills none. gen, in the interval's nanoseconds, makes
// every grant a new strategy: Envoy keeps its current token bucket when
// an assignment repeats it.
func tokenBucket(id *rlqspb.BucketId, n uint64, window time.Duration, gen int32, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	tb := &typev3.TokenBucket{
		MaxTokens:     uint32(n),
		TokensPerFill: wrapperspb.UInt32(1),
		FillInterval:  &durationpb.Duration{Seconds: int64(window/time.Second) + 1, Nanos: gen},
	}
	return assign(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, ttl)
}

func assign(id *rlqspb.BucketId, strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: &durationpb.Duration{Seconds: int64(ttl / time.Second)},
				RateLimitStrategy:    strategy,
			},
		},
	}
}
