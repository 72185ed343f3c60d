package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const fleetRules = `
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 10}
`

// startSidecar serves RLQS for rules on its own Redis store (o, deciding
// by clk, and timing its pushes by it) and its own loopback listener, and
// returns the listener's address and the server's metrics.
func startSidecar(t *testing.T, rules string, o redis.Options, clk *storetest.Clock) (string, *rlqstest.Metrics) {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.Timeout, o.Now = 5*time.Second, clk.Now
	st, err := redis.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	engine := limits.NewEngine(rs, st, limits.EngineOptions{})
	m := &rlqstest.Metrics{}
	ro := rlqs.Options{Now: clk.Now, Return: st, Metrics: m, AfterFunc: clk.AfterFunc}
	return rlqstest.Serve(t, func(g *grpc.Server) { rlqs.Register(g, engine, st, zaptest.NewLogger(t), ro) }), m
}

// fleetCase is one limit that three Envoys, each on its own sidecar, all
// on one Redis, run into.
type fleetCase struct {
	algorithm string
	extra     string // more fields of the rate_limit
	check     func(t *testing.T, adm []uint64)
}

const (
	fleetEnvoys    = 3
	fleetLimit     = 100 // a minute
	fleetLease     = 10
	fleetPerSecond = 5 // requests each Envoy tries each second
	fleetSeconds   = 150
	fleetBurst     = 40
)

// The bounds RLQS promises (docs/rlqs.md), for each algorithm. adm[i] is
// what the fleet admitted in the test's second i, which starts at
// Epoch + 1s + i.
var fleetCases = []fleetCase{
	{
		// In every window: at most the limit, and at least the limit
		// less one lease per Envoy (what each holds unspent when the
		// window ends) and the last hit, which a grant never takes.
		algorithm: "fixed_window",
		check: func(t *testing.T, adm []uint64) {
			for m, got := range perMinute(adm) {
				t.Logf("minute %d: %d admitted", m, got)
				if got > fleetLimit {
					t.Errorf("minute %d: %d admitted, more than the limit %d", m, got, fleetLimit)
				}
				if floor := uint64(fleetLimit - fleetEnvoys*fleetLease - 1); got < floor {
					t.Errorf("minute %d: %d admitted, fewer than %d", m, got, floor)
				}
			}
		},
	},
	{
		// At every moment the sliding estimate of what the fleet
		// admitted (the previous window's count, weighted by how much of
		// it the sliding window still covers, and the current one's) is
		// within the limit; each window's own count reaches the same
		// floor as a fixed window's once the previous window's weight is
		// gone, at its end.
		algorithm: "sliding_window",
		check: func(t *testing.T, adm []uint64) {
			mins := perMinute(adm)
			for i := range adm {
				at := i + 1 // seconds since Epoch
				m, e := at/60, uint64(at%60)
				var prev, cur uint64
				if m > 0 {
					prev = mins[m-1]
				}
				for j := m*60 - 1; j <= i; j++ {
					if j >= 0 {
						cur += adm[j]
					}
				}
				if est := prev*(60-e) + cur*60; est > fleetLimit*60 {
					t.Errorf("at %ds: estimate (%d×%d/60 + %d) over the limit %d", at, prev, 60-e, cur, fleetLimit)
				}
			}
			for m, got := range mins {
				t.Logf("minute %d: %d admitted", m, got)
				if floor := uint64(fleetLimit - fleetEnvoys*fleetLease - 1); m > 0 && got+mins[m-1] < floor {
					t.Errorf("minutes %d and %d: %d admitted, fewer than %d", m-1, m, got+mins[m-1], floor)
				}
			}
		},
	},
	{algorithm: "token_bucket", extra: fmt.Sprintf("burst: %d", fleetBurst), check: checkBucket},
	{algorithm: "leaky_bucket", extra: fmt.Sprintf("burst: %d", fleetBurst), check: checkBucket},
}

