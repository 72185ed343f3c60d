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

// chain is the sidecar's store chain on a memory backend, all on one
// clock: leases, then the deny cache, then the backend, whose calls are
// counted.
type chain struct {
	clk     *storetest.Clock
	backend *counting
	deny    *store.DenyCache
	leases  *store.Leases
}

func newChain() *chain {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	c := &chain{clk: clk, backend: &counting{next: memory.New(memory.Options{Now: clk.Now})}}
	c.deny = store.NewDenyCache(c.backend, store.DenyCacheOptions{Now: clk.Now})
	c.leases = store.NewLeases(c.deny, store.LeasesOptions{Now: clk.Now})
	return c
}

// apply sends one batch of checks through the chain and returns it.
func (c *chain) apply(t *testing.T, checks ...limits.Check) *limits.Batch {
	t.Helper()
	b := &limits.Batch{Checks: checks}
	if err := c.leases.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return b
}

func TestDecidedBy(t *testing.T) {
	fw := mustLimitOf(t, limits.FixedWindow, 1, limits.UnitMinute)
	lease := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	c := newChain()
	k := limits.Check{Key: "k", Limit: fw, Hits: 1}
	l := limits.Check{Key: "l", Limit: lease, Hits: 1}

	steps := []struct {
		name         string
		give         []limits.Check
		wantAdmitted bool
		want         string
	}{
		{"the backend admits", []limits.Check{k}, true, ""},
		{"the backend rejects", []limits.Check{k}, false, ""},
		{"the deny cache rejects", []limits.Check{k}, false, store.DecidedByDenyCache},
		{"the backend grants a lease", []limits.Check{l}, true, ""},
		{"the lease admits", []limits.Check{l}, true, store.DecidedByLease},
		// The lease answers l and passes k on, which the deny cache
		// rejects: the deny cache decided the request.
		{"the deny cache rejects beside a lease", []limits.Check{l, k}, false, store.DecidedByDenyCache},
	}
	for i, st := range steps {
		b := c.apply(t, st.give...)
		if b.Admitted != st.wantAdmitted {
			t.Errorf("step %d (%s): admitted = %v, want %v", i, st.name, b.Admitted, st.wantAdmitted)
		}
		if b.DecidedBy != st.want {
			t.Errorf("step %d (%s): DecidedBy = %q, want %q", i, st.name, b.DecidedBy, st.want)
		}
	}
}

func TestDenyCacheEntryAndForget(t *testing.T) {
	fw := mustLimitOf(t, limits.FixedWindow, 2, limits.UnitMinute)
	c := newChain()
	k := limits.Check{Key: "k", Limit: fw, Hits: 1}
	if _, ok := c.deny.Entry("k"); ok {
		t.Fatal("Entry of a fresh key: found")
	}
	c.apply(t, k)
	c.apply(t, k)
	c.apply(t, limits.Check{Key: "k", Limit: fw, Hits: 2}) // over with probe 2
	e, ok := c.deny.Entry("k")
	// The window ends 59 s after the clock; the entry a tick before.
	wantUntil := c.clk.Now().Add(59*time.Second - time.Microsecond)
	if !ok || e.Probe != 2 || !e.Until.Equal(wantUntil) || !e.Limit.CountsLike(fw) {
		t.Fatalf("Entry = %+v, %v; want probe 2 until %v", e, ok, wantUntil)
	}
	if !c.deny.Forget("k") {
		t.Error("Forget of a cached key = false")
	}
	if _, ok := c.deny.Entry("k"); ok {
		t.Error("Entry after Forget: found")
	}
	if c.deny.Len() != 0 {
		t.Errorf("Len after Forget = %d, want 0", c.deny.Len())
	}
	if c.deny.Forget("k") {
		t.Error("Forget of a key not cached = true")
	}
	// The next request goes to the backend again.
	calls := c.backend.calls.Load()
	c.apply(t, k)
	if c.backend.calls.Load() != calls+1 {
		t.Error("a request after Forget did not reach the backend")
	}
	// An entry that has expired is not shown.
	c.apply(t, limits.Check{Key: "k", Limit: fw, Hits: 2})
	c.clk.Advance(time.Minute)
	if e, ok := c.deny.Entry("k"); ok {
		t.Errorf("Entry after its reset: %+v", e)
	}
}

func TestLeasesLeaseAndDrop(t *testing.T) {
	lim := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	c := newChain()
	l := limits.Check{Key: "l", Limit: lim, Hits: 1}
	if _, ok := c.leases.Lease("l"); ok {
		t.Fatal("Lease of a fresh key: found")
	}
	c.apply(t, l)
	ls, ok := c.leases.Lease("l")
	// The grant runs to the end of the window, 59 s on.
	wantUntil := c.clk.Now().Add(59 * time.Second)
	if !ok || ls.Held != 10 || !ls.Until.Equal(wantUntil) || !ls.Limit.CountsLike(lim) {
		t.Fatalf("Lease = %+v, %v; want 10 held until %v", ls, ok, wantUntil)
	}
	c.apply(t, l)
	if ls, _ := c.leases.Lease("l"); ls.Held != 9 {
		t.Errorf("Lease after one local admission: held %d, want 9", ls.Held)
	}
	held, ok := c.leases.Drop("l")
	if !ok || held != 9 {
		t.Errorf("Drop = %d, %v; want 9, true", held, ok)
	}
	if _, ok := c.leases.Lease("l"); ok {
		t.Error("Lease after Drop: found")
	}
	if _, ok := c.leases.Drop("l"); ok {
		t.Error("Drop of a key without a lease = true")
	}
	calls := c.backend.calls.Load()
	c.apply(t, l)
	if c.backend.calls.Load() != calls+1 {
		t.Error("a request after Drop did not reach the backend")
	}
}

func mustLimitOf(t testing.TB, alg limits.Algorithm, requests uint64, unit limits.Unit) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
