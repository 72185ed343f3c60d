package limits_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func TestParseOverrideKeys(t *testing.T) {
	tests := []struct {
		give string
		want limits.OverrideKeys
	}{
		{"shared", limits.OverrideShared},
		{"separate", limits.OverrideSeparate},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			var got limits.OverrideKeys
			if err := got.Set(tt.give); err != nil || got != tt.want {
				t.Fatalf("Set(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
			}
			if got.String() != tt.give {
				t.Errorf("String() = %q, want %q", got.String(), tt.give)
			}
		})
	}
	for _, give := range []string{"", "Shared", "own"} {
		if _, err := limits.ParseOverrideKeys(give); err == nil {
			t.Errorf("ParseOverrideKeys(%q): no error", give)
		}
	}
}

// overrideCheck decides one request whose descriptor user=alice carries
// Envoy's limit of requests per unit, and returns its check.
func overrideCheck(t *testing.T, rs *limits.Ruleset, keys limits.OverrideKeys, requests uint64, unit limits.Unit) limits.Check {
	t.Helper()
	e := limits.NewEngine(rs, admitAll{}, limits.EngineOptions{OverrideKeys: keys})
	var d limits.Decision
	req := &limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
		Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
		Override: &limits.Override{Requests: requests, Unit: unit},
	}}}
	if err := e.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Checks()) != 1 {
		t.Fatalf("%d checks, want 1", len(d.Checks()))
	}
	return d.Checks()[0]
}

// admitAll is a store that admits every batch.
type admitAll struct{}

func (admitAll) Apply(_ context.Context, b *limits.Batch) error {
	b.SizeOutcomes()
	b.Admitted = true
	return nil
}

func overrideRuleset(domain, rule *limits.OverrideSpec) *limits.Ruleset {
	r := &limits.Rule{Domain: "d", Key: "user", Override: rule}
	return limits.NewRuleset([]*limits.Domain{{Name: "d", Rules: []*limits.Rule{r}, Override: domain}}, nil, "")
}

// An override counted by an OverrideSpec keeps one key, and a bucket one
// tick, whatever requests it is sent, so a tenant's changed limit never starts
// a new counter nor reads a bucket's level in other units; without a
// spec the key is the reference's.
func TestOverrideSpecKeyAndTick(t *testing.T) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rs := overrideRuleset(&limits.OverrideSpec{Algorithm: alg}, nil)
			for _, keys := range []limits.OverrideKeys{limits.OverrideShared, limits.OverrideSeparate} {
				first := overrideCheck(t, rs, keys, 5, limits.UnitDay)
				for _, requests := range []uint64{0, 1, 20_000, 30_000, 10_000, limits.MaxOverrideRequests} {
					if alg == limits.SlidingLog && requests > limits.MaxOverrideLog {
						continue
					}
					c := overrideCheck(t, rs, keys, requests, limits.UnitDay)
					// Only a bucket's state is in ticks; the windows' are
					// in µs and hits.
					if c.Key != first.Key || (alg.Bucketed() && c.Limit.Tick() != first.Limit.Tick()) {
						t.Errorf("%s, %d a day: key %q tick %d; 5 a day: key %q tick %d", keys, requests, c.Key, c.Limit.Tick(), first.Key, first.Limit.Tick())
					}
					if c.Limit.Requests != requests {
						t.Errorf("%d a day counts %d", requests, c.Limit.Requests)
					}
				}
			}
		})
	}
	t.Run("no spec", func(t *testing.T) {
		rs := overrideRuleset(nil, nil)
		if got, want := overrideCheck(t, rs, limits.OverrideShared, 5, limits.UnitDay).Key, "{1:d4:user5:alice}18:fixed_window/86400"; got != want {
			t.Errorf("shared: key %q, want %q", got, want)
		}
		if got, want := overrideCheck(t, rs, limits.OverrideSeparate, 5, limits.UnitDay).Key, "{1:d4:user5:alice}14:override/5/day"; got != want {
			t.Errorf("separate: key %q, want %q", got, want)
		}
	})
}

