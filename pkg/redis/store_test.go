package redis_test

import (
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

func TestStandaloneCases(t *testing.T) {
	srv := redistest.StartServer(t)
	newClocked := func(t *testing.T, clk *storetest.Clock) limits.Store {
		return newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
	}
	storetest.Run(t, newClocked)
	storetest.RunGrants(t, newClocked)
	storetest.RunOverrideKeys(t, newClocked)
	storetest.RunOverrideAlgorithms(t, newClocked)
}

// sharedStores returns n stores, like n sidecars, on one Redis and one
// key prefix.
func sharedStores(t *testing.T, o redis.Options, n int, clk *storetest.Clock) []limits.Store {
	o.KeyPrefix = newPrefix(t)
	stores := make([]limits.Store, n)
	for i := range stores {
		stores[i] = newStore(t, clocked(o, clk.Now))
	}
	return stores
}

func TestStandaloneExact(t *testing.T) {
	srv := redistest.StartServer(t)
	storetest.RunExact(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return sharedStores(t, redis.Options{URL: urlOf(srv.Addr)}, 3, clk)
	}, 3*64, 3)
}

// TestStandaloneInFlight is three sidecars on one Redis, requests in
// flight under a concurrency limit.
func TestStandaloneInFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	storetest.RunInFlight(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return sharedStores(t, redis.Options{URL: urlOf(srv.Addr)}, 3, clk)
	}, 64, 10)
}

func TestStandaloneTiers(t *testing.T) {
	srv := redistest.StartServer(t)
	storetest.RunTiers(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return sharedStores(t, redis.Options{URL: urlOf(srv.Addr)}, 3, clk)
	}, 3*64)
}
