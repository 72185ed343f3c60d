package redis_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestInspect reads and resets every algorithm's counter on each Redis
// topology, through the store's injected clock, and through Redis's own
// clock.
func TestInspect(t *testing.T) {
	run := func(t *testing.T, o redis.Options) {
		storetest.RunInspect(t, func(t *testing.T, clk *storetest.Clock) storetest.Inspector {
			return newStore(t, clocked(o, clk.Now))
		})
		t.Run("redis_clock", func(t *testing.T) { testInspectRedisClock(t, newStore(t, o)) })
	}
	t.Run("standalone", func(t *testing.T) {
		run(t, redis.Options{URL: urlOf(redistest.StartServer(t).Addr)})
	})
	t.Run("cluster", func(t *testing.T) {
		run(t, redis.Options{ClusterAddrs: redistest.StartCluster(t).Addrs})
	})
	t.Run("sentinel", func(t *testing.T) {
		sn := redistest.StartSentinel(t)
		run(t, redis.Options{SentinelMaster: sn.MasterName, SentinelAddrs: sn.SentinelAddrs})
	})
}

// testInspectRedisClock: without an injected clock, Inspect reads
// Redis's TIME, the clock the decisions use, and the state it reads
// gives the verdict the store gives.
func testInspectRedisClock(t *testing.T, s *redis.Store) {
	ctx := context.Background()
	for _, alg := range limits.Algorithms {
		l := mustLimit(t, alg, 10, limits.UnitHour, 1, 0)
		c := check("clock-"+alg.String(), l, 4)
		before := time.Now()
		apply(t, s, c)
		st, now, err := s.Inspect(ctx, c.Key, l)
		if err != nil {
			t.Fatalf("%s: Inspect: %v", alg, err)
		}
		// Redis runs on this machine: its clock is this one's.
		if now.Before(before.Add(-time.Second)) || now.After(time.Now().Add(time.Second)) {
			t.Errorf("%s: Inspect's time %v, not within a second of this machine's %v", alg, now, before)
		}
		got, _ := l.Evaluate(st, now.UnixMicro(), 0)
		if got.Over || got.Remaining != 6 {
			t.Errorf("%s: Evaluate(inspected state) = %+v, want 6 remaining after 4 of 10 hits", alg, got)
		}
	}
}

// TestInspectDifferential sends the same random requests to a Redis store
// and to the memory store, and after each reads the key back from both:
// the verdict limits.Limit.Evaluate draws from either state is the same,
// and is what the store answers.
func TestInspectDifferential(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 42))
	clk := storetest.NewClock(storetest.Epoch.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
	s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
	mem := memory.New(memory.Options{Now: clk.Now})
	pool := []*limits.Limit{
		mustLimit(t, limits.FixedWindow, 5, limits.UnitSecond, 1, 0),
		mustLimit(t, limits.SlidingWindow, 6, limits.UnitSecond, 2, 0),
		mustLimit(t, limits.SlidingLog, 5, limits.UnitSecond, 2, 0),
		mustLimit(t, limits.TokenBucket, 3, limits.UnitSecond, 1, 6),
		mustLimit(t, limits.LeakyBucket, 11, limits.UnitSecond, 2, 0),
	}
	for step := range 300 {
		l := pool[rng.IntN(len(pool))]
		c := check("diff", l, uint64(rng.IntN(4)))
		apply(t, s, c)
		apply(t, mem, c)
		clk.Advance(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
		for _, l := range pool {
			k := check("diff", l, 0).Key
			rst, rnow, err := s.Inspect(ctx, k, l)
			if err != nil {
				t.Fatalf("step %d: Redis Inspect: %v", step, err)
			}
			mst, mnow, err := mem.Inspect(ctx, k, l)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := l.Evaluate(rst, rnow.UnixMicro(), 0)
			want, _ := l.Evaluate(mst, mnow.UnixMicro(), 0)
			if got != want {
				t.Fatalf("step %d, %s: from Redis's state %+v, from memory's %+v\nRedis state %+v\nmemory state %+v", step, l.Algorithm, got, want, rst, mst)
			}
			if out := apply(t, s, check("diff", l, 0)).Outcomes[0]; out != got {
				t.Fatalf("step %d, %s: from Redis's state %+v, but Redis answers %+v", step, l.Algorithm, got, out)
			}
		}
	}
}

// TestInspectLongLog: a sliding log with more entries in its window than
// Inspect reads is an InspectError, not a huge reply.
func TestInspectLongLog(t *testing.T) {
	s := newStore(t, redis.Options{URL: urlOf(redistest.StartServer(t).Addr)})
	l := mustLimit(t, limits.SlidingLog, 2*redis.MaxInspectedLog, limits.UnitHour, 1, 0)
	c := check("long", l, 1)
	// Each check of a batch is an entry of its own.
	for n := 0; n <= redis.MaxInspectedLog; n += 1000 {
		checks := make([]limits.Check, 1000)
		for i := range checks {
			checks[i] = c
		}
		if b := apply(t, s, checks...); !b.Admitted {
			t.Fatalf("after %d entries: rejected", n)
		}
	}
	_, _, err := s.Inspect(context.Background(), c.Key, l)
	var ie *redis.InspectError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "11000 entries") {
		t.Fatalf("Inspect of a log of 11000 entries: %v, want an InspectError naming them", err)
	}
}
