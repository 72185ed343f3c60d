package rlqs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// slowStore takes d of the test's clock per Apply (a Redis round trip).
type slowStore struct {
	next limits.Store
	clk  *storetest.Clock
	d    time.Duration
}

func (s *slowStore) Apply(ctx context.Context, b *limits.Batch) error {
	err := s.next.Apply(ctx, b)
	s.clk.Set(s.clk.Now().Add(s.d)) // Set: runs no timers
	return err
}

func startCustom(t *testing.T, rules string, clk *storetest.Clock, st limits.Store, o rlqs.Options) (string, *rlqstest.Metrics) {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := limits.NewEngine(rs, st, limits.EngineOptions{})
	m := &rlqstest.Metrics{}
	o.Now, o.Metrics = clk.Now, m
	if o.AfterFunc == nil {
		o.AfterFunc = clk.AfterFunc
	}
	return rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, engine, st, zaptest.NewLogger(t), o) }), m
}

func rawStream(t *testing.T, addr string) rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSlowMessage: a window grant's time to live is computed at its
// bucket's turn, and the message is sent after every bucket of it took
// its Redis call: the times to live are computed again before sending,
// so a grant counted in one window is not spendable in the next (with
// 250 ms a call, four of ten grants outlived their window by 0.5 s
// before).
func TestSlowMessage(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	st := &slowStore{next: memory.New(memory.Options{Now: clk.Now}), clk: clk, d: 250 * time.Millisecond}
	addr, _ := startCustom(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`, clk, st, rlqs.Options{})
	s := rawStream(t, addr)
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs"}
	for i := range 10 {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": fmt.Sprint("t", i)}}, NumRequestsAllowed: 1})
	}
	if err := s.Send(msg); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := clk.Now() // when Envoy applies it
	windowEnd := storetest.Epoch.Add(time.Minute)
	for _, a := range resp.GetBucketAction() {
		qa := a.GetQuotaAssignmentAction()
		exp := got.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
		t.Logf("%v: %d tokens, ttl %ds, expires %v after the window's end (margin 1s)", a.GetBucketId().GetBucket(),
			qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens(), qa.GetAssignmentTimeToLive().GetSeconds(), exp.Sub(windowEnd))
		if exp.After(windowEnd.Add(-time.Second)) {
			t.Errorf("%v: grant counted in window 0 is spendable until %v past its end", a.GetBucketId().GetBucket(), exp.Sub(windowEnd))
		}
	}
}

// TestRefreshLateTimer: a real timer fires after its due time, and the
// refresh must still find a whole second to send (1 ms late, it sent
// nothing and the grant lapsed a second early, before it was timed
// earlier).
func TestRefreshLateTimer(t *testing.T) {
	for _, late := range []time.Duration{0, time.Millisecond} {
		t.Run(late.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			addr, m := startCustom(t, fleetRules, clk, memory.New(memory.Options{Now: clk.Now}), rlqs.Options{
				AfterFunc: func(d time.Duration, f func()) func() bool { return clk.AfterFunc(d+late, f) },
			})
			clk.Advance(500 * time.Millisecond)
			e := rlqstest.DialT(t, addr, "rlqs", clk.Now)
			id := map[string]string{"route": "api"}
			mustRequest(t, e, id)
			clk.Advance(57*time.Second + 300*time.Millisecond) // 58.8 s into the window
			if err := e.Sync(m.Pushes()); err != nil {
				t.Fatal(err)
			}
			t.Logf("timer late by %v: %d refreshes; assignment at 58.8s: %v", late, m.Count("token_bucket/refresh"), e.Strategy(id) != nil)
			if m.Count("token_bucket/refresh") != 1 || e.Strategy(id) == nil {
				t.Errorf("timer %v late: no refresh, the grant lapsed at 58s instead of 59s", late)
			}
		})
	}
}

type recRet struct{ hits uint64 }

func (r *recRet) Return(_ context.Context, c []limits.Check, _ []int64) error {
	for _, x := range c {
		r.hits += x.Hits
	}
	return nil
}

// TestReportCrossesPush: Envoy's report, sent just before a pushed top-up
// reached it, must not settle the replaced grant: what Envoy spent of it
// between sending the report and receiving the push is in the next
// report only, so the grant is given back once a report comes a margin
// after the push (before, 3 hits went back of which 2 were spent).
func TestReportCrossesPush(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	ret := &recRet{}
	addr, m := startCustom(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1000, lease: 10}
`, clk, memory.New(memory.Options{Now: clk.Now}), rlqs.Options{Return: ret})
	s := rawStream(t, addr)
	id := &rlqspb.BucketId{Bucket: map[string]string{"route": "api"}}
	send := func(domain string, allowed, denied uint64, recv int) {
		if err := s.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: id, NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}); err != nil {
			t.Fatal(err)
		}
		for range recv {
			r, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range r.GetBucketAction() {
				t.Logf("t=%v got %d tokens", clk.Now().Sub(storetest.Epoch), a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetMaxTokens())
			}
		}
	}
	send("rlqs", 1, 0, 1) // G1 (2 tokens)
	clk.Set(clk.Now().Add(time.Second))
	send("", 2, 18, 1) // G1 spent; G2 (10 tokens), top-up due in 469 ms (15/16 of 500)
	clk.Advance(469 * time.Millisecond)
	t.Logf("pushes %d", m.Pushes())
	// Envoy sent this report before the push reached it: 7 of G2 spent.
	// Before the push arrived it spent 2 more (9 of 10): G2 holds 1.
	send("", 7, 0, 2) // reads the push, then the answer
	t.Logf("returned after the crossing report: %d (G2 truly unspent: 1)", ret.hits)
	// Envoy spends all of G3 (10) and the 2 from G2, then is denied.
	clk.Set(clk.Now().Add(time.Second))
	send("", 12, 5, 1)
	clk.Set(clk.Now().Add(time.Second))
	send("", 0, 5, 1)
	t.Logf("returned in all: %d; truly unspent of G2 and G3: 1", ret.hits)
	if ret.hits > 1 {
		t.Errorf("%d hits given back, %d of them spent by Envoy: the fleet may admit that many over the limit", ret.hits, ret.hits-1)
	}
}

