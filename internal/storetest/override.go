package storetest

import (
	"context"
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
