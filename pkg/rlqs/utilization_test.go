package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// The load of TestUtilization: the issue's, three Envoys reporting every
// 5 s (each on its own timer), each trying 10 requests a second, into a
// limit of 60 in 10 s (five times what it lets the fleet have) or, for
// a sliding window, 360 in a minute (the same rate).
const (
	utilPerStep  = 1 // requests each Envoy tries each step
	utilStep     = 100 * time.Millisecond
	utilInterval = 5 * time.Second
	utilBurst    = 30
)

// utilLoad is a limit TestUtilization runs into, and for how long.
type utilLoad struct {
	limit  uint64
	window time.Duration
	span   time.Duration
}

var (
	utilTen    = utilLoad{limit: 60, window: 10 * time.Second, span: 120 * time.Second}
	utilMinute = utilLoad{limit: 360, window: time.Minute, span: 6 * time.Minute}
)

// utilRun is what a fleet admitted in each step, the tokens its Envoys
// discarded, and the Redis commands it took.
type utilRun struct {
	adm       []uint64
	discarded float64
	commands  int64
}

// runUtil runs the load of TestUtilization on rules for span, on the
// sidecars' default options.
func runUtil(t *testing.T, rules string, o redis.Options, span time.Duration) utilRun {
	t.Helper()
	clk := storetest.NewClock(storetest.Epoch.Add(time.Millisecond))
	var envoys []*rlqstest.Envoy
	var ms []*rlqstest.Metrics
	for range fleetEnvoys {
		addr, m := startSidecar(t, rules, o, clk)
		envoys = append(envoys, dialEnvoy(t, addr, "rlqs", clk.Now))
		ms = append(ms, m)
	}
	bucket := map[string]string{"route": "api"}
	steps := int(span / utilStep)
	every := int(utilInterval / utilStep)
	adm := make([]uint64, steps)
	for i := range steps {
		for _, e := range envoys {
			for range utilPerStep {
				ok, err := e.Request(bucket)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					adm[i]++
				}
			}
		}
		clk.Advance(utilStep) // pushes what is due
		for j, e := range envoys {
			if err := e.Sync(ms[j].Pushes()); err != nil {
				t.Fatal(err)
			}
			// Each Envoy's timer runs from its first request, a third of
			// the interval apart.
			if (i+j*every/fleetEnvoys)%every == every-1 {
				if err := e.Report(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var r utilRun
	r.adm = adm
	for _, e := range envoys {
		r.discarded += e.Discarded()
	}
	return r
}

// TestUtilization: at steady overload across three Envoys, each
// reporting every 5 s, a limit is used as docs/rlqs.md states, and never
// over. Of 60 in 10 s: a fixed window admits at least 90% of its limit in
// every window after the first, a sliding window 80% after the first two
// (its ceiling with the default margin is 83%: see slidingFloor), a token
// or leaky bucket 90% of its burst and its rate over the run; of 360 in a
// minute, a sliding window 95% and a fixed window 90% (it admitted 255,
// discarding 574 tokens of 1,585, while a new window's first report
// marked its pushed grant spent). The Envoys discard at most an eighth of
// what they admit (tokens a push replaced unspent). Before pushes were
// timed for this, the figures were 45 of 60, 37 of 60 and 28%, with 32%,
// 17% and 254% of what was admitted discarded; before a sliding window's
// last ask was timed to the last whole second its window leaves a grant,
// and a grant could take the limit's last hit, a sliding window admitted
// 47 of 60 every other window and 336 of 360.
func TestUtilization(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	tests := []struct {
		name string
		alg  string
		load utilLoad
	}{
		{"fixed_window", "fixed_window", utilTen},
		{"sliding_window", "sliding_window", utilTen},
		{"token_bucket", "token_bucket", utilTen},
		{"leaky_bucket", "leaky_bucket", utilTen},
		{"sliding_window_minute", "sliding_window", utilMinute},
		{"fixed_window_minute", "fixed_window", utilMinute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := ""
			if tt.alg == "token_bucket" || tt.alg == "leaky_bucket" {
				extra = fmt.Sprintf(", burst: %d", utilBurst)
			}
			l := tt.load
			rules := fmt.Sprintf(`
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {algorithm: %s, unit: second, unit_multiplier: %d, requests_per_unit: %d%s}
`, tt.alg, int(l.window/time.Second), l.limit, extra)
			o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
			before := redisCommands(t, rc)
			r := runUtil(t, rules, o, l.span)
			var total uint64
			for _, n := range r.adm {
				total += n
			}
			after := redisCommands(t, rc)
			var calls int64
			for name, n := range after {
				if name != "info" {
					calls += n - before[name]
				}
			}
			t.Logf("%d admitted, %.0f tokens discarded, %d Redis commands", total, r.discarded, calls)
			if most := float64(total) / 8; r.discarded > most {
				t.Errorf("%.0f tokens discarded, more than an eighth of the %d admitted", r.discarded, total)
			}
			switch tt.alg {
			case "fixed_window":
				checkWindows(t, r.adm, l, false, l.limit*9/10)
			case "sliding_window":
				checkWindows(t, r.adm, l, true, slidingFloor(l))
			default:
				checkUtilBucket(t, r.adm, l)
			}
		})
	}
}

// slidingFloor is what a sliding window l admits at least in each window
// at steady overload, from the third on (the first has no previous
// window to weigh, and the second weighs the first's): 80% of a limit in
// 10 s, 95% of one in a minute. docs/rlqs.md's ceiling with the default
// margin of 1 s is L/(1 + 2.1 s/W): 83% of 10 s and 97% of a minute (no
// grant is taken later than a whole second, and a tenth, before the
// margin before the window's end, and the room that regrows after it is
// lost to the window).
func slidingFloor(l utilLoad) uint64 {
	if l.window >= time.Minute {
		return l.limit * 95 / 100
	}
	return l.limit * 8 / 10
}

// checkWindows checks what a window limit l admitted in each step (adm):
// never over the limit (on a sliding window, its estimate at each step),
// and at least floor in each window after the first (on a sliding
// window, the first two).
func checkWindows(t *testing.T, adm []uint64, l utilLoad, sliding bool, floor uint64) {
	t.Helper()
	per := int(l.window / utilStep)
	wins := make([]uint64, (len(adm)+per-1)/per)
	for i, n := range adm {
		w := i / per
		wins[w] += n
		if !sliding {
			continue
		}
		// The requests of step i are decided at i steps and a
		// millisecond into the run, which starts at a window's start.
		var prev float64
		if w > 0 {
			e := time.Duration(i%per)*utilStep + time.Millisecond
			prev = float64(wins[w-1]) * float64(l.window-e) / float64(l.window)
		}
		if est := prev + float64(wins[w]); est > float64(l.limit)+1e-9 {
			t.Errorf("step %d: sliding estimate %.2f over the limit %d", i, est, l.limit)
		}
	}
	t.Logf("admitted per window: %v", wins)
	first := 1
	if sliding {
		first = 2
	}
	for w, n := range wins {
		if n > l.limit {
			t.Errorf("window %d: %d admitted, over the limit %d", w, n, l.limit)
		}
		if w >= first && n < floor {
			t.Errorf("window %d: %d admitted, fewer than %d of %d", w, n, floor, l.limit)
		}
	}
}

// checkUtilBucket checks what a token or leaky bucket l admitted in each
// step (adm): in any span, at most the burst and the rate over the span;
// over the run, at least 90% of that.
func checkUtilBucket(t *testing.T, adm []uint64, l utilLoad) {
	t.Helper()
	rate := float64(l.limit) / l.window.Seconds()
	for i := range adm {
		var sum uint64
		for j := i; j < len(adm); j++ {
			sum += adm[j]
			span := time.Duration(j-i) * utilStep
			if most := utilBurst + rate*span.Seconds(); float64(sum) > most+1e-9 {
				t.Fatalf("steps %d..%d: %d admitted, more than the burst and the rate allow (%.1f)", i, j, sum, most)
			}
		}
	}
	var total uint64
	for _, n := range adm {
		total += n
	}
	most := utilBurst + rate*(time.Duration(len(adm)-1)*utilStep).Seconds()
	t.Logf("%d admitted over the run, of %.0f the burst and the rate allow", total, most)
	if float64(total) < 0.9*most {
		t.Errorf("%d admitted over the run, under 90%% of the %.0f the burst and the rate allow", total, most)
	}
}

// TestSteadyTopUps: one Envoy at a steady 20 requests a second, well
// under a limit whose lease (10) it spends in half a second, reporting
// every 5 s: the sidecar tops its grant up by pushes, each replacing the
// grant just before it runs out. The Envoy discards at most a tenth of
// what it admits (a sixteenth at a perfectly steady rate), and is never
// denied. Pushes at three quarters of a grant's life discarded a quarter.
func TestSteadyTopUps(t *testing.T) {
	srv := redistest.StartServer(t)
	const rules = `
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {unit: minute, requests_per_unit: 60000, lease: 10}
`
	o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
	clk := storetest.NewClock(storetest.Epoch.Add(time.Millisecond))
	addr, m := startSidecar(t, rules, o, clk)
	e := dialEnvoy(t, addr, "rlqs", clk.Now)
	bucket := map[string]string{"route": "api"}
	var admitted, denied int
	for i := range 500 { // 50 s in steps of 100 ms
		for range 2 {
			ok, err := e.Request(bucket)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			} else if i >= 50 { // after the first report sized the grants
				denied++
			}
		}
		clk.Advance(100 * time.Millisecond)
		if err := e.Sync(m.Pushes()); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			if err := e.Report(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d admitted, %d denied after the first report, %.0f tokens discarded, %d pushes", admitted, denied, e.Discarded(), m.Pushes())
	if d := e.Discarded(); d > float64(admitted)/10 {
		t.Errorf("%.0f tokens discarded, more than a tenth of the %d admitted", d, admitted)
	}
	if denied > 0 {
		t.Errorf("%d requests denied at a steady rate well under the limit", denied)
	}
}