// stampStore notes when (by the test's clock) each key was last
// applied: when the hits granted on it were counted.
type stampStore struct {
	next limits.Store
	clk  *storetest.Clock
	mu   sync.Mutex
	at   map[string]time.Time // guarded by mu
}

func (s *stampStore) Apply(ctx context.Context, b *limits.Batch) error {
	s.mu.Lock()
	for _, c := range b.Checks {
		s.at[c.Key] = s.clk.Now()
	}
	s.mu.Unlock()
	return s.next.Apply(ctx, b)
}

// counted returns when the grant of route value v was counted.
func (s *stampStore) counted(t *testing.T, v string) time.Time {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.at {
		if strings.Contains(k, fmt.Sprintf("%d:%s}", len(v), v)) {
			return at
		}
	}
	t.Fatalf("no store call for route %s", v)
	return time.Time{}
}

// TestSlowMessageBucket is TestSlowMessage on a token bucket: a grant
// sent late, after the Redis calls of the buckets that follow it in its
// message, lives for its time to live less the time it waited, so that
// Envoy spends it no later than its time to live after it was counted.
// A bucket's grants are taken with a reserve of what it refills in that
// time and the margin (bucketPlan): spent later, a grant's hits could
// come on top of those the refill let other sidecars take.
func TestSlowMessageBucket(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	stamps := &stampStore{next: memory.New(memory.Options{Now: clk.Now}), clk: clk, at: map[string]time.Time{}}
	st := &slowStore{next: stamps, clk: clk, d: 250 * time.Millisecond}
	const ttl = 6 * time.Second
	addr, _ := startCustom(t, `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 600, burst: 600, lease: 10}
`, clk, st, rlqs.Options{BucketTTL: ttl})
	s := rawStream(t, addr)
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs"}
	for i := range 10 {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": fmt.Sprint("t", i)}}, NumRequestsAllowed: 1})
	}
	if err := s.Send(msg); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := clk.Now() // when Envoy applies it
	buckets := 0
	for _, a := range resp.GetBucketAction() {
		qa := a.GetQuotaAssignmentAction()
		if qa.GetRateLimitStrategy().GetTokenBucket() == nil {
			continue // the blanket before a new grant
		}
		buckets++
		route := a.GetBucketId().GetBucket()["route"]
		counted := stamps.counted(t, route)
		exp := got.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
		t.Logf("%s: counted at %v, sent at %v, ttl %ds", route, counted.Sub(storetest.Epoch), got.Sub(storetest.Epoch), qa.GetAssignmentTimeToLive().GetSeconds())
		if exp.After(counted.Add(ttl)) {
			t.Errorf("%s: a grant counted at %v is spendable until %v, %v past its time to live of %v",
				route, counted.Sub(storetest.Epoch), exp.Sub(storetest.Epoch), exp.Sub(counted.Add(ttl)), ttl)
		}
	}
	if buckets != 10 {
		t.Errorf("%d grants for 10 buckets, want 10", buckets)
	}
}
