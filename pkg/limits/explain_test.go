package limits_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// explainRules holds the nested cases that confuse people most in
// envoyproxy/ratelimit's issue tracker.
const explainRules = `
domain: shop
descriptors:
  # An exact value with nested rules hides the key-only sibling's nested
  # rules: matching never backtracks.
  - key: tenant
    value: acme
    descriptors:
      - key: user
        value: alice
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  # Wildcards are tried in config order, not by specificity.
  - key: path
    value: /api/*
    rate_limit: {name: api, unit: minute, requests_per_unit: 50}
  - key: path
    value: /api/v1/*
    rate_limit: {name: v1, unit: minute, requests_per_unit: 5}
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {name: any_path, unit: minute, requests_per_unit: 500}
  # A branch shallower than the descriptor.
  - key: plan
    value: t*
    descriptors:
      - key: region
        value: eu
        rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 2, burst: 4}
  # A rule with nested rules but no limit of its own.
  - key: org
    value: globex
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  # Every 10.* address shares the counters.
  - key: ip
    value: 10.*
    share_threshold: true
    descriptors:
      - key: path
        rate_limits:
          - {unit: second, requests_per_unit: 100}
          - {algorithm: sliding_log, unit: minute, requests_per_unit: 1000}
  # A pattern taken literally is an exact match.
  - key: lit
    value: a*
    rate_limit: {name: a_star, unit: minute, requests_per_unit: 1}
  - key: lit
    value: "*"
    rate_limit: {name: star, unit: minute, requests_per_unit: 2}
`

