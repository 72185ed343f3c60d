package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// counting is a limits.Store that counts the calls that reach the shared
// store.
type counting struct {
	next  limits.Store
	calls atomic.Int64
}

func (c *counting) Apply(ctx context.Context, b *limits.Batch) error {
	c.calls.Add(1)
	return c.next.Apply(ctx, b)
}

func leased(t testing.TB, alg limits.Algorithm, requests, lease uint64, unit limits.Unit) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Lease = lease
	return l
}

func leasedAlgorithms() []limits.Algorithm {
	var as []limits.Algorithm
	for _, a := range limits.Algorithms {
		if a.Leasable() {
			as = append(as, a)
		}
	}
	return as
}

// TestLeasesExact runs several sidecars' Leases on one shared memory
// store (see testLeasesFleet).
func TestLeasesExact(t *testing.T) {
	for _, alg := range leasedAlgorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			var shared limits.Store
			testLeasesFleet(t, alg, func(clk *storetest.Clock) limits.Store {
				if shared == nil {
					shared = memory.New(memory.Options{Now: clk.Now})
				}
				return shared
			})
		})
	}
}

// testLeasesFleet runs three sidecars' Leases, each on the store that
// newStore returns for it (one store they share, or stores on one Redis),
// all on one clock: the fleet never admits more than the limit,
// under-admits by at most one lease per sidecar, and most requests are
// answered without the store.
func testLeasesFleet(t *testing.T, alg limits.Algorithm, newStore func(*storetest.Clock) limits.Store) {
	const (
		sidecars   = 3
		limit      = 1000
		lease      = 20
		goroutines = 16
		perSidecar = 1000
	)
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	l := leased(t, alg, limit, lease, limits.UnitMinute)
	other := leased(t, limits.FixedWindow, 1_000_000, 0, limits.UnitMinute)
	key := storetest.Key(t.Name(), "capped", l)
	otherKey := storetest.Key(t.Name(), "other", other)
	var admitted atomic.Int64
	leases := make([]*store.Leases, sidecars)
	inners := make([]*counting, sidecars)
	for i := range leases {
		inners[i] = &counting{next: newStore(clk)}
		leases[i] = store.NewLeases(inners[i], store.LeasesOptions{Now: clk.Now})
	}
	calls := func() (n int64) {
		for _, c := range inners {
			n += c.calls.Load()
		}
		return n
	}
	// send sends n requests through each sidecar, 16 at a time.
	send := func(n int64) {
		var wg sync.WaitGroup
		for _, ls := range leases {
			var sent atomic.Int64
			for range goroutines {
				wg.Go(func() {
					for i := sent.Add(1); i <= n; i = sent.Add(1) {
						b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
						if i%4 == 0 {
							// Some requests carry a second limit, which
							// the store decides with the leased one's
							// refills.
							b.Checks = append(b.Checks, limits.Check{Key: otherKey, Limit: other, Hits: 1})
						}
						if err := ls.Apply(context.Background(), b); err != nil {
							t.Error(err)
							return
						}
						if b.Admitted {
							admitted.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
	}
	// Below the limit, every request is admitted, however the leases
	// are spread, and most never reach the store.
	send(300)
	if got := admitted.Load(); got != 900 {
		t.Errorf("admitted %d of 900 requests below the limit, want all", got)
	}
	// A quarter of the requests carry the other limit and need the store
	// anyway; the rest reach it only to refill a lease, which asks once
	// it is below a quarter, so for at least lease/2 hits.
	if n, most := calls(), int64(900/4+900/(lease/2)+sidecars); n > most {
		t.Errorf("%d store calls for 900 requests with leases of %d, want at most %d: the leases did not spare them", n, lease, most)
	}
	t.Logf("%d store calls for the first 900 requests", calls())
	// Past it, the fleet admits at most the limit, and at least the limit
	// less what the sidecars still hold.
	send(perSidecar)
	got := admitted.Load()
	if got > limit || got < limit-sidecars*lease {
		t.Errorf("admitted %d of %d, want %d..%d", got, sidecars*(300+perSidecar), limit-sidecars*lease, limit)
	}
	t.Logf("admitted %d of %d", got, sidecars*(300+perSidecar))
}

// TestLeasesAnswerLocally checks that a lease spares store calls, is
// topped up once it falls below a quarter, never holds more than the lease, ends
// with its window, and reports what is left.
func TestLeasesAnswerLocally(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(inner, store.LeasesOptions{Now: clk.Now})
	const limit, lease = 1_000_000, 100
	l := leased(t, limits.FixedWindow, limit, lease, limits.UnitSecond)
	key := storetest.Key(t.Name(), "global", l)
	admitted := uint64(0)
	apply := func() limits.Outcome {
		t.Helper()
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		if err := ls.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if !b.Admitted {
			t.Fatal("request rejected")
		}
		admitted++
		if h := ls.Held(key); h > lease {
			t.Fatalf("holds %d, more than the lease of %d", h, lease)
		}
		return b.Outcomes[0]
	}
	apply() // takes the lease with it
	if got := ls.Held(key); got != lease {
		t.Fatalf("held %d after the first request, want %d", got, lease)
	}
	for range 1000 {
		out := apply()
		// Redis's remaining plus what the lease holds is what the limit
		// has left: with one sidecar, exactly.
		if out.Remaining != limit-admitted || out.Reset != 900*time.Millisecond {
			t.Fatalf("after %d requests: %+v, want remaining %d and reset 900ms", admitted, out, limit-admitted)
		}
	}
	// One call takes the lease; then a top-up each time it falls below a
	// quarter, after lease-⌈lease/4⌉+1 requests.
	if got, want := inner.calls.Load(), int64(1+1000/(lease-(lease+3)/4+1)); got != want {
		t.Errorf("%d store calls for 1001 requests with a lease of %d, want %d", got, lease, want)
	}
	// The window ends, and the lease with it.
	clk.Advance(900 * time.Millisecond)
	if got := ls.Held(key); got != 0 {
		t.Errorf("held %d after the window ended, want 0", got)
	}
	calls := inner.calls.Load()
	apply()
	if got := inner.calls.Load(); got != calls+1 {
		t.Errorf("%d store calls after the window ended, want one more", got-calls)
	}
}

// TestLeasesAllOrNothing: hits taken from a lease for a request another
// limit rejects go back to the lease, and the store consumes nothing.
func TestLeasesAllOrNothing(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	shared := memory.New(memory.Options{Now: clk.Now})
	ls := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
	global := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	user, err := limits.NewLimit(limits.FixedWindow, 1, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	gk := storetest.Key(t.Name(), "global", global)
	uk := func(u int) string { return storetest.Key(t.Name(), fmt.Sprint("user", u), user) }
	apply := func(checks ...limits.Check) *limits.Batch {
		t.Helper()
		b := &limits.Batch{Checks: checks}
		if err := ls.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := apply(limits.Check{Key: gk, Limit: global, Hits: 1}, limits.Check{Key: uk(1), Limit: user, Hits: 1}); !b.Admitted {
		t.Fatal("first request rejected")
	}
	held := ls.Held(gk)
	if held == 0 {
		t.Fatal("no lease taken")
	}
	// user1 is over: the global hit comes from the lease and goes back.
	if b := apply(limits.Check{Key: gk, Limit: global, Hits: 1}, limits.Check{Key: uk(1), Limit: user, Hits: 1}); b.Admitted {
		t.Fatal("request over the user limit admitted")
	}
	if got := ls.Held(gk); got != held {
		t.Errorf("held %d after a rejected request, want %d: its hit must go back", got, held)
	}
	// What the shared store holds: one hit plus the lease.
	probe := &limits.Batch{Checks: []limits.Check{{Key: gk, Limit: global}}}
	if err := shared.Apply(context.Background(), probe); err != nil {
		t.Fatal(err)
	}
	if got, want := probe.Outcomes[0].Remaining, 1000-1-held; got != want {
		t.Errorf("shared remaining %d, want %d", got, want)
	}
}

// TestLeasesNotFor checks what is never leased: shadow limits, and a key
// that appears twice in a batch.
func TestLeasesNotFor(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(inner, store.LeasesOptions{Now: clk.Now})
	shadow := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	shadow.Shadow = true
	l := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	sk, k := storetest.Key(t.Name(), "shadow", shadow), storetest.Key(t.Name(), "twice", l)
	for range 3 {
		if err := ls.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: sk, Limit: shadow, Hits: 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := ls.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: k, Limit: l, Hits: 1}, {Key: k, Limit: l, Hits: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := inner.calls.Load(); got != 6 {
		t.Errorf("%d store calls, want 6: nothing leased", got)
	}
	if ls.Held(sk) != 0 || ls.Held(k) != 0 {
		t.Errorf("held %d and %d, want nothing", ls.Held(sk), ls.Held(k))
	}
}

// TestLeasesUnderAdmitByAtMostTheHeldLeases: a sidecar that took a lease
// and then goes quiet keeps its hits from the others, and that is all the
// fleet loses: the busy sidecar takes everything else, exactly.
func TestLeasesUnderAdmitByAtMostTheHeldLeases(t *testing.T) {
	for _, alg := range leasedAlgorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			shared := memory.New(memory.Options{Now: clk.Now})
			l := leased(t, alg, 1000, 20, limits.UnitMinute)
			key := storetest.Key(t.Name(), "capped", l)
			quiet := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
			busy := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
			admitted := 0
			send := func(ls *store.Leases) {
				b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
				if err := ls.Apply(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				if b.Admitted {
					admitted++
				}
			}
			send(quiet)
			held := quiet.Held(key)
			if held != 20 {
				t.Fatalf("quiet sidecar holds %d, want the whole lease of 20", held)
			}
			for range 2000 {
				send(busy)
			}
			if got, want := uint64(admitted), 1000-held; got != want {
				t.Errorf("admitted %d, want %d: all but the quiet sidecar's lease", got, want)
			}
			if h := busy.Held(key); h != 0 {
				t.Errorf("busy sidecar still holds %d after running the limit dry", h)
			}
		})
	}
}

// TestLeasesOutliveTheStore: a lease keeps answering while the store is
// down, top-ups that fail included, until it runs out.
func TestLeasesOutliveTheStore(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	down := &storetest.Down{Up: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(down, store.LeasesOptions{Now: clk.Now})
	l := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	key := storetest.Key(t.Name(), "k", l)
	apply := func() (bool, error) {
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		err := ls.Apply(context.Background(), b)
		return b.Admitted, err
	}
	if ok, err := apply(); !ok || err != nil {
		t.Fatalf("first request: %v, %v", ok, err)
	}
	down.Down.Store(true)
	for i := range 10 {
		if ok, err := apply(); !ok || err != nil {
			t.Fatalf("request %d with the store down and %d leased: %v, %v; want admitted", i, ls.Held(key)+1, ok, err)
		}
	}
	if _, err := apply(); !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("lease spent, store down: err = %v, want the store's", err)
	}
}