func TestRulesetOverrideSpec(t *testing.T) {
	dom := &limits.OverrideSpec{Algorithm: limits.SlidingWindow}
	top := &limits.OverrideSpec{Algorithm: limits.TokenBucket}
	leaf := &limits.OverrideSpec{Algorithm: limits.SlidingLog}
	user := &limits.Rule{Domain: "d", Key: "user"}
	key := &limits.Rule{Domain: "d", Key: "key", Override: leaf}
	tenant := &limits.Rule{Domain: "d", Key: "tenant", Override: top, Children: []*limits.Rule{user, key}}
	other := &limits.Rule{Domain: "d", Key: "route"}
	rs := limits.NewRuleset([]*limits.Domain{
		{Name: "d", Rules: []*limits.Rule{tenant, other}, Override: dom},
		{Name: "plain", Rules: []*limits.Rule{{Domain: "plain", Key: "user"}}},
		{Name: "deep", Rules: []*limits.Rule{{Domain: "deep", Key: "a", Children: []*limits.Rule{{Domain: "deep", Key: "b", Override: leaf}}}}},
	}, nil, "")
	e := func(kv ...string) []limits.Entry {
		var out []limits.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, limits.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name    string
		domain  string
		entries []limits.Entry
		want    *limits.OverrideSpec
	}{
		{"the rule's own", "d", e("tenant", "a", "key", "k"), leaf},
		{"the nearest above", "d", e("tenant", "a", "user", "u"), top},
		{"the rule reached sets it", "d", e("tenant", "a"), top},
		{"no rule says: the domain's", "d", e("route", "r"), dom},
		{"no rule reached: the domain's", "d", e("tenant", "a", "user", "u", "x", "y"), dom},
		{"none at all", "plain", e("user", "u"), nil},
		{"a rule's alone, deep in the tree", "deep", e("a", "1", "b", "2"), leaf},
		{"not reached in that domain", "deep", e("a", "1"), nil},
		{"unknown domain", "nope", e("user", "u"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rs.OverrideSpec(tt.domain, tt.entries); got != tt.want {
				t.Errorf("OverrideSpec = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOverrideSpecCheck(t *testing.T) {
	tests := []struct {
		give limits.OverrideSpec
		want string // "" for no error
	}{
		{limits.OverrideSpec{}, ""},
		{limits.OverrideSpec{Algorithm: limits.TokenBucket, Burst: 50, Multiplier: 7}, ""},
		{limits.OverrideSpec{Algorithm: limits.Concurrency}, "does not count a sent limit"},
		{limits.OverrideSpec{Algorithm: limits.SlidingWindow, Burst: 5}, "burst applies only to token_bucket and leaky_bucket"},
		{limits.OverrideSpec{Algorithm: limits.TokenBucket, Multiplier: 1 << 40}, "too long"},
		// 24 years cannot be counted in the 10,000 s ticks 2^32 − 1
		// requests need (the window is no multiple of them); a bucket
		// counts in 1,000 s ticks, which fit 2.9 billion.
		{limits.OverrideSpec{Algorithm: limits.TokenBucket, Multiplier: 24}, ""},
	}
	for _, tt := range tests {
		err := tt.give.Check()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%+v) = %v", tt.give, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Check(%+v) = %v, want %q", tt.give, err, tt.want)
		}
	}
}

// A sliding log keeps an entry per request: a sent limit past
// MaxOverrideLog is a bad request, naming the field.
func TestOverrideSlidingLogBound(t *testing.T) {
	rs := overrideRuleset(&limits.OverrideSpec{Algorithm: limits.SlidingLog}, nil)
	e := limits.NewEngine(rs, admitAll{}, limits.EngineOptions{})
	var d limits.Decision
	req := &limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
		Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
		Override: &limits.Override{Requests: limits.MaxOverrideLog + 1, Unit: limits.UnitHour},
	}}}
	var re *limits.RequestError
	if err := e.Decide(context.Background(), req, &d); !errors.As(err, &re) || re.Field != "descriptors[0].limit" {
		t.Fatalf("Decide: %v, want a RequestError on descriptors[0].limit", err)
	}
}

// A bucket of 24 years cannot have the tick 2^32 − 1 requests need; it
// counts in the coarsest tick that divides its window, for every count
// that fits it, and refuses the request of a count that does not.
func TestOverrideBucketCoarsestTick(t *testing.T) {
	rs := overrideRuleset(&limits.OverrideSpec{Algorithm: limits.TokenBucket, Multiplier: 24}, nil)
	a := overrideCheck(t, rs, limits.OverrideShared, 5, limits.UnitYear)
	b := overrideCheck(t, rs, limits.OverrideShared, 2_000_000_000, limits.UnitYear)
	if a.Limit.Tick() != b.Limit.Tick() || a.Limit.Tick() != 1_000_000_000 {
		t.Errorf("ticks %d and %d, want 1,000 s for both", a.Limit.Tick(), b.Limit.Tick())
	}
	e := limits.NewEngine(rs, admitAll{}, limits.EngineOptions{})
	var d limits.Decision
	req := &limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
		Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
		Override: &limits.Override{Requests: 4_000_000_000, Unit: limits.UnitYear},
	}}}
	var re *limits.RequestError
	if err := e.Decide(context.Background(), req, &d); !errors.As(err, &re) || re.Field != "descriptors[0].limit" || !strings.Contains(err.Error(), "cannot be counted exactly") {
		t.Errorf("4 billion per 24 years: %v, want a RequestError on descriptors[0].limit", err)
	}
}
