package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// newRedis returns a Redis store on srv with key prefix prefix, deciding
// by clk, closed at cleanup.
func newRedis(t testing.TB, srv *redistest.Server, prefix string, clk *storetest.Clock) *redis.Store {
	t.Helper()
	return NewRedis(t, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: prefix}, clk)
}

// NewRedis returns the Redis store of o, deciding by clk, closed at
// cleanup. Braces in o.KeyPrefix, which would set the keys' hash tag,
// become parentheses. Exported for the tests of package store_test.
func NewRedis(t testing.TB, o redis.Options, clk *storetest.Clock) *redis.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.KeyPrefix = strings.NewReplacer("{", "(", "}", ")").Replace(o.KeyPrefix)
	o.Timeout, o.Now = 5*time.Second, clk.Now
	s, err := redis.New(ctx, o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestDenyCacheExactAgainstRedis drives two Redis stores on one server in
// lockstep with the same requests, one behind a DenyCache, and checks
// that the cache never changes a verdict: same Admitted for every batch,
// identical outcomes for batches Redis answered, and for batches the
// cache answered, every check it calls over is over in Redis too, with no
// more remaining and no later reset.
//
// The requests are random but seeded: batches of one to three checks on
// three keys, hits 0 to 6, of a per-minute limit of the algorithm, a
// shadow limit and, rarely, a limit of zero requests; time advances by
// whole seconds (so no Redis key is ever within a second of its TTL,
// which runs in Redis's real time), over about an hour and a half of fake
// time.
func TestDenyCacheExactAgainstRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch)
			plain := newRedis(t, srv, "plain:"+t.Name()+":", clk)
			sl := &spy{next: newRedis(t, srv, "cached:"+t.Name()+":", clk), clk: clk, latency: 2500 * time.Millisecond}
			c := NewDenyCache(sl, DenyCacheOptions{Now: clk.Now})

			enforced := mustLimit(t, alg, 5, limits.UnitMinute, 3)
			shadowed := *mustLimit(t, alg, 2, limits.UnitMinute, 2)
			shadowed.Shadow = true
			ban := mustLimit(t, alg, 0, limits.UnitMinute, 0)
			hits := []uint64{0, 1, 1, 1, 1, 2, 3, 6}
			advance := []time.Duration{0, 0, 1, 2, 3, 5, 8, 13, 21}

			rng := rand.New(rand.NewPCG(1, uint64(alg)))
			var at time.Duration
			var local, admitted, overInRedis int
			for i := range 1000 {
				at += advance[rng.IntN(len(advance))] * time.Second
				var checks []limits.Check
				for range 1 + rng.IntN(3) {
					name := fmt.Sprint("k", rng.IntN(3))
					l := enforced
					switch r := rng.IntN(20); {
					case r == 0:
						l = ban
					case r < 4:
						l, name = &shadowed, "s"+name
					}
					key := storetest.Key("exact", name, l)
					checks = append(checks, limits.Check{Key: key, Limit: l, Hits: hits[rng.IntN(len(hits))]})
				}
				want := &limits.Batch{Checks: checks}
				got := &limits.Batch{Checks: append([]limits.Check(nil), checks...)}
				clk.Set(storetest.Epoch.Add(at))
				if err := plain.Apply(context.Background(), want); err != nil {
					t.Fatalf("step %d: plain Apply: %v", i, err)
				}
				clk.Set(storetest.Epoch.Add(at))
				calls := sl.calls.Load()
				if err := c.Apply(context.Background(), got); err != nil {
					t.Fatalf("step %d: cached Apply: %v", i, err)
				}
				isLocal := sl.calls.Load() == calls
				compareBatches(t, fmt.Sprintf("step %d (at %v)", i, at), want, got, isLocal)
				switch {
				case isLocal:
					local++
				case got.Admitted:
					admitted++
				default:
					overInRedis++
				}
			}
			t.Logf("%d batches answered locally, %d admitted by Redis, %d rejected by Redis", local, admitted, overInRedis)
			if local < 30 || admitted < 30 || overInRedis < 30 {
				t.Errorf("too few of a kind (local %d, admitted %d, rejected by Redis %d): the sequence does not exercise the cache", local, admitted, overInRedis)
			}
			if got := c.Answered(); got != uint64(local) {
				t.Errorf("Answered() = %d, want %d", got, local)
			}
		})
	}
}

// Several sidecars, each with its own cache, share one Redis: together
// they must admit exactly the limit, under concurrency.
func TestDenyCacheSidecarsShareRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	newStores := func(t *testing.T, clk *storetest.Clock) []limits.Store {
		var stores []limits.Store
		for range 4 {
			r := newRedis(t, srv, "shared:"+t.Name()+":", clk)
			stores = append(stores, NewDenyCache(r, DenyCacheOptions{Now: clk.Now}))
		}
		return stores
	}
	t.Run("exact", func(t *testing.T) { storetest.RunExact(t, newStores, 64, 10) })
	t.Run("tiers", func(t *testing.T) { storetest.RunTiers(t, newStores, 64) })
	t.Run("in_flight", func(t *testing.T) { storetest.RunInFlight(t, newStores, 64, 10) })
}

// BenchmarkDenyCacheRedis compares a request on a key that is over its
// limit answered by Redis and by the cache in front of it.
func BenchmarkDenyCacheRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	l := mustLimit(b, limits.FixedWindow, 1, limits.UnitHour, 0)
	key := storetest.Key("bench", "hot", l)
	r, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	batch := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
	for range 2 { // use up the hour's one hit
		if err := r.Apply(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	for _, bb := range []struct {
		name string
		s    limits.Store
	}{
		{"redis", r},
		{"cache", NewDenyCache(r, DenyCacheOptions{})},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bb.s.Apply(ctx, batch); err != nil || batch.Admitted {
					b.Fatalf("Apply: %v, admitted %v", err, batch.Admitted)
				}
			}
		})
	}
}
