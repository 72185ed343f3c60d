package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// OverrideStep is one request for user=alice in RunOverrideKeys: with
// Envoy's per-request limit of Requests per day when Requests > 0, else
// without one, which reaches the rule (10 per day).
type OverrideStep struct {
	Requests  uint64
	Code      limits.Code
	Remaining uint64
}

// RunOverrideKeys runs an engine on stores from newStore, with both
// limits.OverrideKeys modes, and checks which counters overrides share.
func RunOverrideKeys(t *testing.T, newStore Factory) {
	const (
		ok   = limits.OK
		over = limits.OverLimit
	)
	tests := []struct {
		name string
		give limits.OverrideKeys
		want []OverrideStep
	}{
		{
			// As envoyproxy/ratelimit: the override and the rule (both a
			// fixed window of a day) count on one key.
			name: "shared",
			give: limits.OverrideShared,
			want: []OverrideStep{
				{Requests: 1, Code: ok, Remaining: 0},
				{Code: ok, Remaining: 8},                // the override's hit counts
				{Requests: 1, Code: over, Remaining: 0}, // the rule's hit counts
				{Requests: 5, Code: ok, Remaining: 2},   // so does every override's
				{Code: ok, Remaining: 6},
			},
		},
		{
			name: "separate",
			give: limits.OverrideSeparate,
			want: []OverrideStep{
				{Requests: 1, Code: ok, Remaining: 0},
				{Code: ok, Remaining: 9},
				{Requests: 1, Code: over, Remaining: 0}, // its own counter is spent
				{Requests: 5, Code: ok, Remaining: 4},   // another override, another counter
				{Code: ok, Remaining: 8},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := NewClock(Epoch)
			e := limits.NewEngine(overrideRules(t), newStore(t, clk), limits.EngineOptions{OverrideKeys: tt.give})
			var d limits.Decision
			for i, step := range tt.want {
				desc := limits.Descriptor{Entries: []limits.Entry{{Key: "user", Value: "alice"}}}
				if step.Requests > 0 {
					desc.Override = &limits.Override{Requests: step.Requests, Unit: limits.UnitDay}
				}
				if err := e.Decide(context.Background(), &limits.Request{Domain: "overrides", Descriptors: []limits.Descriptor{desc}}, &d); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got := OverrideStep{Requests: step.Requests, Code: d.Statuses[0].Code, Remaining: d.Statuses[0].Remaining}
				if got != step {
					t.Errorf("step %d: got %+v, want %+v", i, got, step)
				}
				clk.Advance(time.Second)
			}
		})
	}
}

