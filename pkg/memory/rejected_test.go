package memory

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// held is what the store holds of one key, but for when it was last
// used, which a read updates.
type held struct {
	St  limits.State
	Lim *limits.Limit
}

// snapshot returns a copy of what s holds, by key.
func (s *Store) snapshot() map[string]held {
	m := map[string]held{}
	for i := range s.shards[:s.n] {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, j := range sh.m {
			e := sh.keys[j]
			e.st.Log = append([]limits.LogEntry(nil), e.st.Log...)
			m[k] = held{St: e.st, Lim: e.lim}
		}
		sh.mu.Unlock()
	}
	return m
}

// TestRejectedRequestWritesNothing: a request that is rejected, whether
// by another check or by its own, and a check that takes no hits, leave
// every key the store holds as it was: no key appears or goes, and each
// keeps its state and the limit that wrote it.
func TestRejectedRequestWritesNothing(t *testing.T) {
	ban, err := limits.NewLimit(limits.FixedWindow, 0, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := limits.NewLimit(alg, 10, limits.UnitMinute, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
			s := New(Options{Now: clk.Now})
			// The requests after the first come with a limit of the same
			// numbers that is another *Limit, as after a reload: a store
			// that wrote down which limit read the key would show.
			reloaded := *l
			hits := func(n uint64) limits.Check {
				return limits.Check{Key: storetest.Key(t.Name(), "k", l), Limit: &reloaded, Hits: n}
			}
			banned := limits.Check{Key: storetest.Key(t.Name(), "banned", ban), Limit: ban, Hits: 1}
			apply := func(checks ...limits.Check) bool {
				b := &limits.Batch{Checks: checks}
				if err := s.Apply(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				return b.Admitted
			}
			if !apply(limits.Check{Key: storetest.Key(t.Name(), "k", l), Limit: l, Hits: 3}) {
				t.Fatal("the first request was rejected")
			}
			tests := []struct {
				name         string
				give         []limits.Check
				wantAdmitted bool
			}{
				{name: "another_check_rejects", give: []limits.Check{hits(1), banned}},
				{name: "over_its_own_limit", give: []limits.Check{hits(8)}},
				{name: "a_later_check_on_the_key_is_over", give: []limits.Check{hits(1), hits(7)}},
				{name: "zero_hits", give: []limits.Check{hits(0)}, wantAdmitted: true},
			}
			samePointer := cmp.Comparer(func(a, b *limits.Limit) bool { return a == b })
			for _, tt := range tests {
				before := s.snapshot()
				if got := apply(tt.give...); got != tt.wantAdmitted {
					t.Fatalf("%s: admitted %v, want %v", tt.name, got, tt.wantAdmitted)
				}
				if diff := cmp.Diff(before, s.snapshot(), samePointer); diff != "" {
					t.Errorf("%s: the store changed (-before +after):\n%s", tt.name, diff)
				}
			}
		})
	}
}
