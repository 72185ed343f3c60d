package redis_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestFastMatchesApply sends the same batches, of requests that fast.lua
// may decide per key, to two stores on one Redis: one that always tries
// MODE_FAST and one that never does. Every outcome, every stored value
// and every key's expiry must be the same, for every algorithm fast.lua
// serves, with keys repeated across a batch's requests as a global tier
// is, and limits that a batch sometimes fits and sometimes does not.
func TestFastMatchesApply(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	rng := rand.New(rand.NewPCG(7, 29))
	clk := storetest.NewClock(storetest.Epoch.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
	opts := clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now)
	fast, slow := opts, opts
	fast.KeyPrefix, slow.KeyPrefix = "fast:", "slow:"
	sf, ss := newStore(t, fast), newStore(t, slow)
	redis.AlwaysFast(sf)
	redis.NeverFast(ss)
	pool := []*limits.Limit{
		mustLimit(t, limits.FixedWindow, 100, limits.UnitSecond, 1, 0),
		mustLimit(t, limits.SlidingWindow, 90, limits.UnitSecond, 2, 0),
		mustLimit(t, limits.TokenBucket, 80, limits.UnitSecond, 1, 60),
		mustLimit(t, limits.LeakyBucket, 60, limits.UnitSecond, 3, 40),
		mustLimit(t, limits.TokenBucket, 7, limits.UnitMinute, 1, 50),
	}
	var keys []string
	stepped := time.Now()
	for step := range 400 {
		// Redis expires keys in real time: the clock moves at least as far
		// as real time did since the last step, so that Redis never drops
		// a key the clock still holds live, earlier for one store than the
		// other (as testDifferential does).
		before, real := clk.Now(), time.Since(stepped)
		stepped = time.Now()
		if rng.IntN(4) == 0 {
			clk.Advance(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
		}
		if clk.Now().Sub(before) < real {
			clk.Set(before.Add(real))
		}
		var bf, bs []*limits.Batch
		for range 2 + rng.IntN(6) {
			var checks []limits.Check
			for range 1 + rng.IntN(3) {
				i := rng.IntN(len(pool))
				l := pool[i]
				if rng.IntN(5) == 0 {
					sh := *l
					sh.Shadow = true
					l = &sh
				}
				hits := uint64(1 + rng.IntN(2))
				if rng.IntN(12) == 0 {
					hits = uint64(rng.IntN(25) + 1)
				}
				key := storetest.Key(t.Name(), fmt.Sprint("k", i, rng.IntN(2)), l)
				keys = append(keys, key)
				checks = append(checks, limits.Check{Key: key, Limit: l, Hits: hits})
			}
			bf = append(bf, &limits.Batch{Checks: checks})
			bs = append(bs, &limits.Batch{Checks: checks})
		}
		if err := redis.ApplyTogether(t.Context(), sf, bf); err != nil {
			t.Fatal(err)
		}
		if err := redis.ApplyTogether(t.Context(), ss, bs); err != nil {
			t.Fatal(err)
		}
		for i := range bf {
			if diff := diffBatch(bs[i], bf[i]); diff != "" {
				t.Fatalf("step %d: request %d of %d differs (-apply.lua +fast.lua):\n%s", step, i+1, len(bf), diff)
			}
		}
		for _, k := range keys {
			s, f := keyState(t, rc, "slow:"+k), keyState(t, rc, "fast:"+k)
			// The two writes are a moment apart in real time, which
			// Redis's expiry counts down: a key may be gone on one side
			// and about to go on the other.
			if (s.ttl-f.ttl).Abs() > 250*time.Millisecond || (s.live && f.live && s.value != f.value) {
				t.Fatalf("step %d: key %s holds %x with TTL %v after apply.lua, %x with TTL %v after fast.lua", step, k, s.value, s.ttl, f.value, f.ttl)
			}
		}
		keys = keys[:0]
	}
	fits, misses := redis.FastCounts(sf)
	t.Logf("batches decided per key %d, by apply.lua after not fitting %d", fits, misses)
	if fits < 50 || misses < 50 {
		t.Errorf("%d batches fit and %d did not: want at least 50 each, so both paths are compared", fits, misses)
	}
	if f, m := redis.FastCounts(ss); f+m != 0 {
		t.Errorf("the store that never tries MODE_FAST sent %d batches in it", f+m)
	}
}

// stored is a key's value and time to live (0 once it is gone).
type stored struct {
	value string
	ttl   time.Duration
	live  bool
}

// keyState reads key's value and time to live in one script, so that
// Redis cannot expire it between the two.
func keyState(t *testing.T, rc *goredis.Client, key string) stored {
	t.Helper()
	r, err := rc.Eval(t.Context(), "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}", []string{key}).Slice()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := r[0].(string)
	ttl := time.Duration(max(r[1].(int64), 0)) * time.Millisecond
	return stored{value: v, ttl: ttl, live: ok}
}

// TestFastTwoLimitsOnOneKey: a batch sent as a rule file is reloaded
// can hold two limits on one key (a key names the algorithm and window,
// not the numbers). fast.lua decides a key under one limit's numbers, so
// such a batch is decided by apply.lua, each check under its own limit:
// here a request within the old limit, then one that the new, smaller
// limit rejects.
func TestFastTwoLimitsOnOneKey(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.TokenBucket, limits.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
			redis.AlwaysFast(s)
			mem := memory.New(memory.Options{Now: clk.Now})
			var oldBurst, newBurst uint64
			if alg.Bucketed() {
				oldBurst, newBurst = 100, 10
			}
			old := mustLimit(t, alg, 100, limits.UnitSecond, 1, oldBurst)
			reloaded := mustLimit(t, alg, 10, limits.UnitSecond, 1, newBurst)
			key := storetest.Key(t.Name(), "k", old)
			if other := storetest.Key(t.Name(), "k", reloaded); other != key {
				t.Fatalf("the reloaded limit has key %q, the old one %q: want one key", other, key)
			}
			checks := [][]limits.Check{
				{{Key: key, Limit: old, Hits: 5}},
				{{Key: key, Limit: reloaded, Hits: 12}},
			}
			var got []*limits.Batch
			for _, cs := range checks {
				got = append(got, &limits.Batch{Checks: cs})
			}
			if err := redis.ApplyTogether(t.Context(), s, got); err != nil {
				t.Fatal(err)
			}
			if !got[0].Admitted || got[1].Admitted {
				t.Errorf("admitted %v and %v, want the first request only: 12 hits are over the reloaded limit of 10 (%+v)",
					got[0].Admitted, got[1].Admitted, got[1].Outcomes[0])
			}
			for i, cs := range checks {
				want := applyBatch(t, mem, &limits.Batch{Checks: cs})
				if diff := diffBatch(want, got[i]); diff != "" {
					t.Errorf("request %d differs from the memory store's (-memory +redis):\n%s", i+1, diff)
				}
			}
		})
	}
}

