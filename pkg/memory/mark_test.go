package memory

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// markLimits are one limit per algorithm, with windows and rates that
// random requests over a few windows fill and empty.
func markLimits(t *testing.T) []*limits.Limit {
	var ls []*limits.Limit
	for _, alg := range limits.Algorithms {
		l, err := limits.NewLimit(alg, 5, limits.UnitSecond, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

const markT0 = int64(1_700_000_000_000_000) // µs, a whole second

// randomState returns the state of a key that random requests of 1 to 3
// hits at random times in the 2 s before now left under l.
func randomState(r *rand.Rand, l *limits.Limit, now int64) limits.State {
	var st limits.State
	at := now - 2_000_000
	for at < now {
		if o, next := l.Evaluate(st, at, 1+r.Uint64N(3)); !o.Over {
			st = next
		}
		at += r.Int64N(400_000)
	}
	return st
}

// admitted replays one hit at each of times on st under l and returns how
// many were admitted after each.
func admitted(l *limits.Limit, st limits.State, times []int64) []int {
	var n int
	out := make([]int, len(times))
	for i, at := range times {
		o, next := l.Evaluate(st, at, 1)
		if !o.Over {
			st = next
			n++
		}
		out[i] = n
	}
	return out
}

// noLooser fails unless got admits no more than want at every point of
// times; with exact, exactly as many.
func noLooser(t *testing.T, what string, l *limits.Limit, got, want limits.State, times []int64, exact bool) {
	t.Helper()
	g, w := admitted(l, got, times), admitted(l, want, times)
	for i := range times {
		if g[i] > w[i] || (exact && g[i] != w[i]) {
			t.Fatalf("%s: %d admitted by %v from %+v, but %d from %+v", what, g[i], time.Duration(times[i]-times[0])*time.Microsecond, got, w[i], want)
		}
	}
}

func randomTimes(r *rand.Rand, now int64) []int64 {
	times := []int64{now}
	for at := now; at < now+3_000_000; {
		at += r.Int64N(150_000)
		times = append(times, at)
	}
	return times
}

func TestMarkNeverAdmitsMore(t *testing.T) {
	for _, l := range markLimits(t) {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(l.Algorithm)))
			for range 2000 {
				now := markT0 + r.Int64N(2_000_000)
				a, b := randomState(r, l, now), randomState(r, l, now)
				ma, mb := markOf(l, a, now), markOf(l, b, now)
				times := randomTimes(r, now)
				// The log is kept as one entry: stricter. Every other
				// algorithm's mark is exact.
				exact := l.Algorithm != limits.SlidingLog
				noLooser(t, "mark", l, ma.state(l, now), a, times, exact)
				// A mark read later is the same as read now.
				later := times[len(times)/2]
				noLooser(t, "mark read later", l, ma.state(l, later), a, times[len(times)/2:], exact)
				u := union(l, ma, mb, now).state(l, now)
				noLooser(t, "union vs a", l, u, a, times, false)
				noLooser(t, "union vs b", l, u, b, times, false)
				noLooser(t, "bound", l, bound(l, ma.hits(l), ma.expire, now).state(l, now), a, times, false)
			}
		})
	}
}

// A limit with the same algorithm and window but other numbers, as a
// reload makes: the bound, made of the hits the state holds, holds it
// under the new numbers. (A bucket's stored level is read with the new
// rate from its last update, not from the eviction, so across a change
// of rate the bound is in hits as of the eviction; the rate stays here.)
func TestBoundAcrossNumbers(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			before, err := limits.NewLimit(alg, 8, limits.UnitSecond, 1, 6)
			if err != nil {
				t.Fatal(err)
			}
			requests := uint64(4)
			if alg.Bucketed() {
				requests = 8
			}
			after, err := limits.NewLimit(alg, requests, limits.UnitSecond, 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(2, uint64(alg)))
			for range 2000 {
				now := markT0 + r.Int64N(2_000_000)
				st := randomState(r, before, now)
				m := markOf(before, st, now)
				b := bound(after, m.hits(before), m.expire, now).state(after, now)
				noLooser(t, "bound", after, b, st, randomTimes(r, now), false)
			}
		})
	}
}
