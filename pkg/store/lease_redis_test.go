package store_test

import (
	"context"
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
				remaining := func() uint64 {
					t.Helper()
					probe := *lim
					probe.Lease = 0
					b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: &probe}}}
					if err := raw.Apply(context.Background(), b); err != nil {
						t.Fatal(err)
					}
					return b.Outcomes[0].Remaining
				}
				for range 6 {
					b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: lim, Hits: 1}}}
					if err := l.Apply(context.Background(), b); err != nil || !b.Admitted {
						t.Fatalf("Apply = %v, admitted %v", err, b.Admitted)
					}
				}
				held := l.Held(key)
				if held == 0 {
					t.Fatal("no lease held after 6 requests")
				}
				if got, want := remaining(), 1000-6-held; got != want {
					t.Fatalf("Redis remaining %d with %d held, want %d", got, held, want)
				}
				n, err := l.Release(context.Background())
				if err != nil || n != held {
					t.Fatalf("Release = %d, %v; want %d given back", n, err, held)
				}
				if got := l.Held(key); got != 0 {
					t.Errorf("%d held after Release, want 0", got)
				}
				if got, want := remaining(), uint64(1000-6); got != want {
					t.Errorf("Redis remaining %d after Release, want %d: only the 6 admitted hits counted", got, want)
				}

				// A lease whose window has ended holds nothing to give back.
				b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: lim, Hits: 1}}}
				if err := l.Apply(context.Background(), b); err != nil || !b.Admitted {
					t.Fatalf("Apply = %v, admitted %v", err, b.Admitted)
				}
				clk.Advance(2 * time.Minute)
				if n, err := l.Release(context.Background()); err != nil || n != 0 {
					t.Errorf("Release after the lease ended = %d, %v; want 0", n, err)
				}
			})
		}
	}
}
