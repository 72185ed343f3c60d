package store_test

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// quotaBatch is a batch whose checks are each in a quota group of their
// own, as a request of quota_mode descriptors is.
func quotaBatch(checks ...limits.Check) *limits.Batch {
	for i := range checks {
		checks[i].Group = i + 1
	}
	return &limits.Batch{Checks: checks, QuotaGroups: len(checks)}
}

func applyOK(t *testing.T, s limits.Store, b *limits.Batch) *limits.Batch {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDenyCacheQuota: a quota check the cache knows is over rejects
// nothing while another quota group may have room; once every group is
// over in the cache, the cache rejects alone.
func TestDenyCacheQuota(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	c := store.NewDenyCache(inner, store.DenyCacheOptions{Now: clk.Now})
	l := leased(t, limits.FixedWindow, 1, 0, limits.UnitMinute)
	a, b := storetest.Key(t.Name(), "a", l), storetest.Key(t.Name(), "b", l)

	// a is over, and the cache records it.
	applyOK(t, c, quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1}))
	if got := applyOK(t, c, quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1})); got.Admitted {
		t.Fatal("a second hit on a limit of 1 admitted")
	}
	// b has room: admitted, though the cache knows a is over.
	got := applyOK(t, c, quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1}, limits.Check{Key: b, Limit: l, Hits: 1}))
	if !got.Admitted || got.DecidedBy != "" {
		t.Fatalf("a over, b with room: admitted %v, decided by %q; want admitted by the store", got.Admitted, got.DecidedBy)
	}
	if !got.Outcomes[0].Over || got.Outcomes[1].Over {
		t.Errorf("outcomes %+v, want a over and b not", got.Outcomes)
	}
	// Now both are over: the store rejects, and then the cache alone.
	applyOK(t, c, quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1}, limits.Check{Key: b, Limit: l, Hits: 1}))
	calls := inner.calls.Load()
	got = applyOK(t, c, quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1}, limits.Check{Key: b, Limit: l, Hits: 1}))
	if got.Admitted || got.DecidedBy != store.DecidedByDenyCache || inner.calls.Load() != calls {
		t.Errorf("both over: admitted %v, decided by %q, %d store calls; want rejected by the cache alone", got.Admitted, got.DecidedBy, inner.calls.Load()-calls)
	}
	// A quota group that has no check is never over: the store decides.
	b3 := quotaBatch(limits.Check{Key: a, Limit: l, Hits: 1}, limits.Check{Key: b, Limit: l, Hits: 1})
	b3.QuotaGroups = 3
	if got := applyOK(t, c, b3); !got.Admitted || got.DecidedBy != "" {
		t.Errorf("a third group without checks: admitted %v, decided by %q; want admitted by the store", got.Admitted, got.DecidedBy)
	}
}

// TestLeasesQuota: quota checks are not leased, and a batch that passes
// through leases keeps its quota groups: a request whose every quota
// limit is over is rejected.
func TestLeasesQuota(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	inner := &counting{next: memory.New(memory.Options{Now: clk.Now})}
	ls := store.NewLeases(inner, store.LeasesOptions{Now: clk.Now})
	q := leased(t, limits.FixedWindow, 1, 1, limits.UnitMinute)
	big := leased(t, limits.FixedWindow, 1000, 10, limits.UnitMinute)
	r := leased(t, limits.FixedWindow, 1, 0, limits.UnitMinute)
	qk, bk, rk := storetest.Key(t.Name(), "q", q), storetest.Key(t.Name(), "big", big), storetest.Key(t.Name(), "r", r)

	applyOK(t, ls, quotaBatch(limits.Check{Key: qk, Limit: q, Hits: 1}, limits.Check{Key: rk, Limit: r, Hits: 1}))
	if got := applyOK(t, ls, quotaBatch(limits.Check{Key: qk, Limit: q, Hits: 1}, limits.Check{Key: rk, Limit: r, Hits: 1})); got.Admitted {
		t.Errorf("every quota limit over: admitted, outcomes %+v", got.Outcomes)
	}
	for range 3 {
		applyOK(t, ls, quotaBatch(limits.Check{Key: bk, Limit: big, Hits: 1}))
	}
	if got := ls.Held(bk); got != 0 {
		t.Errorf("a quota check's lease holds %d, want none", got)
	}
}