// checkBucket: in any span of the run, the fleet admits at most the
// burst and the rate over the span; over the run, at least the rate over
// it and the burst, less one lease per Envoy and the reserve (what the
// bucket refills in a grant's time to live and its margin).
func checkBucket(t *testing.T, adm []uint64) {
	const rate = fleetLimit / 60.0 // a second
	for i := range adm {
		var sum uint64
		for j := i; j < len(adm); j++ {
			sum += adm[j]
			if most := fleetBurst + rate*float64(j-i); float64(sum) > most {
				t.Fatalf("seconds %d..%d: %d admitted, more than the burst and the rate allow (%.1f)", i, j, sum, most)
			}
		}
	}
	var total uint64
	for _, n := range adm {
		total += n
	}
	const reserve = 12 // 100 a minute over 6s + 1s, rounded up
	floor := fleetBurst - reserve + rate*float64(len(adm)-1) - fleetEnvoys*fleetLease
	t.Logf("%d admitted over %ds; at least %.0f expected", total, len(adm), floor)
	if float64(total) < floor {
		t.Errorf("%d admitted over %ds, fewer than %.0f", total, len(adm), floor)
	}
}

func perMinute(adm []uint64) []uint64 {
	mins := make([]uint64, (len(adm)+1)/60)
	for i, n := range adm {
		if m := (i + 1) / 60; m < len(mins) {
			mins[m] += n
		}
	}
	return mins
}

// TestFleet runs three Envoys, each on its own sidecar, all on one Redis
// (standalone, then a 3-master Cluster), over two and a half minutes of
// the test's clock, each trying five requests a second into one bucket
// whose rule is a limit of 100 a minute (lease 10) of each algorithm
// served over RLQS, and checks the bounds of docs/rlqs.md.
func TestFleet(t *testing.T) {
	srv := redistest.StartServer(t)
	cluster := redistest.StartCluster(t)
	for _, topo := range []struct {
		name string
		o    redis.Options
	}{
		{"standalone", redis.Options{URL: "redis://" + srv.Addr}},
		{"cluster", redis.Options{ClusterAddrs: cluster.Addrs}},
	} {
		for _, tt := range fleetCases {
			t.Run(topo.name+"/"+tt.algorithm, func(t *testing.T) {
				rules := fmt.Sprintf(`
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {algorithm: %s, unit: minute, requests_per_unit: %d, lease: %d, %s}
`, tt.algorithm, fleetLimit, fleetLease, tt.extra)
				o := topo.o
				o.KeyPrefix = "rlqs:" + t.Name() + ":"
				tt.check(t, runFleet(t, rules, o))
			})
		}
	}
}

