package rlqs

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

type fakeTimer struct {
	f                func()
	started, stopped bool
}

// TestTimerRaces: a timer that fired while serveReport held st.mu (its
// callback waiting for the lock) cannot be stopped, and arm starts a new
// one; the late callback must then do nothing, or it would forget the new
// timer and arm yet another, one more live timer chain per race (2 to 6
// after five races before timers were numbered).
func TestTimerRaces(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 600, burst: 600, lease: 100}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	st0 := memory.New(memory.Options{Now: clk.Now})
	var timers []*fakeTimer
	s := NewServer(limits.NewEngine(rs, st0, limits.EngineOptions{}), st0, zaptest.NewLogger(t), Options{
		Now: clk.Now,
		AfterFunc: func(d time.Duration, f func()) func() bool {
			tm := &fakeTimer{f: f}
			timers = append(timers, tm)
			return func() bool {
				was := !tm.stopped && !tm.started
				tm.stopped = true
				return was
			}
		},
	})
	st := &streamState{srv: s, ctx: context.Background(), send: func(*rlqspb.RateLimitQuotaResponse) error { return nil }, buckets: map[string]*bucket{}, h: s.join(context.Background())}
	report := func(allowed, denied uint64) {
		msg := &rlqspb.RateLimitQuotaUsageReports{Domain: "rlqs", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"route": "api"}}, NumRequestsAllowed: allowed, NumRequestsDenied: denied}}}
		if err := st.serveReport(msg); err != nil {
			t.Fatal(err)
		}
	}
	live := func() int {
		n := 0
		for _, tm := range timers {
			if !tm.stopped && !tm.started {
				n++
			}
		}
		return n
	}
	report(1, 0)
	for i := range 5 {
		// The armed timer fires; its callback waits for st.mu, held by
		// the handler serving a report that arrived just then (its
		// denials replace the grant, so the due time changes).
		var fired []*fakeTimer
		for _, tm := range timers {
			if !tm.stopped && !tm.started {
				tm.started = true
				fired = append(fired, tm)
			}
		}
		clk.Set(clk.Now().Add(time.Second))
		report(1, 1)
		for _, tm := range fired {
			tm.f() // the callbacks get the lock
		}
		t.Logf("race %d: %d live timers (want 1)", i+1, live())
	}
	if live() > 1 {
		t.Errorf("%d live timers after 5 races; one is tracked (st.stop), the rest are orphans that re-arm themselves", live())
	}
}
