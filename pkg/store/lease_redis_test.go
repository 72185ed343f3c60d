package store_test

import (
	"testing"

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
