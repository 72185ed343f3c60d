package rlqs_test

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fakeEnvoy plays Envoy's rate_limit_quota filter on one RLQS stream, as
// its source (global_client_impl.cc) does: a bucket's first request is
// decided by no_assignment_behavior (here DENY_ALL) and sends the
// bucket's first report, its subscription; a token bucket assignment
// starts full and is kept when an assignment repeats it exactly
// (max_tokens, tokens_per_fill, fill_interval's nanos); it refills at
// tokens_per_fill per whole seconds of fill_interval; an assignment
// expires after the whole seconds of its time to live, and the bucket
// then falls back to no_assignment_behavior (no expired_assignment_behavior
// is configured). Time is the test's clock.
type fakeEnvoy struct {
	t       testing.TB
	now     func() time.Time
	domain  string
	stream  rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	sent    bool // the domain went out in the first message
	buckets map[string]*fakeBucket
}

type fakeBucket struct {
	id              map[string]string
	allowed, denied uint64
	assigned        bool
	expires         time.Time
	strategy        *typev3.RateLimitStrategy
	tokens          float64 // of a token bucket strategy
	rate            float64 // tokens per second
	last            time.Time
}

func dialEnvoy(t testing.TB, addr, domain string, now func() time.Time) *fakeEnvoy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeEnvoy{t: t, now: now, domain: domain, stream: stream, buckets: make(map[string]*fakeBucket)}
}

// request decides one request into bucket id and reports whether it
// was allowed.
func (e *fakeEnvoy) request(id map[string]string) bool {
	k := idKey(id)
	b := e.buckets[k]
	if b == nil {
		b = &fakeBucket{id: id, denied: 1}
		e.buckets[k] = b
		e.send([]*fakeBucket{b})
		return false
	}
	ok := b.allow(e.now())
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

// reportAll sends every bucket's usage, as the reporting timer does.
func (e *fakeEnvoy) reportAll() {
	var bs []*fakeBucket
	for _, b := range e.buckets {
		bs = append(bs, b)
	}
	e.send(bs)
}

// send reports bs and applies the server's response to the report.
func (e *fakeEnvoy) send(bs []*fakeBucket) {
	e.t.Helper()
	msg := &rlqspb.RateLimitQuotaUsageReports{}
	if !e.sent {
		msg.Domain, e.sent = e.domain, true
	}
	for _, b := range bs {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: b.id}, NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied = 0, 0
	}
	if err := e.stream.Send(msg); err != nil {
		e.t.Fatalf("send report: %v", err)
	}
	resp, err := e.stream.Recv()
	if err != nil {
		e.t.Fatalf("receive response: %v", err)
	}
	for _, a := range resp.GetBucketAction() {
		e.apply(a)
	}
}

func (e *fakeEnvoy) apply(a *rlqspb.RateLimitQuotaResponse_BucketAction) {
	k := idKey(a.GetBucketId().GetBucket())
	b := e.buckets[k]
	if b == nil {
		e.t.Errorf("action for a bucket never reported: %v", a.GetBucketId())
		return
	}
	if a.GetAbandonAction() != nil {
		delete(e.buckets, k)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	s := qa.GetRateLimitStrategy()
	now := e.now()
	if tb := s.GetTokenBucket(); tb != nil {
		old := b.strategy.GetTokenBucket()
		if !b.assigned || old == nil || old.GetMaxTokens() != tb.GetMaxTokens() ||
			old.GetTokensPerFill().GetValue() != tb.GetTokensPerFill().GetValue() ||
			old.GetFillInterval().GetNanos() != tb.GetFillInterval().GetNanos() {
			b.tokens = float64(tb.GetMaxTokens())
			b.rate = float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().GetSeconds())
			b.last = now
		}
	}
	if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_RequestsPerTimeUnit_); ok {
		e.t.Errorf("requests_per_time_unit assigned: Envoy ignores it")
		return
	}
	b.assigned, b.strategy = true, s
	b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
}

// allow decides one request as the bucket's assignment says.
func (b *fakeBucket) allow(now time.Time) bool {
	if b.assigned && !now.Before(b.expires) {
		b.assigned, b.strategy = false, nil
	}
	if !b.assigned {
		return false // no_assignment_behavior: DENY_ALL
	}
	if tb := b.strategy.GetTokenBucket(); tb != nil {
		b.tokens = min(float64(tb.GetMaxTokens()), b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
		if b.tokens < 1 {
			return false
		}
		b.tokens--
		return true
	}
	return b.strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
}

func idKey(id map[string]string) string {
	return (&rlqspb.BucketId{Bucket: id}).String()
}
