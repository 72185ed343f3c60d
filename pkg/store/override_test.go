package store

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestOverrideThroughCaches: Envoy's per-request limit, counted by a
// window algorithm the domain names (limits.OverrideSpec), through
// leases and the deny cache as the sidecar stacks them. A tenant over
// its sent limit of 2 is answered from the cache while it sends 2; once
// its limit is raised to 5 the cache, which decided against 2, answers
// nothing, and the store admits the 3 hits of the difference, no more.
func TestOverrideThroughCaches(t *testing.T) {
	for _, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			cache, sp, _ := newCache(DenyCacheOptions{}, 0)
			leases := NewLeases(cache, LeasesOptions{Now: sp.clk.Now})
			r := &limits.Rule{Domain: "d", Key: "tenant"}
			rs := limits.NewRuleset([]*limits.Domain{{Name: "d", Rules: []*limits.Rule{r}, Override: &limits.OverrideSpec{Algorithm: alg}}}, nil, "")
			e := limits.NewEngine(rs, leases, limits.EngineOptions{})
			decide := func(requests uint64) limits.Code {
				t.Helper()
				var d limits.Decision
				req := &limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
					Entries:  []limits.Entry{{Key: "tenant", Value: "acme"}},
					Override: &limits.Override{Requests: requests, Unit: limits.UnitHour},
				}}}
				if err := e.Decide(context.Background(), req, &d); err != nil {
					t.Fatal(err)
				}
				return d.Code
			}
			for i, want := range []limits.Code{limits.OK, limits.OK, limits.OverLimit} {
				if got := decide(2); got != want {
					t.Fatalf("hit %d under 2: %v, want %v", i+1, got, want)
				}
			}
			calls := sp.calls.Load()
			if got := decide(2); got != limits.OverLimit || sp.calls.Load() != calls {
				t.Errorf("again under 2: %v after %d store calls, want OVER_LIMIT from the cache", got, sp.calls.Load()-calls)
			}
			for i, want := range []limits.Code{limits.OK, limits.OK, limits.OK, limits.OverLimit} {
				if got := decide(5); got != want {
					t.Errorf("hit %d under 5: %v, want %v", i+1, got, want)
				}
			}
		})
	}
}
