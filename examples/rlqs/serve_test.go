package rlqsexample_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// TestExampleServed runs the example's buckets through the sidecar's RLQS
// server on the example's rules.yaml and a real Redis, with a test Envoy
// that denies without quota as envoy.yaml does and reports every 5 s as
// Envoy does: tenant t1, sending 20 requests a second, runs through its
// 600 a minute and is denied, while tenant acme, well under its limit, is
// still admitted. The run stays inside one minute: near a window's end
// every bucket is denied until the next window's grant (README.md).
func TestExampleServed(t *testing.T) {
	b, rs := loadPair(t, readFile("envoy.yaml"))
	placedBy := map[string]placed{}
	got, err := checkAgreement(b, rs, samples)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		placedBy[p.sample] = p
	}
	t1, acme, anon := placedBy["tenant t1"], placedBy["tenant acme"], placedBy["anonymous"]

	srv := redistest.StartServer(t)
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	addr, m := startSidecar(t, rs, srv, clk)
	envoy := rlqstest.DialT(t, addr, t1.domain, clk.Now)

	const (
		t1PerSecond   = 20
		acmePerSecond = 2
		seconds       = 50 // within the first minute, so one window
		report        = 5  // seconds between reports, as Envoy's filter
	)
	var t1Admitted, t1Denied, acmeDenied, anonDenied int
	var t1DryAt int // the second t1 was first denied after being admitted
	for sec := range seconds {
		for range t1PerSecond {
			ok, err := envoy.Request(t1.bucket)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t1Admitted++
			} else {
				t1Denied++
				if uint64(t1Admitted) >= t1.limit.Requests/2 && t1DryAt == 0 {
					t1DryAt = sec
				}
			}
		}
		for i := range acmePerSecond {
			ok, err := envoy.Request(acme.bucket)
			if err != nil {
				t.Fatal(err)
			}
			// The bucket's very first request has no quota yet.
			if !ok && !(sec == 0 && i == 0) {
				acmeDenied++
				t.Errorf("second %d: acme denied, at %d of its %d a minute", sec, sec*acmePerSecond+i, acme.limit.Requests)
			}
		}
		ok, err := envoy.Request(anon.bucket)
		if err != nil {
			t.Fatal(err)
		}
		// The first grant (a quarter of the default lease, 7 hits) runs
		// out before the report that would renew it; the server tops it
		// up when the report's rate says so, so none is denied after the
		// first.
		if !ok && sec > 0 {
			anonDenied++
			t.Errorf("second %d: anonymous denied at 1 a second against 300 a minute", sec)
		}
		clk.Advance(time.Second) // pushes what is due
		if err := envoy.Sync(m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if (sec+1)%report == 0 {
			if err := envoy.Report(); err != nil {
				t.Fatal(err)
			}
		}
	}
	reports, _, assignments := envoy.Counts()
	t.Logf("t1: %d admitted, %d denied (dry at second %d); acme: %d denied; anonymous: %d denied; %d reports, %d assignments, %d pushed",
		t1Admitted, t1Denied, t1DryAt, acmeDenied, anonDenied, reports, assignments, m.Pushes())
	if t1Admitted > int(t1.limit.Requests) {
		t.Errorf("t1: %d admitted in one minute, more than its limit %d", t1Admitted, t1.limit.Requests)
	}
	if t1DryAt == 0 {
		t.Errorf("t1: never denied after half its limit; %d admitted of %d sent", t1Admitted, seconds*t1PerSecond)
	}
}

// startSidecar serves RLQS for rs on a Redis store on srv, deciding by
// clk, as the sidecar does when its store is Redis, and returns the
// listener's address.
func startSidecar(t *testing.T, rs *limits.Ruleset, srv *redistest.Server, clk *storetest.Clock) (string, *rlqstest.Metrics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "example:", Timeout: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	engine := limits.NewEngine(rs, st, limits.EngineOptions{})
	m := &rlqstest.Metrics{}
	o := rlqs.Options{Now: clk.Now, Return: st, Metrics: m, AfterFunc: clk.AfterFunc}
	return rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, engine, st, zaptest.NewLogger(t), o) }), m
}