func explainParse(t testing.TB, rules string) *limits.Ruleset {
	t.Helper()
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// explainEntries parses "k=v,k=v".
func explainEntries(s string) []limits.Entry {
	var es []limits.Entry
	if s == "" {
		return es
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		es = append(es, limits.Entry{Key: k, Value: v})
	}
	return es
}

func rulePath(r *limits.Rule) string {
	if r == nil {
		return ""
	}
	return r.Path
}

// explainSummary is what a test checks of an Explanation.
type explainSummary struct {
	Result  limits.MatchResult
	Rule    string       // path of the rule reached
	Via     []limits.Via // per step
	Missed  [][]string   // per step, paths
	Passed  [][]string   // per step, paths
	Detours []string     // "step: rule -> reaches"
}

func summarize(x limits.Explanation) explainSummary {
	s := explainSummary{Result: x.Result, Rule: rulePath(x.Rule)}
	paths := func(rs []*limits.Rule) []string {
		var ps []string
		for _, r := range rs {
			ps = append(ps, r.Path)
		}
		return ps
	}
	for _, st := range x.Steps {
		s.Via = append(s.Via, st.Via)
		s.Missed = append(s.Missed, paths(st.Missed))
		s.Passed = append(s.Passed, paths(st.Passed))
	}
	for _, d := range x.Detours {
		s.Detours = append(s.Detours, fmt.Sprintf("%d: %s -> %s", d.Step, d.Rule.Path, d.Reaches.Path))
	}
	return s
}

func TestExplain(t *testing.T) {
	rs := explainParse(t, explainRules)
	const (
		none  = limits.ViaNone
		exact = limits.ViaExact
		wild  = limits.ViaWildcard
		any   = limits.ViaAnyValue
	)
	tests := []struct {
		name   string
		domain string
		give   string
		want   explainSummary
	}{
		{
			name: "exact then exact",
			give: "tenant=acme,user=alice",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[0].descriptors[0]",
				Via: []limits.Via{exact, exact}, Missed: [][]string{nil, nil},
				Passed:  [][]string{{"descriptors[1]"}, nil},
				Detours: []string{"0: descriptors[1] -> descriptors[1].descriptors[0]"},
			},
		},
		{
			name: "exact sibling blocks the key-only branch",
			give: "tenant=acme,user=bob",
			want: explainSummary{
				Result: limits.MatchNoRule,
				Via:    []limits.Via{exact, none}, Missed: [][]string{nil, nil},
				Passed:  [][]string{{"descriptors[1]"}, nil},
				Detours: []string{"0: descriptors[1] -> descriptors[1].descriptors[0]"},
			},
		},
		{
			name: "key-only branch for other tenants",
			give: "tenant=globex,user=bob",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[1].descriptors[0]",
				Via: []limits.Via{any, any}, Missed: [][]string{nil, nil}, Passed: [][]string{nil, nil},
			},
		},
		{
			name: "stops on a rule without a limit",
			give: "tenant=acme",
			want: explainSummary{
				Result: limits.MatchNoLimit, Rule: "descriptors[0]",
				Via: []limits.Via{exact}, Missed: [][]string{nil}, Passed: [][]string{{"descriptors[1]"}},
			},
		},
		{
			name: "first wildcard in config order wins",
			give: "path=/api/v1/users",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[2]",
				Via: []limits.Via{wild}, Missed: [][]string{nil},
				Passed:  [][]string{{"descriptors[3]", "descriptors[4]"}},
				Detours: []string{"0: descriptors[3] -> descriptors[3]", "0: descriptors[4] -> descriptors[4]"},
			},
		},
		{
			name: "first wildcard has no nested rules",
			give: "path=/api/v1/users,method=GET",
			want: explainSummary{
				Result: limits.MatchTooDeep,
				Via:    []limits.Via{wild}, Missed: [][]string{nil},
				Passed:  [][]string{{"descriptors[3]", "descriptors[4]"}},
				Detours: []string{"0: descriptors[3] -> descriptors[3].descriptors[0]"},
			},
		},
		{
			name: "key only after the wildcards miss",
			give: "path=/static/app.js",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[4]",
				Via: []limits.Via{any}, Missed: [][]string{{"descriptors[2]", "descriptors[3]"}}, Passed: [][]string{nil},
			},
		},
		{
			name: "more entries than the branch is deep",
			give: "plan=team,region=eu,user=1",
			want: explainSummary{
				Result: limits.MatchTooDeep,
				Via:    []limits.Via{wild, exact}, Missed: [][]string{nil, nil}, Passed: [][]string{nil, nil},
			},
		},
		{
			name: "wildcard misses",
			give: "plan=pro,region=eu",
			want: explainSummary{
				Result: limits.MatchNoRule,
				Via:    []limits.Via{none}, Missed: [][]string{{"descriptors[5]"}}, Passed: [][]string{nil},
			},
		},
		{
			name: "entry order matters",
			give: "user=1,tenant=acme",
			want: explainSummary{
				Result: limits.MatchNoRule,
				Via:    []limits.Via{none}, Missed: [][]string{nil}, Passed: [][]string{nil},
			},
		},
		{
			name: "nested rules need the parent's entry",
			give: "org=globex,user=1",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[6].descriptors[0]",
				Via: []limits.Via{exact, any}, Missed: [][]string{nil, nil}, Passed: [][]string{nil, nil},
			},
		},
		{
			name: "unlimited",
			give: "free=x",
			want: explainSummary{
				Result: limits.MatchUnlimited, Rule: "descriptors[7]",
				Via: []limits.Via{any}, Missed: [][]string{nil}, Passed: [][]string{nil},
			},
		},
		{
			name: "pattern taken literally",
			give: "lit=a*",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[9]",
				Via: []limits.Via{exact}, Missed: [][]string{nil}, Passed: [][]string{{"descriptors[10]"}},
				Detours: []string{"0: descriptors[10] -> descriptors[10]"},
			},
		},
		{
			name: "pattern as a pattern",
			give: "lit=ab",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[9]",
				Via: []limits.Via{wild}, Missed: [][]string{nil}, Passed: [][]string{{"descriptors[10]"}},
				Detours: []string{"0: descriptors[10] -> descriptors[10]"},
			},
		},
		{
			name: "empty value",
			give: "lit=",
			want: explainSummary{
				Result: limits.MatchLimited, Rule: "descriptors[10]",
				Via: []limits.Via{wild}, Missed: [][]string{{"descriptors[9]"}}, Passed: [][]string{nil},
			},
		},
		{
			name:   "unknown domain",
			domain: "nope",
			give:   "tenant=acme",
			want:   explainSummary{Result: limits.MatchUnknownDomain},
		},
		{
			name: "no entries",
			give: "",
			want: explainSummary{Result: limits.MatchNoEntries},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			domain := tt.domain
			if domain == "" {
				domain = "shop"
			}
			ents := explainEntries(tt.give)
			x := rs.Explain(domain, ents)
			if m := rs.Match(domain, ents); x.Rule != m {
				t.Errorf("Explain reached %q, Match %q", rulePath(x.Rule), rulePath(m))
			}
			if diff := cmp.Diff(tt.want, summarize(x)); diff != "" {
				t.Errorf("Explain(%q) (-want +got):\n%s", tt.give, diff)
			}
			if x.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

func TestExplainReason(t *testing.T) {
	rs := explainParse(t, explainRules)
	tests := []struct {
		give string
		want string
	}{
		{"plan=team,region=eu,user=1", "entries[1] region=eu matched descriptors[5].descriptors[0] (region=eu) by exact value, but the descriptor has 3 entries and the branch ends there, at depth 2"},
		{"plan=team,user=1", `entries[1] user=1 matches no rule at the nested descriptors of descriptors[5] (plan=t*), which has no rule for key "user" (its keys: region)`},
		{"tenant=acme,user=bob", `entries[1] user=bob matches no rule at the nested descriptors of descriptors[0] (tenant=acme), whose rules for key "user" are: user=alice`},
		{"user=1", `entries[0] user=1 matches no rule at the top level of domain "shop", which has no rule for key "user" (its keys: tenant, path, plan, org, free, ip, lit)`},
		{"tenant=acme", "reached descriptors[0] (tenant=acme), which has no rate_limit; its nested descriptors apply only to descriptors with more entries"},
		{"org=globex,user=1", "reached descriptors[6].descriptors[0] (user, any value) at the last entry; its limit applies"},
		{"ip=10.1.2.3,path=/", "reached descriptors[8].descriptors[0] (path, any value) at the last entry; its 2 limits apply"},
		{"free=1", "reached descriptors[7] (free, any value), which is unlimited"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			if got := rs.Explain("shop", explainEntries(tt.give)).Reason; got != tt.want {
				t.Errorf("Reason\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
	if got, want := rs.Explain("nope", explainEntries("a=b")).Reason, `no rule file defines domain "nope", so the sidecar answers OK with no limits`; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
}

// TestExplainAgreesWithMatch compares Explain with Match on every
// descriptor of up to three entries over a small alphabet, against rules
// that nest exact values, wildcards and key-only rules.
func TestExplainAgreesWithMatch(t *testing.T) {
	const rules = `
domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: x*
        descriptors:
          - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: b, value: y}
  - key: a
    value: "*y"
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: a
        descriptors:
          - {key: b, value: "*", rate_limit: {unit: second, requests_per_unit: 1}}
  - key: a
    value: x*
    descriptors:
      - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
        descriptors:
          - {key: b, value: y}
  - key: b
    value: "*"
    descriptors:
      - {key: c}
  - key: b
    value: "x*"
    rate_limit: {unit: second, requests_per_unit: 1}
`
	rs := explainParse(t, rules)
	var alphabet []limits.Entry
	for _, k := range []string{"a", "b", "c"} {
		for _, v := range []string{"x", "y", "xy", "x*", ""} {
			alphabet = append(alphabet, limits.Entry{Key: k, Value: v})
		}
	}
	var ents []limits.Entry
	n := 0
	results := map[limits.MatchResult]int{}
	var walk func(depth int)
	walk = func(depth int) {
		if len(ents) > 0 {
			n++
			x := rs.Explain("d", ents)
			if m := rs.Match("d", ents); x.Rule != m {
				t.Errorf("%v: Explain reached %q, Match %q", ents, rulePath(x.Rule), rulePath(m))
			}
			results[x.Result]++
			if (x.Result == limits.MatchLimited) != (x.Rule != nil && len(x.Rule.Limits) > 0) {
				t.Errorf("%v: result %v with rule %q", ents, x.Result, rulePath(x.Rule))
			}
		}
		if depth == 0 {
			return
		}
		for _, e := range alphabet {
			ents = append(ents, e)
			walk(depth - 1)
			ents = ents[:len(ents)-1]
		}
	}
	walk(3)
	if n != 15+15*15+15*15*15 {
		t.Fatalf("checked %d descriptors", n)
	}
	// The rules are built so that the alphabet reaches every outcome.
	for _, r := range []limits.MatchResult{limits.MatchNoRule, limits.MatchTooDeep, limits.MatchNoLimit, limits.MatchLimited} {
		if results[r] == 0 {
			t.Errorf("no descriptor gave %v: %v", r, results)
		}
	}
}

// keyStore records the keys the engine asks for and admits everything.
type keyStore struct{ keys []string }

func (s *keyStore) Apply(_ context.Context, b *limits.Batch) error {
	b.Outcomes = make([]limits.Outcome, len(b.Checks))
	b.Admitted = true
	for _, c := range b.Checks {
		s.keys = append(s.keys, c.Key)
	}
	return nil
}

// TestExplainKeysAreTheEngines checks that Explain names the counters the
// engine uses, share_threshold included.
func TestExplainKeysAreTheEngines(t *testing.T) {
	rs := explainParse(t, explainRules)
	tests := []struct {
		give     string
		wantKeys []string
	}{
		{"tenant=acme,user=alice", []string{"{4:shop6:tenant4:acme}4:user5:alice15:fixed_window/60"}},
		{"ip=10.1.2.3,path=/x", []string{
			"{4:shop2:ip4:10.*}4:path2:/x14:fixed_window/1",
			"{4:shop2:ip4:10.*}4:path2:/x14:sliding_log/60",
		}},
		{"plan=team,region=eu", []string{"{4:shop4:plan4:team}6:region2:eu14:token_bucket/1"}},
		{"free=x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			ents := explainEntries(tt.give)
			var got []string
			for _, l := range rs.Explain("shop", ents).Limits {
				if l.Key != "" {
					got = append(got, l.Key)
				}
			}
			if diff := cmp.Diff(tt.wantKeys, got); diff != "" {
				t.Errorf("Explain keys (-want +got):\n%s", diff)
			}
			st := &keyStore{}
			e := limits.NewEngine(rs, st, limits.EngineOptions{})
			req := &limits.Request{Domain: "shop", Descriptors: []limits.Descriptor{{Entries: ents}}}
			if err := e.Decide(context.Background(), req, &limits.Decision{}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(st.keys, got); diff != "" {
				t.Errorf("engine keys (-engine +explain):\n%s", diff)
			}
		})
	}
}
