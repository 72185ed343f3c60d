package store_test

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestCalendarThroughLeasesAndDenyCache: a calendar month, leased and
// behind a deny cache, ends at the month's real end in New York (31
// days less an hour in March): the lease is spent by then and the
// cached denial forgotten, so the first request of April reaches the
// store and is admitted with a whole month's budget, not a 30-day
// window's.
func TestCalendarThroughLeasesAndDenyCache(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	march := time.Date(2024, 3, 1, 0, 0, 0, 0, ny)
	april := time.Date(2024, 4, 1, 0, 0, 0, 0, ny)
	clk := storetest.NewClock(march.Add(time.Hour))
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	deny := store.NewDenyCache(inner, store.DenyCacheOptions{Now: clk.Now})
	ls := store.NewLeases(deny, store.LeasesOptions{Now: clk.Now})
	l, err := limits.NewCalendarLimit(20, limits.UnitMonth, &limits.Calendar{Location: ny})
	if err != nil {
		t.Fatal(err)
	}
	l.Lease = 4
	key := storetest.Key(t.Name(), "tenant", l)
	apply := func(hits uint64) *limits.Batch {
		t.Helper()
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: hits}}}
		if err := ls.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := apply(1)
	if !b.Admitted || b.Outcomes[0].Reset != april.Sub(clk.Now()) {
		t.Fatalf("first request: admitted %v, reset %s; want admitted, reset %s", b.Admitted, b.Outcomes[0].Reset, april.Sub(clk.Now()))
	}
	if h := ls.Held(key); h == 0 {
		t.Fatal("no lease taken: the test proves nothing of leases")
	}
	for range 30 {
		apply(1)
	}
	// The budget is spent: the store says so, and the cache remembers.
	clk.Set(april.Add(-time.Second))
	// (The leases' answer may round its reset down by a µs.)
	if b := apply(1); b.Admitted || b.Outcomes[0].Reset > time.Second || b.Outcomes[0].Reset < time.Second-time.Millisecond {
		t.Fatalf("at March's last second: admitted %v, reset %s; want over, reset 1s", b.Admitted, b.Outcomes[0].Reset)
	}
	calls := inner.calls.Load()
	if b := apply(1); b.Admitted {
		t.Fatal("admitted within the spent month")
	}
	if inner.calls.Load() != calls {
		t.Error("the deny cache did not answer within the spent month: the test proves nothing of it")
	}
	clk.Set(april)
	if h := ls.Held(key); h != 0 {
		t.Errorf("lease holds %d hits of March in April", h)
	}
	b = apply(1)
	if !b.Admitted {
		t.Fatal("April's first request rejected")
	}
	if inner.calls.Load() == calls {
		t.Error("April's first request was answered without the store")
	}
	if got, want := b.Outcomes[0].Reset, 30*24*time.Hour; got != want {
		t.Errorf("April's reset %s, want %s", got, want)
	}
}
