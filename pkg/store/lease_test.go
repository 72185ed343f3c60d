package store_test

import (
	"context"
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

// TestLeasesExact runs several sidecars' Leases on one shared store: the
// fleet never admits more than the limit, and under-admits by at most one
// lease per sidecar.
func TestLeasesExact(t *testing.T) {
	const (
		sidecars   = 3
		limit      = 1000
		lease      = 20
		goroutines = 16
		perSidecar = 1000
	)
	for _, alg := range leasedAlgorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			shared := memory.New(memory.Options{Now: clk.Now})
			l := leased(t, alg, limit, lease, limits.UnitMinute)
			key := storetest.Key(t.Name(), "capped", l)
			var admitted, over atomic.Int64
			var wg sync.WaitGroup
			for s := range sidecars {
				ls := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
				var next atomic.Int64
				for range goroutines {
					wg.Go(func() {
						for next.Add(1) <= perSidecar {
							b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
							if err := ls.Apply(context.Background(), b); err != nil {
								t.Error(err)
								return
							}
							if b.Admitted {
								admitted.Add(1)
							} else {
								over.Add(1)
							}
						}
					})
				}
				_ = s
			}
			wg.Wait()
			got := admitted.Load()
			if got > limit || got < limit-sidecars*lease {
				t.Errorf("admitted %d of %d requests, want %d..%d", got, sidecars*perSidecar, limit-sidecars*lease, limit)
			}
			t.Logf("admitted %d, over %d", got, over.Load())
		})
	}
}

// TestLeasesAnswerLocally checks that a lease spares store calls, ends
// with its window, and reports what is left.
func TestLeasesAnswerLocally(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(inner, store.LeasesOptions{Now: clk.Now})
	l := leased(t, limits.FixedWindow, 1_000_000, 100, limits.UnitSecond)
	key := storetest.Key(t.Name(), "global", l)
	apply := func(hits uint64) *limits.Batch {
		t.Helper()
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: hits}}}
		if err := ls.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if !b.Admitted {
			t.Fatalf("request of %d hits rejected", hits)
		}
		return b
	}
	apply(1) // takes the lease with it
	if got := ls.Held(key); got != 100 {
		t.Fatalf("held %d after the first request, want 100", got)
	}
	for range 100 {
		apply(1)
	}
	if got := inner.calls.Load(); got != 1 {
		t.Errorf("%d store calls for 101 requests with a lease of 100, want 1", got)
	}
	b := apply(1) // the lease is spent: refill
	if got := inner.calls.Load(); got != 2 {
		t.Errorf("%d store calls, want 2", got)
	}
	// 1,000,000 − 102 hits − 100 leased remain shared; 100 are held here.
	if out := b.Outcomes[0]; out.Remaining != 1_000_000-102 || out.Reset != 900*time.Millisecond {
		t.Errorf("outcome %+v, want remaining %d (shared and held) and reset 900ms", out, 1_000_000-102)
	}
	clk.Advance(100 * time.Millisecond)
	if out := apply(1).Outcomes[0]; out.Remaining != 1_000_000-103 || out.Reset != 800*time.Millisecond {
		t.Errorf("local outcome %+v, want remaining %d and reset 800ms", out, 1_000_000-103)
	}
	// The window ends, and the lease with it.
	clk.Advance(800 * time.Millisecond)
	if got := ls.Held(key); got != 0 {
		t.Errorf("held %d after the window ended, want 0", got)
	}
	apply(1)
	if got := inner.calls.Load(); got != 3 {
		t.Errorf("%d store calls after the window ended, want 3", got)
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
