package memory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func newMemory(t *testing.T, clk *storetest.Clock) limits.Store {
	return memory.New(memory.Options{Now: clk.Now})
}

func TestStoreCases(t *testing.T) {
	storetest.Run(t, newMemory)
}

func TestOverrideKeys(t *testing.T) {
	storetest.RunOverrideKeys(t, newMemory)
}

func TestStoreGrants(t *testing.T) {
	storetest.RunGrants(t, newMemory)
}

func TestStoreExact(t *testing.T) {
	storetest.RunExact(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newMemory(t, clk)}
	}, 64, 10)
}

func TestStoreInFlight(t *testing.T) {
	storetest.RunInFlight(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newMemory(t, clk)}
	}, 64, 20)
}

func TestStoreTiers(t *testing.T) {
	storetest.RunTiers(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newMemory(t, clk)}
	}, 64)
}

func TestStoreDropsExpiredState(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	s := memory.New(memory.Options{Now: clk.Now})
	l, err := limits.NewLimit(limits.SlidingWindow, 10, limits.UnitSecond, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		key := storetest.Key(t.Name(), fmt.Sprint("user", i), l)
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 10_000 {
		t.Fatalf("Len = %d after 10000 users, want 10000", n)
	}
	// A sliding window's state lives two windows. Past that, touching
	// every shard once must sweep the rest away.
	clk.Advance(2*time.Second + time.Millisecond)
	for i := range 5_000 {
		key := storetest.Key(t.Name(), fmt.Sprint("later", i), l)
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 5_000 {
		t.Errorf("Len = %d, want 5000: expired state was kept", n)
	}
}

func mustLimit(t *testing.T, alg limits.Algorithm, requests uint64, unit limits.Unit, burst uint64) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, 1, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hit applies one check of hits on key and reports whether it was
// admitted.
func hit(t *testing.T, s limits.Store, key string, l *limits.Limit, hits uint64) bool {
	t.Helper()
	b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: hits}}}
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b.Admitted
}

// flood sends one hit on each of n new keys under l.
func flood(t *testing.T, s *memory.Store, name string, n int, l *limits.Limit) {
	t.Helper()
	for i := range n {
		hit(t, s, storetest.Key(t.Name(), fmt.Sprint(name, "-", i), l), l, 1)
	}
}

// A key evicted by a flood of other keys must not admit more than it
// would have had it stayed: the capped store's victim is compared, step
// by step, with the same key on a store that never evicts, while the
// flood repeats through two windows.
func TestEvictedKeyAdmitsNoMore(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const maxKeys = 64
			l := mustLimit(t, alg, 5, limits.UnitMinute, 5)
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			capped := memory.New(memory.Options{Now: clk.Now, MaxKeys: maxKeys})
			exact := memory.New(memory.Options{Now: clk.Now, MaxKeys: 1 << 20})
			victim := storetest.Key(t.Name(), "victim", l)
			var gotN, wantN int
			for step := range 60 {
				if step > 0 {
					clk.Advance(2 * time.Second)
					flood(t, capped, fmt.Sprint("flood", step), 10*maxKeys, l)
					if n := capped.Len(); n > maxKeys {
						t.Fatalf("Len = %d, more than MaxKeys %d", n, maxKeys)
					}
				}
				if step > 0 && capped.Holds(victim) {
					t.Fatalf("step %d: the victim was not evicted; the test proves nothing", step)
				}
				if hit(t, capped, victim, l, 1) {
					gotN++
				}
				if hit(t, exact, victim, l, 1) {
					wantN++
				}
				if gotN > wantN {
					t.Fatalf("step %d (%v): the evicted key admitted %d hits, the store that kept it %d", step, clk.Now().Sub(storetest.Epoch), gotN, wantN)
				}
			}
			// Under-admission is bounded: the key is not locked out.
			if gotN == 0 {
				t.Errorf("the evicted key admitted nothing in two minutes; want some (the store that kept it admitted %d)", wantN)
			}
			t.Logf("admitted %d, %d without eviction; %d evictions", gotN, wantN, capped.Evictions())
		})
	}
}

// A flood makes keys that the store does not hold start fuller than
// fresh, since any of them could be a flood key come back; that lasts
// only as long as the flood keys' own state would have.
func TestUnderAdmissionEndsWithTheWindow(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const maxKeys = 64
			l := mustLimit(t, alg, 5, limits.UnitMinute, 5)
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := memory.New(memory.Options{Now: clk.Now, MaxKeys: maxKeys})
			flood(t, s, "flood", 20*maxKeys, l)
			before := s.GhostStarts()
			hit(t, s, storetest.Key(t.Name(), "newcomer", l), l, 0)
			if s.GhostStarts() != before+1 {
				t.Fatalf("the newcomer did not start from the ghost; the test proves nothing")
			}
			// Two windows: the longest any algorithm remembers a hit.
			clk.Advance(2 * time.Minute)
			n := 0
			for hit(t, s, storetest.Key(t.Name(), "newcomer", l), l, 1) {
				n++
			}
			if n != 5 {
				t.Errorf("a new key admitted %d hits two windows after a flood, want its limit 5", n)
			}
		})
	}
}

