package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// applyOne applies one check of key to s and returns the batch.
func applyCheck(t *testing.T, s limits.Store, c limits.Check) *limits.Batch {
	t.Helper()
	b := &limits.Batch{Checks: []limits.Check{c}}
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// overBy is an outcome over with nothing left, resetting in reset.
func overBy(reset time.Duration) limits.Outcome { return limits.Outcome{Over: true, Reset: reset} }

// TestDenyCacheUsageCharges: a usage charge always reaches the store,
// even on a key the cache holds as over, so that it counts; and a charge
// that went over enters its key as over for one hit until the debt is
// repaid, so that checks are answered locally meanwhile.
func TestDenyCacheUsageCharges(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	c := store.NewDenyCache(inner, store.DenyCacheOptions{Now: clk.Now})
	// 10 a second, burst 10: 15 leave 5 owed, and one more hit fits
	// after 6 have refilled, 600 ms.
	l, err := limits.NewLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	key := storetest.Key(t.Name(), "tenant", l)
	charge := func(hits uint64) limits.Check { return limits.Check{Key: key, Limit: l, Hits: hits, Usage: true} }

	if b := applyCheck(t, c, charge(15)); b.Admitted || b.Outcomes[0] != overBy(600*time.Millisecond) {
		t.Fatalf("charge 15: admitted %v, %+v; want over(0, 600ms)", b.Admitted, b.Outcomes[0])
	}
	calls := inner.calls.Load()
	if b := applyCheck(t, c, limits.Check{Key: key, Limit: l}); b.DecidedBy != store.DecidedByDenyCache || !b.Outcomes[0].Over {
		t.Errorf("check after the charge: decided by %q, %+v; want the deny cache, over", b.DecidedBy, b.Outcomes[0])
	}
	if got := inner.calls.Load(); got != calls {
		t.Errorf("the check reached the store")
	}
	// 5 more, on a key the cache holds as over: counted by the store.
	if b := applyCheck(t, c, charge(5)); b.DecidedBy != "" || b.Outcomes[0] != overBy(1100*time.Millisecond) {
		t.Errorf("charge 5 in debt: decided by %q, %+v; want the store, over(0, 1.1s)", b.DecidedBy, b.Outcomes[0])
	}
	clk.Advance(700 * time.Millisecond)
	if b := applyCheck(t, c, limits.Check{Key: key, Limit: l}); !b.Outcomes[0].Over || b.Outcomes[0].Reset != 400*time.Millisecond-time.Microsecond {
		t.Errorf("check at 700 ms: %+v; want over, the cache's reset of 400 ms less a tick", b.Outcomes[0])
	}
	clk.Advance(400 * time.Millisecond)
	if b := applyCheck(t, c, limits.Check{Key: key, Limit: l}); !b.Admitted {
		t.Errorf("check at 1.1 s: %+v; want admitted, the debt repaid", b.Outcomes[0])
	}
}

// TestLeasesUsageCharges: a usage charge on a leased limit is never taken
// from the lease: the shared store counts it; one that takes the limit
// into debt ends the lease, so that nothing more is admitted locally.
func TestLeasesUsageCharges(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(inner, store.LeasesOptions{Now: clk.Now})
	l := leased(t, limits.FixedWindow, 1000, 100, limits.UnitMinute)
	key := storetest.Key(t.Name(), "global", l)
	if b := applyCheck(t, ls, limits.Check{Key: key, Limit: l, Hits: 1}); !b.Admitted || ls.Held(key) != 100 {
		t.Fatalf("first request: admitted %v, held %d; want admitted and a lease of 100", b.Admitted, ls.Held(key))
	}
	// 500 fit: counted by the store, not taken from the lease.
	calls := inner.calls.Load()
	if b := applyCheck(t, ls, limits.Check{Key: key, Limit: l, Hits: 500, Usage: true}); !b.Admitted || b.Outcomes[0].Remaining != 499 {
		t.Errorf("charge 500: admitted %v, %+v; want admitted with 499 left (1000 - 1 - 500, 100 of them in the lease)", b.Admitted, b.Outcomes[0])
	}
	if b := applyCheck(t, ls, limits.Check{Key: key, Limit: l}); !b.Admitted || b.Outcomes[0].Remaining != 499 || b.DecidedBy != store.DecidedByLease {
		t.Errorf("check after it: %+v decided by %q; want 499 left, from the lease", b.Outcomes[0], b.DecidedBy)
	}
	if inner.calls.Load() != calls+1 || ls.Held(key) != 100 {
		t.Errorf("charge 500: %d store calls, lease %d; want 1 call and the lease untouched", inner.calls.Load()-calls, ls.Held(key))
	}
	// 600 more go over, into debt: counted, and the lease ends.
	if b := applyCheck(t, ls, limits.Check{Key: key, Limit: l, Hits: 600, Usage: true}); b.Admitted || !b.Outcomes[0].Over {
		t.Errorf("charge 600: admitted %v, %+v; want over", b.Admitted, b.Outcomes[0])
	}
	if got := ls.Held(key); got != 0 {
		t.Errorf("lease holds %d after the limit went into debt, want 0", got)
	}
	if b := applyCheck(t, ls, limits.Check{Key: key, Limit: l, Hits: 1}); b.Admitted {
		t.Errorf("a request in debt was admitted (%+v)", b.Outcomes[0])
	}
}

// TestLeasesUsageChargeInARejectedRequest: a usage charge on a leased
// limit counts in the shared store even when another check rejects its
// request, and even when the lease holds enough to cover it: were it
// taken from the lease, the rejection would give it back to the lease,
// and the charge would be counted nowhere.
func TestLeasesUsageChargeInARejectedRequest(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	shared := memory.New(memory.Options{Now: clk.Now})
	ls := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
	global := leased(t, limits.FixedWindow, 1000, 100, limits.UnitMinute)
	user := leased(t, limits.FixedWindow, 1, 0, limits.UnitMinute)
	gk, uk := storetest.Key(t.Name(), "global", global), storetest.Key(t.Name(), "user", user)
	apply := func(checks ...limits.Check) *limits.Batch {
		t.Helper()
		b := &limits.Batch{Checks: checks}
		if err := ls.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := apply(limits.Check{Key: gk, Limit: global, Hits: 1}, limits.Check{Key: uk, Limit: user, Hits: 1}); !b.Admitted || ls.Held(gk) != 100 {
		t.Fatalf("first request: admitted %v, held %d; want admitted and a lease of 100", b.Admitted, ls.Held(gk))
	}
	// The user is over: the request is rejected, and its charge of 5,
	// which the lease could cover, counts all the same.
	b := apply(limits.Check{Key: gk, Limit: global, Hits: 5, Usage: true}, limits.Check{Key: uk, Limit: user, Hits: 1})
	if b.Admitted {
		t.Fatal("a request over the user limit was admitted")
	}
	if got := b.Outcomes[0]; got.Over || got.Remaining != 1000-1-5 {
		t.Errorf("the charge's outcome: %+v; want 994 left (1000 - 1 - 5, 100 of them in the lease)", got)
	}
	if got := ls.Held(gk); got != 100 {
		t.Errorf("the lease holds %d after the charge, want 100: a charge is never taken from it", got)
	}
	plain := *global
	plain.Lease = 0
	if got := applyCheck(t, shared, limits.Check{Key: gk, Limit: &plain}).Outcomes[0].Remaining; got != 1000-1-100-5 {
		t.Errorf("the shared store has %d left, want 894 (1000 - 1 - the lease of 100 - the charge of 5): the charge was counted nowhere", got)
	}
}

// TestLeasesRefunds: a refund (Envoy's is_negative_hits) on a leased
// limit is never taken from a lease: it reaches the shared store, where
// another sidecar whose lease ran dry finds it at its next refill. The
// limit is Envoy's concurrency example, 2 in flight, with a lease of 1.
func TestLeasesRefunds(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch.Add(100 * time.Millisecond))
	shared := memory.New(memory.Options{Now: clk.Now})
	a := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
	b := store.NewLeases(shared, store.LeasesOptions{Now: clk.Now})
	l := leased(t, limits.FixedWindow, 2, 1, limits.UnitHour)
	key := storetest.Key(t.Name(), "in_flight", l)
	ordinary := limits.Check{Key: key, Limit: l, Hits: 1}
	for i, st := range []struct {
		s      limits.Store
		give   limits.Check
		admit  bool
		remain uint64
	}{
		{b, ordinary, true, 1},
		{a, limits.Check{Key: key, Limit: l, Hits: 1, Usage: true}, true, 0},
		{b, ordinary, false, 0},
		{a, limits.Check{Key: key, Limit: l, Hits: 1, Refund: true}, true, 1},
		{b, ordinary, true, 0},
		{b, ordinary, false, 0},
	} {
		got := applyCheck(t, st.s, st.give)
		if got.Admitted != st.admit || got.Outcomes[0].Remaining != st.remain {
			t.Errorf("step %d: admitted %v, %+v; want admitted %v, %d left", i, got.Admitted, got.Outcomes[0], st.admit, st.remain)
		}
	}
	if held := a.Held(key); held != 0 {
		t.Errorf("sidecar a holds a lease of %d: its charge and refund went through a lease", held)
	}
}
