package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// More limits than a set has ways: every key still starts from a state
// that admits no more than the one it was evicted with, whichever limit
// was pushed out into the set's bound.
func TestGhostMoreLimitsThanWays(t *testing.T) {
	var ls []*limits.Limit
	for i, alg := range limits.Algorithms {
		for _, unit := range []limits.Unit{limits.UnitSecond, limits.UnitMinute} {
			l, err := limits.NewLimit(alg, uint64(3+i), unit, 1, 4)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
	}
	if len(ls) <= ghostWays {
		t.Fatalf("%d limits do not overflow %d ways", len(ls), ghostWays)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		g := newGhost(1) // one set: every key shares it
		now := markT0 + r.Int64N(2_000_000)
		states := make([]limits.State, len(ls))
		for i, l := range ls {
			states[i] = randomState(r, l, now)
			g.add(uint64(i), l, states[i], now)
		}
		times := randomTimes(r, now)
		for i, l := range ls {
			st, _ := g.start(uint64(i), l, now)
			noLooser(t, l.ID(), l, st, states[i], times, false)
		}
	}
}

// A key evicted under one limit and seen under other numbers of the same
// algorithm and window, as after a reload, starts no emptier in hits.
func TestGhostOtherNumbers(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			before, err := limits.NewLimit(alg, 10, limits.UnitMinute, 1, 10)
			if err != nil {
				t.Fatal(err)
			}
			after, err := limits.NewLimit(alg, 5, limits.UnitMinute, 1, 5)
			if err != nil {
				t.Fatal(err)
			}
			now := markT0
			_, st := before.Evaluate(limits.State{}, now, 5)
			g := newGhost(1)
			g.add(0, before, st, now)
			st, ok := g.start(0, after, now)
			if !ok {
				t.Fatal("the ghost forgot the key")
			}
			if o, _ := after.Evaluate(st, now, 1); !o.Over {
				t.Errorf("after 5 hits under %v, a key under %v admits another: %+v", before.ID(), after.ID(), o)
			}
		})
	}
}
