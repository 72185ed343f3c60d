package store

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestLeasesOnRedis runs three sidecars' Leases, each on its own Redis
// store, against one redis-server, for every leasable algorithm: the
// fleet never admits more than the limit, under-admits by at most one
// lease per sidecar, and most requests are answered without Redis.
func TestLeasesOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range limits.Algorithms {
		if !alg.Leasable() {
			continue
		}
		t.Run(alg.String(), func(t *testing.T) {
			testLeasesOnRedis(t, alg, func(clk *storetest.Clock) limits.Store {
				return newRedis(t, srv, "lease:"+t.Name()+":", clk)
			})
		})
	}
}

// TestLeasesOnRedisCluster does the same on a Redis Cluster, where the
// leased limit shares a request with a limit in another slot.
func TestLeasesOnRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	testLeasesOnRedis(t, limits.FixedWindow, func(clk *storetest.Clock) limits.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := redis.New(ctx, redis.Options{ClusterAddrs: c.Addrs, KeyPrefix: "lease:", Timeout: 5 * time.Second, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func testLeasesOnRedis(t *testing.T, alg limits.Algorithm, newStore func(*storetest.Clock) limits.Store) {
	const (
		sidecars   = 3
		limit      = 1000
		lease      = 20
		goroutines = 16
		perSidecar = 1000
	)
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	l, err := limits.NewLimit(alg, limit, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Lease = lease
	other, err := limits.NewLimit(limits.FixedWindow, 1_000_000, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	key := storetest.Key(t.Name(), "capped", l)
	otherKey := storetest.Key(t.Name(), "other", other)
	var admitted, calls atomic.Int64
	leases := make([]*Leases, sidecars)
	for i := range leases {
		leases[i] = NewLeases(&countingStore{next: newStore(clk), calls: &calls}, LeasesOptions{Now: clk.Now})
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
							// Redis decides with the leased one's refills.
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
	// are spread, and most never reach Redis.
	send(300)
	if got := admitted.Load(); got != 900 {
		t.Errorf("admitted %d of 900 requests below the limit, want all", got)
	}
	// A quarter of the requests carry the other limit and need Redis
	// anyway; the rest reach it only to refill a lease, which asks once
	// it is below a quarter, so for at least lease/2 hits.
	if n, most := calls.Load(), int64(900/4+900/(lease/2)+sidecars); n > most {
		t.Errorf("%d Redis calls for 900 requests with leases of %d, want at most %d: the leases did not spare them", n, lease, most)
	}
	t.Logf("%d Redis calls for the first 900 requests", calls.Load())
	// Past it, the fleet admits at most the limit, and at least the limit
	// less what the sidecars still hold.
	send(1000)
	got := admitted.Load()
	if got > limit || got < limit-sidecars*lease {
		t.Errorf("admitted %d of %d, want %d..%d", got, sidecars*perSidecar, limit-sidecars*lease, limit)
	}
	t.Logf("admitted %d of %d", got, sidecars*perSidecar)
}

// countingStore counts the calls that reach the store it wraps.
type countingStore struct {
	next  limits.Store
	calls *atomic.Int64
}

func (c *countingStore) Apply(ctx context.Context, b *limits.Batch) error {
	c.calls.Add(1)
	return c.next.Apply(ctx, b)
}
