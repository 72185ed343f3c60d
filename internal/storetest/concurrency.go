package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// take is request hold taking a slot of l on key (hits 1), as Envoy's
// request-time call does.
func take(key string, l *limits.Limit, hold string) Check {
	return Check{Key: key, Limit: l, Hits: 1, Hold: hold}
}

// free is request hold's stream-end call, which frees its slot.
func free(key string, l *limits.Limit, hold string) Check {
	return Check{Key: key, Limit: l, Hits: 1, Refund: true, Hold: hold}
}

// ConcurrencyCases returns the cases of concurrency limits
// (limits.Limit.Occupy and Vacate): requests in flight, each named by
// its hold, freed by its refund or after the window.
func ConcurrencyCases() []Case {
	in2 := mustLimit(limits.Concurrency, 2, limits.UnitSecond, 10, 0)
	return []Case{
		{Name: "concurrency/exact_pairing", Steps: []Step{
			{At: 0, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: sec, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// Full: the soonest slot (a's) expires at 10 s.
			{At: 2 * sec, Checks: []Check{take("k", in2, "c")}, Want: []limits.Outcome{over(0, 8*sec)}},
			// The refused request's stream-end call frees nothing.
			{At: 3 * sec, Checks: []Check{free("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 7*sec)}},
			{At: 3 * sec, Checks: []Check{take("k", in2, "c")}, Want: []limits.Outcome{over(0, 7*sec)}},
			// a ends; a second -1 for it frees nothing more.
			{At: 4 * sec, Checks: []Check{free("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 7*sec)}},
			{At: 4 * sec, Checks: []Check{free("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 7*sec)}},
			{At: 4 * sec, Checks: []Check{take("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// b's and c's -1 never come: their slots expire at 11 s and 14 s.
			{At: 11 * sec, Checks: []Check{take("k", in2, "d")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			{At: 12 * sec, Checks: []Check{take("k", in2, "e")}, Want: []limits.Outcome{over(0, 2*sec)}},
			{At: 14 * sec, Checks: []Check{take("k", in2, "e")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
		{Name: "concurrency/retry_keeps_its_slot", Steps: []Step{
			{At: 0, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: sec, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// a again (a retry of the call): admitted, its slot renewed.
			{At: 2 * sec, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// A probe (no hits) asks whether a request could take a slot.
			{At: 2 * sec, Checks: []Check{{Key: "k", Limit: in2, Hold: "c"}}, Want: []limits.Outcome{over(0, 9*sec)}},
			{At: 3 * sec, Checks: []Check{free("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(1, 9*sec)}},
			{At: 3 * sec, Checks: []Check{{Key: "k", Limit: in2, Hold: "c"}}, Admitted: true, Want: []limits.Outcome{ok(1, 9*sec)}},
		}},
		{Name: "concurrency/all_or_nothing", Steps: []Step{
			// A request refused by another limit takes no slot.
			{At: 0, Checks: []Check{take("k", in2, "a"), {Key: "ban", Limit: mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0), Hits: 1}}, Want: []limits.Outcome{ok(2, 0), over(0, sec)}},
			{At: 0, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: 0, Checks: []Check{take("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
	}
}

// RunInFlight checks a concurrency limit under concurrency, as a fleet
// of sidecars sees it: goroutines spread over the stores (sidecars on one
// backend) send requests of one user, each under a hold of its own, to a
// store picked at random, and its stream-end call to another; a request
// counts itself in flight from its admission until just before its
// stream-end call, and the requests in flight never exceed the limit, 5.
// Refused requests send their stream-end call too, as Envoy does; two
// admitted ones never do, and since the clock stands still their slots
// stay held: after the load, exactly those two are.
func RunInFlight(t *testing.T, newStores MultiFactory, goroutines, each int) {
	clk := NewClock(Epoch.Add(time.Second))
	stores := newStores(t, clk)
	const most = 5
	l := mustLimit(limits.Concurrency, most, limits.UnitMinute, 1, 0)
	key := Key("in-flight-"+t.Name(), "user", l)
	work := mustLimit(limits.FixedWindow, 1, limits.UnitMinute, 1, 0)
	workKey := Key("in-flight-"+t.Name(), "work", work)
	apply := func(s limits.Store, c limits.Check) (*limits.Batch, error) {
		b := &limits.Batch{Checks: []limits.Check{c}}
		return b, s.Apply(context.Background(), b)
	}
	var (
		inFlight, peak, admitted, lost atomic.Int64
		losses                         atomic.Int64 // stream-end calls still to lose
		wg                             sync.WaitGroup
	)
	losses.Store(2)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range each {
				hold := fmt.Sprintf("g%d-%d", g, i)
				b, err := apply(stores[rng.IntN(len(stores))], limits.Check{Key: key, Limit: l, Hits: 1, Hold: hold})
				if err != nil {
					t.Errorf("request %s: %v", hold, err)
					return
				}
				if b.Admitted {
					admitted.Add(1)
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					// The request's work: calls that take real time while
					// it is counted.
					for range 1 + rng.IntN(3) {
						if _, err := apply(stores[rng.IntN(len(stores))], limits.Check{Key: workKey, Limit: work}); err != nil {
							t.Errorf("work of %s: %v", hold, err)
							return
						}
					}
					inFlight.Add(-1)
					if rng.IntN(50) == 0 && losses.Add(-1) >= 0 {
						lost.Add(1)
						continue // its stream-end call never comes
					}
				}
				if _, err := apply(stores[rng.IntN(len(stores))], limits.Check{Key: key, Limit: l, Hits: 1, Refund: true, Hold: hold}); err != nil {
					t.Errorf("stream end of %s: %v", hold, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("admitted %d of %d, stream-end calls lost %d, most in flight %d", admitted.Load(), goroutines*each, lost.Load(), peak.Load())
	if p := peak.Load(); p > most {
		t.Errorf("%d requests in flight at once, counted by the clients; the limit is %d", p, most)
	}
	if admitted.Load() < most {
		t.Errorf("only %d requests admitted: the test did not fill the limit", admitted.Load())
	}
	// Every slot is free but the lost ones'.
	b, err := apply(stores[0], limits.Check{Key: key, Limit: l, Hits: 1, Hold: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(most - 1 - lost.Load()); !b.Admitted || b.Outcomes[0].Remaining != want {
		t.Errorf("after the load: admitted %v, %d left; want %d left (%d slots of lost calls held)", b.Admitted, b.Outcomes[0].Remaining, want, lost.Load())
	}
}