// runFleet runs the load of TestFleet and returns what the fleet
// admitted in each second.
func runFleet(t *testing.T, rules string, o redis.Options) []uint64 {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	var envoys []*rlqstest.Envoy
	var ms []*rlqstest.Metrics
	for range fleetEnvoys {
		addr, m := startSidecar(t, rules, o, clk)
		envoys = append(envoys, dialEnvoy(t, addr, "rlqs", clk.Now))
		ms = append(ms, m)
	}
	bucket := map[string]string{"route": "api"}
	adm := make([]uint64, fleetSeconds)
	for i := range fleetSeconds {
		for _, e := range envoys {
			for range fleetPerSecond {
				ok, err := e.Request(bucket)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					adm[i]++
				}
			}
		}
		clk.Advance(time.Second) // pushes what is due
		for i, e := range envoys {
			if err := e.Sync(ms[i].Pushes()); err != nil {
				t.Fatal(err)
			}
			if err := e.Report(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return adm
}

// dialEnvoy opens an RLQS stream to addr for domain, as Envoy's filter
// with no_assignment_behavior DENY_ALL, on the clock now.
func dialEnvoy(t testing.TB, addr, domain string, now func() time.Time) *rlqstest.Envoy {
	t.Helper()
	return rlqstest.DialT(t, addr, domain, now)
}

// TestReturns: what Envoy did not spend of a grant goes back to Redis,
// once a report shows it cannot be spent any more: a bucket's grant that
// ended, and a grant replaced by a top-up, less what the next report
// says may have been spent from it. The Redis counter then shows the
// hits back.
func TestReturns(t *testing.T) {
	srv := redistest.StartServer(t)
	id := map[string]string{"route": "api"}
	// remaining is what a zero-hit check of the bucket's limit under
	// rules finds left in Redis.
	remaining := func(t *testing.T, o redis.Options, clk *storetest.Clock, rules string) uint64 {
		t.Helper()
		rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		kl := rs.Explain("rlqs", []limits.Entry{{Key: "route", Value: "api"}}).Limits[0]
		key, l := kl.Key, kl.Limit
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		o.Now = clk.Now
		st, err := redis.New(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		b := limits.Batch{Checks: []limits.Check{{Key: key, Limit: l}}}
		if err := st.Apply(ctx, &b); err != nil {
			t.Fatal(err)
		}
		return b.Outcomes[0].Remaining
	}
	t.Run("bucket grant ended", func(t *testing.T) {
		const rules = `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 3600, burst: 1000, lease: 100}
`
		clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
		o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
		addr, m := startSidecar(t, rules, o, clk)
		e := dialEnvoy(t, addr, "rlqs", clk.Now)
		mustRequest(t, e, id) // subscribes: a grant of a quarter of the lease
		if got := spend(t, e, id, 5); got != 5 {
			t.Fatalf("spent %d of 5", got)
		}
		mustReport(t, e) // 5 used; nothing asked after this, so no push
		mustReport(t, e) // idle: no push, no top-up
		clk.Advance(10 * time.Second)
		if err := e.Sync(m.Pushes()); err != nil {
			t.Fatal(err)
		}
		mustReport(t, e) // the grant has ended: 25 - 5 go back
		if got := m.ReturnedHits(); got != 20 {
			t.Errorf("%d hits returned, want 20 of the grant of 25 with 5 spent", got)
		}
	})
	t.Run("grant replaced by a top-up", func(t *testing.T) {
		clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
		o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
		const rules2 = `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 10000, lease: 100}
`
		addr, m := startSidecar(t, rules2, o, clk)
		e := dialEnvoy(t, addr, "rlqs", clk.Now)
		mustRequest(t, e, id) // a grant of 25
		spend(t, e, id, 20)
		clk.Advance(5 * time.Second)
		mustReport(t, e) // 20 of 25 used in 5 s: a top-up in 15/16 of 1.25 s
		clk.Advance(1200 * time.Millisecond)
		if err := e.Sync(m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if m.Pushes() != 1 {
			t.Fatalf("%d pushes, want the top-up", m.Pushes())
		}
		spend(t, e, id, 2) // from the new grant; the 5 left of the old are lost to Envoy
		clk.Advance(3800 * time.Millisecond)
		mustReport(t, e) // allowed 2: at least 3 of the old 5 were never spent
		if got := m.ReturnedHits(); got != 3 {
			t.Errorf("%d hits returned, want 3", got)
		}
		// Redis counted 25 and 40 (twice the 20 asked in 5 s), and took
		// back 3.
		if got := remaining(t, o, clk, rules2); got != 10000-25-40+3 {
			t.Errorf("Redis has %d left, want %d", got, 10000-25-40+3)
		}
	})
}

// TestSteadyAcrossWindows: three Envoys well under a limit, each at a
// steady 670 requests a second in steps of 100 ms, reporting every
// second, over 100 s: they are denied only in the margin before each
// window's end, never in between (where a grant whose spending was
// charged to the grant before it would leave an Envoy without quota
// while the server thought it had some).
func TestSteadyAcrossWindows(t *testing.T) {
	srv := redistest.StartServer(t)
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
	const rules = `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 10000000, lease: 100000}
`
	var es []*rlqstest.Envoy
	var ms []*rlqstest.Metrics
	for range 3 {
		addr, m := startSidecar(t, rules, o, clk)
		es = append(es, dialEnvoy(t, addr, "rlqs", clk.Now))
		ms = append(ms, m)
	}
	id := map[string]string{"route": "api"}
	for i := range 1000 {
		at := clk.Now().Sub(storetest.Epoch)
		denied := 0
		for _, e := range es {
			for range 67 {
				ok, err := e.Request(id)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					denied++
				}
			}
		}
		// The margin (1 s) before a window's end, and the first step of
		// each Envoy's first request.
		edge := at%time.Minute >= time.Minute-time.Second || i == 0
		if denied > 0 && !edge {
			t.Errorf("%.1f s: %d of 201 requests denied, under the limit and away from a window's end", at.Seconds(), denied)
		}
		clk.Advance(100 * time.Millisecond) // pushes what is due
		for j, e := range es {
			if err := e.Sync(ms[j].Pushes()); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 {
				if err := e.Report(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
