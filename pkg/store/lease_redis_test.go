package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestLeasesOnRedis is TestLeasesExact with each sidecar on its own Redis
// store, all on one redis-server.
func TestLeasesOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range leasedAlgorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			testLeasesFleet(t, alg, func(clk *storetest.Clock) limits.Store {
				return store.NewRedis(t, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "lease:" + t.Name() + ":"}, clk)
			})
		})
	}
}

// TestLeasesOnRedisCluster does the same on a Redis Cluster, where the
// leased limit shares a request with a limit in another slot.
func TestLeasesOnRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	testLeasesFleet(t, limits.FixedWindow, func(clk *storetest.Clock) limits.Store {
		return store.NewRedis(t, redis.Options{ClusterAddrs: c.Addrs, KeyPrefix: "lease:"}, clk)
	})
}

// applyOne decides one check, hits on key under l, on s.
func applyOne(t testing.TB, s limits.Store, key string, l *limits.Limit, hits uint64) *limits.Batch {
	t.Helper()
	b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: hits}}}
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// admitOne decides one hit on key under l on s, which must admit it.
func admitOne(t testing.TB, s limits.Store, key string, l *limits.Limit) {
	t.Helper()
	if b := applyOne(t, s, key, l, 1); !b.Admitted {
		t.Fatalf("%s: not admitted", key)
	}
}

// remainingOf returns what s has left of l on key, asked for no hits and
// no lease.
func remainingOf(t testing.TB, s limits.Store, key string, l *limits.Limit) uint64 {
	t.Helper()
	plain := *l
	plain.Lease = 0
	return applyOne(t, s, key, &plain, 0).Outcomes[0].Remaining
}

// TestLeasesReleaseOnRedis takes a lease on Redis, spends part of it and
// releases the rest at shutdown: Redis must count exactly the hits
// admitted, for every leasable algorithm, on standalone Redis and on a
// Cluster; and a lease whose window has ended gives nothing back.
func TestLeasesReleaseOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redistest.StartCluster(t)
	for name, o := range map[string]redis.Options{
		"standalone": {URL: "redis://" + srv.Addr},
		"cluster":    {ClusterAddrs: c.Addrs},
	} {
		for _, alg := range leasedAlgorithms() {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
				o.KeyPrefix = "release:" + t.Name() + ":"
				raw := store.NewRedis(t, o, clk)
				l := store.NewLeases(raw, store.LeasesOptions{Now: clk.Now, Return: raw})
				lim := leased(t, alg, 1000, 20, limits.UnitMinute)
				key := storetest.Key(t.Name(), "k", lim)
				for range 6 {
					admitOne(t, l, key, lim)
				}
				held := l.Held(key)
				if held == 0 {
					t.Fatal("no lease held after 6 requests")
				}
				if got, want := remainingOf(t, raw, key, lim), 1000-6-held; got != want {
					t.Fatalf("Redis remaining %d with %d held, want %d", got, held, want)
				}
				n, err := l.Release(context.Background())
				if err != nil || n != held {
					t.Fatalf("Release = %d, %v; want %d given back", n, err, held)
				}
				if got := l.Held(key); got != 0 {
					t.Errorf("%d held after Release, want 0", got)
				}
				if got, want := remainingOf(t, raw, key, lim), uint64(1000-6); got != want {
					t.Errorf("Redis remaining %d after Release, want %d: only the 6 admitted hits counted", got, want)
				}

				// A lease whose window has ended holds nothing to give back.
				admitOne(t, l, key, lim)
				clk.Advance(2 * time.Minute)
				if n, err := l.Release(context.Background()); err != nil || n != 0 {
					t.Errorf("Release after the lease ended = %d, %v; want 0", n, err)
				}
			})
		}
		// More leases than one refund.lua call of a Return takes.
		t.Run(name+"/many", func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
			o.KeyPrefix = "release:" + t.Name() + ":"
			raw := store.NewRedis(t, o, clk)
			l := store.NewLeases(raw, store.LeasesOptions{Now: clk.Now, Return: raw})
			lim := leased(t, limits.FixedWindow, 1000, 20, limits.UnitMinute)
			const keys = 600
			var held uint64
			for i := range keys {
				key := storetest.Key(t.Name(), fmt.Sprint("k", i), lim)
				admitOne(t, l, key, lim)
				held += l.Held(key)
			}
			n, err := l.Release(context.Background())
			if err != nil || n != held {
				t.Fatalf("Release = %d, %v; want %d", n, err, held)
			}
			for i := range keys {
				if got := remainingOf(t, raw, storetest.Key(t.Name(), fmt.Sprint("k", i), lim), lim); got != 999 {
					t.Fatalf("key %d: remaining %d after Release, want 999", i, got)
				}
			}
		})
	}
}

// lagging is a limits.Store that moves the clock by lag before passing
// the next batch on, once: a request whose round trip crosses a window's
// end.
type lagging struct {
	next limits.Store
	clk  *storetest.Clock
	lag  time.Duration
}

func (s *lagging) Apply(ctx context.Context, b *limits.Batch) error {
	if s.lag > 0 {
		s.clk.Advance(s.lag)
		s.lag = 0
	}
	return s.next.Apply(ctx, b)
}

// TestLeasesAcrossAWindowEdge: a top-up sent just before a window ends
// and decided just after it is granted from the new window. The lease
// must not carry the old window's unused hits into the new one (the
// fleet would admit them twice), and Release must give back only what
// the new window granted: after it, the new window counts exactly the
// hits another sidecar was admitted there. A control key that only ever
// got the hits each window really counted must read the same.
func TestLeasesAcrossAWindowEdge(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(59*time.Second + 900*time.Millisecond))
			raw := store.NewRedis(t, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "edge:" + t.Name() + ":"}, clk)
			lag := &lagging{next: raw, clk: clk}
			l := store.NewLeases(lag, store.LeasesOptions{Now: clk.Now, Return: raw})
			lim := leased(t, alg, 1000, 20, limits.UnitMinute)
			plain := *lim
			plain.Lease = 0
			key, control := storetest.Key(t.Name(), "k", lim), storetest.Key(t.Name(), "control", lim)
			admitOne(t, l, key, lim) // 1 hit and a lease of 20, in the first window
			for l.Held(key) > 5 {
				admitOne(t, l, key, lim)
			}
			// What the first window counts now: the control key gets as much.
			applyOne(t, raw, control, &plain, 1000-remainingOf(t, raw, key, lim))
			// The next request takes the lease below a quarter; its top-up
			// leaves at 59.9 s and is decided at 60.1 s.
			lag.lag = 200 * time.Millisecond
			admitOne(t, l, key, lim)
			if held := l.Held(key); held > 20-4 {
				t.Errorf("lease holds %d after the top-up from the new window, which granted at most 16: the old window's hits came along", held)
			}
			// Another sidecar is admitted 10 hits in the new window.
			applyOne(t, raw, key, &plain, 10)
			applyOne(t, raw, control, &plain, 10)
			if _, err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, want := remainingOf(t, raw, key, lim), remainingOf(t, raw, control, lim); got != want {
				t.Errorf("remaining %d after Release, want %d, as for a key that only got the hits admitted", got, want)
			}
		})
	}
}