// A flood raises what the ghost sets hold by a few hits per MaxKeys new
// keys, as each generation of flood keys starts from what the one before
// left: 2048 one-hit keys into 1024 slots cost a new key a few hits, not
// its limit. (32 times as many leave a new key 10 to 20 of 100.)
func TestSmallFloodCostsNewKeysLittle(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l := mustLimit(t, alg, 100, limits.UnitMinute, 100)
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := memory.New(memory.Options{Now: clk.Now, MaxKeys: 1024})
			flood(t, s, "flood", 2048, l)
			for i := range 10 {
				n := 0
				for hit(t, s, storetest.Key(t.Name(), fmt.Sprint("newcomer", i), l), l, 1) {
					n++
				}
				if n < 90 {
					t.Errorf("newcomer %d admitted %d hits after a flood of 2048 one-hit keys, want at least 90 of 100", i, n)
				}
			}
		})
	}
}

func TestStoreStaysWithinMaxKeys(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	const maxKeys = 1000
	s := memory.New(memory.Options{Now: clk.Now, MaxKeys: maxKeys})
	l := mustLimit(t, limits.FixedWindow, 10, limits.UnitHour, 0)
	flood(t, s, "user", 5000, l)
	if n := s.Len(); n > maxKeys {
		t.Errorf("Len = %d, more than MaxKeys %d", n, maxKeys)
	}
	// 1000 keys over 15 shards of 66: 990 fit, every other key evicted
	// one live key.
	if got, want := s.Evictions(), uint64(5000-s.Len()); got != want {
		t.Errorf("Evictions = %d, want %d (keys sent less keys held)", got, want)
	}
}

func TestLongKeysCountAsSeveral(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	s := memory.New(memory.Options{Now: clk.Now, MaxKeys: 64})
	l := mustLimit(t, limits.FixedWindow, 10, limits.UnitHour, 0)
	long := strings.Repeat("v", 1000) // with the rest of the key, 4 units
	for i := range 100 {
		key := storetest.Key(t.Name(), fmt.Sprint(long, i), l)
		hit(t, s, key, l, 1)
	}
	if n := s.Len(); n > 64/4 {
		t.Errorf("Len = %d keys of over 768 bytes, want at most %d", n, 64/4)
	}
}

func TestExpiredKeysGoFirst(t *testing.T) {
	// 8 keys: one shard of 8, so every eviction looks at every key.
	clk := storetest.NewClock(storetest.Epoch.Add(500 * time.Millisecond))
	s := memory.New(memory.Options{Now: clk.Now, MaxKeys: 8})
	minute := mustLimit(t, limits.FixedWindow, 10, limits.UnitMinute, 0)
	second := mustLimit(t, limits.FixedWindow, 10, limits.UnitSecond, 0)
	// The first batch sweeps, so the next sweep is due at 1.5 s.
	hit(t, s, storetest.Key(t.Name(), "live", minute), minute, 1)
	clk.Advance(100 * time.Millisecond)
	flood(t, s, "short", 7, second) // expire at 1 s
	clk.Set(storetest.Epoch.Add(1200 * time.Millisecond))
	flood(t, s, "new", 7, minute)
	if n := s.Evictions(); n != 0 {
		t.Errorf("Evictions = %d with 7 expired keys to drop for 7 new ones, want 0", n)
	}
	// The live key is the least recently used now.
	flood(t, s, "more", 1, minute)
	if n := s.Evictions(); n != 1 {
		t.Errorf("Evictions = %d, want 1", n)
	}
	if s.Holds(storetest.Key(t.Name(), "live", minute)) {
		t.Errorf("the least recently used live key was not the one evicted")
	}
}

// The shared cases pass on a store that holds a single key, so that
// every other key a case touches is evicted and read back from the ghost.
func TestStoreCasesOneKey(t *testing.T) {
	newTiny := func(t *testing.T, clk *storetest.Clock) limits.Store {
		return memory.New(memory.Options{Now: clk.Now, MaxKeys: 1})
	}
	storetest.RunHoldingOneKey(t, newTiny)
	storetest.RunGrants(t, newTiny)
	storetest.RunExact(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newTiny(t, clk)}
	}, 16, 10)
}

func TestOverrideAlgorithms(t *testing.T) {
	storetest.RunOverrideAlgorithms(t, newMemory)
}