// overrideRules is one rule: user, any value, 10 per day.
func overrideRules(t *testing.T) *limits.Ruleset {
	t.Helper()
	l, err := limits.NewLimit(limits.FixedWindow, 10, limits.UnitDay, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	rule := &limits.Rule{Domain: "overrides", Key: "user", Limits: []*limits.Limit{l}}
	return limits.NewRuleset([]*limits.Domain{{Name: "overrides", Rules: []*limits.Rule{rule}}}, nil, "")
}

// OverrideAlgorithmStep is one request for user=alice in
// RunOverrideAlgorithms, At after the start: Hits hits under Envoy's
// per-request limit of Requests per minute, and what it gets.
type OverrideAlgorithmStep struct {
	At        time.Duration
	Requests  uint64
	Hits      uint64
	Code      limits.Code
	Remaining uint64
}

// overrideAlgorithmSteps are the requests of RunOverrideAlgorithms for
// alg, a minute's window at the start: the tenant's sent limit goes from
// 4 to 2 (lower: the 3 hits counted hold against it) and to 6 (higher:
// only the difference comes in), then time shows how alg counts.
func overrideAlgorithmSteps(alg limits.Algorithm) []OverrideAlgorithmStep {
	const (
		ok   = limits.OK
		over = limits.OverLimit
	)
	if alg.Bucketed() {
		// 3 of 4 tokens taken leaves 1, which the burst of 2 keeps; the
		// burst of 6 keeps the empty bucket empty, refilling at 6 a
		// minute: 4.5 tokens after 45 s.
		return []OverrideAlgorithmStep{
			{At: 0, Requests: 4, Hits: 3, Code: ok, Remaining: 1},
			{At: 0, Requests: 2, Hits: 1, Code: ok, Remaining: 0},
			{At: 0, Requests: 6, Hits: 1, Code: over, Remaining: 0},
			{At: 45 * time.Second, Requests: 6, Hits: 1, Code: ok, Remaining: 3},
			{At: 75 * time.Second, Requests: 6, Hits: 0, Code: ok, Remaining: 6},
			// A full bucket of 6 is a full bucket of 2.
			{At: 75 * time.Second, Requests: 2, Hits: 2, Code: ok, Remaining: 0},
		}
	}
	steps := []OverrideAlgorithmStep{
		{At: 0, Requests: 4, Hits: 3, Code: ok, Remaining: 1},
		{At: 0, Requests: 2, Hits: 1, Code: over, Remaining: 0},
		{At: 0, Requests: 6, Hits: 1, Code: ok, Remaining: 2},
		{At: 0, Requests: 6, Hits: 3, Code: over, Remaining: 0},
		{At: 45 * time.Second, Requests: 6, Hits: 1, Code: ok, Remaining: 1},
	}
	// 15 s into the next window, the hits of the last one (5) weigh 3/4
	// in a sliding window; a sliding log holds only the one 30 s old; a
	// fixed window starts afresh.
	switch alg {
	case limits.SlidingWindow:
		steps = append(steps, OverrideAlgorithmStep{At: 75 * time.Second, Requests: 6, Code: ok, Remaining: 2})
	case limits.SlidingLog:
		steps = append(steps, OverrideAlgorithmStep{At: 75 * time.Second, Requests: 6, Code: ok, Remaining: 5})
	default:
		steps = append(steps, OverrideAlgorithmStep{At: 75 * time.Second, Requests: 6, Code: ok, Remaining: 6})
	}
	return steps
}

// RunOverrideAlgorithms runs an engine on stores from newStore, with
// both limits.OverrideKeys modes, whose domain says to count Envoy's
// per-request limits by each algorithm (limits.OverrideSpec). A rule of
// 10 per minute on the same entries is never consulted. The tenant's
// sent limit changes between requests and keeps its counter: the key
// names the algorithm and the window, never the requests.
func RunOverrideAlgorithms(t *testing.T, newStore Factory) {
	for _, keys := range []limits.OverrideKeys{limits.OverrideShared, limits.OverrideSeparate} {
		for _, alg := range limits.Algorithms {
			t.Run("override/"+keys.String()+"/"+alg.String(), func(t *testing.T) {
				clk := NewClock(Epoch)
				spec := &limits.OverrideSpec{Algorithm: alg}
				e := limits.NewEngine(overrideRulesWith(t, spec, nil), newStore(t, clk), limits.EngineOptions{OverrideKeys: keys})
				wantKey := fmt.Sprintf("%d:override/%s/60", len("override/"+alg.String()+"/60"), alg)
				var d limits.Decision
				for i, step := range overrideAlgorithmSteps(alg) {
					clk.Set(Epoch.Add(step.At))
					desc := limits.Descriptor{
						Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
						Override: &limits.Override{Requests: step.Requests, Unit: limits.UnitMinute},
					}
					req := &limits.Request{Domain: "overrides", Descriptors: []limits.Descriptor{desc}, Hits: step.Hits}
					if step.Hits == 0 {
						req.Descriptors[0].HasHits = true // checks without consuming
					}
					if err := e.Decide(context.Background(), req, &d); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if cs := d.Checks(); len(cs) != 1 || !strings.HasSuffix(cs[0].Key, wantKey) {
						t.Fatalf("step %d: checks %+v, want one on a key ending %q", i, cs, wantKey)
					}
					got := step
					got.Code, got.Remaining = d.Statuses[0].Code, d.Statuses[0].Remaining
					if got != step {
						t.Errorf("step %d: got %+v, want %+v", i, got, step)
					}
				}
			})
		}
	}
	t.Run("override/bucket_tick", func(t *testing.T) {
		// 30,000 a day needs 10 µs ticks and 20,000 would count in 1 µs
		// ticks: a bucket emptied under the one stays empty under the
		// other, its stored tick read in the units it was written in.
		for _, alg := range []limits.Algorithm{limits.TokenBucket, limits.LeakyBucket} {
			t.Run(alg.String(), func(t *testing.T) {
				clk := NewClock(Epoch)
				e := limits.NewEngine(overrideRulesWith(t, &limits.OverrideSpec{Algorithm: alg}, nil), newStore(t, clk), limits.EngineOptions{})
				var d limits.Decision
				for i, step := range []struct {
					requests, hits uint64
					want           limits.Code
				}{{30_000, 30_000, limits.OK}, {20_000, 1, limits.OverLimit}, {30_000, 1, limits.OverLimit}} {
					desc := limits.Descriptor{
						Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
						Override: &limits.Override{Requests: step.requests, Unit: limits.UnitDay},
					}
					if err := e.Decide(context.Background(), &limits.Request{Domain: "overrides", Descriptors: []limits.Descriptor{desc}, Hits: step.hits}, &d); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if got := d.Statuses[0].Code; got != step.want {
						t.Errorf("step %d, %d hits under %d a day: %v, want %v", i, step.hits, step.requests, got, step.want)
					}
				}
			})
		}
	})
	t.Run("override/charge", func(t *testing.T) {
		// hits_addend on the descriptor is a usage charge by default,
		// counted past the limit; charge admission makes it all or
		// nothing.
		for _, tt := range []struct {
			charge limits.Charge
			want   []limits.Code
		}{
			{limits.ChargeAuto, []limits.Code{limits.OverLimit, limits.OverLimit}},
			{limits.ChargeAdmission, []limits.Code{limits.OverLimit, limits.OK}},
		} {
			t.Run(tt.charge.String(), func(t *testing.T) {
				clk := NewClock(Epoch)
				rs := overrideRulesWith(t, nil, &limits.OverrideSpec{Algorithm: limits.SlidingWindow, Charge: tt.charge})
				e := limits.NewEngine(rs, newStore(t, clk), limits.EngineOptions{})
				var d limits.Decision
				for i, hits := range []uint64{50, 1} {
					desc := limits.Descriptor{
						Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
						Override: &limits.Override{Requests: 10, Unit: limits.UnitHour},
						Hits:     hits, HasHits: true,
					}
					if err := e.Decide(context.Background(), &limits.Request{Domain: "overrides", Descriptors: []limits.Descriptor{desc}}, &d); err != nil {
						t.Fatal(err)
					}
					if got := d.Statuses[0].Code; got != tt.want[i] {
						t.Errorf("request %d of %d hits: %v, want %v", i, hits, got, tt.want[i])
					}
				}
			})
		}
	})
}

// overrideRulesWith is overrideRules with the domain's OverrideSpec and
// the rule's.
func overrideRulesWith(t *testing.T, domain, rule *limits.OverrideSpec) *limits.Ruleset {
	t.Helper()
	l, err := limits.NewLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &limits.Rule{Domain: "overrides", Key: "user", Limits: []*limits.Limit{l}, Override: rule}
	return limits.NewRuleset([]*limits.Domain{{Name: "overrides", Rules: []*limits.Rule{r}, Override: domain}}, nil, "")
}
