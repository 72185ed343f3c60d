package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

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
	srv := rlqs.NewServer(engine, st, zaptest.NewLogger(t), rlqs.Options{Now: clk.Now, Return: st, Metrics: m, AfterFunc: clk.AfterFunc})
	return rlqstest.Serve(t, srv.Register), m
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