// TestFastExactFit: a batch whose hits take exactly what a key has left
// fits, for every algorithm fast.lua decides: it is decided per key, and
// the batches after it go in MODE_FAST too. (Read as not fitting, it
// would be decided right by apply.lua all the same, but the pipe would
// then hold MODE_FAST back for the next 16 batches.)
func TestFastExactFit(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.TokenBucket, limits.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
			var burst uint64
			if alg.Bucketed() {
				burst = 10
			}
			l := mustLimit(t, alg, 10, limits.UnitSecond, 1, burst)
			full, other := storetest.Key(t.Name(), "full", l), storetest.Key(t.Name(), "other", l)
			batches := func(key string, hits ...uint64) []*limits.Batch {
				var bs []*limits.Batch
				for _, h := range hits {
					bs = append(bs, &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: h}}})
				}
				if err := redis.ApplyTogether(t.Context(), s, bs); err != nil {
					t.Fatal(err)
				}
				return bs
			}
			bs := batches(full, 4, 6)
			if !bs[0].Admitted || !bs[1].Admitted || bs[1].Outcomes[0].Remaining != 0 {
				t.Errorf("4 and 6 hits of 10: admitted %v and %v, %+v; want both, and nothing left", bs[0].Admitted, bs[1].Admitted, bs[1].Outcomes[0])
			}
			if fits, misses := redis.FastCounts(s); fits != 1 || misses != 0 {
				t.Errorf("4 and 6 hits of 10: %d batches fit, %d did not; want the one to fit", fits, misses)
			}
			batches(other, 1, 1)
			if fits, misses := redis.FastCounts(s); fits != 2 || misses != 0 {
				t.Errorf("the batch after it: %d batches fit, %d did not; want both to, in MODE_FAST", fits, misses)
			}
		})
	}
}
