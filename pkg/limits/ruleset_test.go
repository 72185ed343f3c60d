package limits_test

import (
	"slices"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestRulesetAll: the one walk over the rule tree yields every rule once,
// domains by name, each rule before its children in file order, and
// stops when asked.
func TestRulesetAll(t *testing.T) {
	rule := func(key, value string, children ...*limits.Rule) *limits.Rule {
		return &limits.Rule{Key: key, Value: value, Children: children}
	}
	rs := limits.NewRuleset([]*limits.Domain{
		{Name: "zeta", Rules: []*limits.Rule{rule("route", "a")}},
		{Name: "alpha", Rules: []*limits.Rule{
			rule("tenant", "", rule("user", "", rule("path", "x")), rule("plan", "gold")),
			rule("global", "g"),
		}},
	}, nil, "")
	var got []string
	for d, r := range rs.All() {
		got = append(got, d+" "+r.Key+"="+r.Value)
	}
	want := []string{"alpha tenant=", "alpha user=", "alpha path=x", "alpha plan=gold", "alpha global=g", "zeta route=a"}
	if !slices.Equal(got, want) {
		t.Errorf("All yielded\n%q\nwant\n%q", got, want)
	}
	n := 0
	for range rs.All() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("a loop that breaks at 3 saw %d rules", n)
	}
}

// TestJoin: a joined Ruleset holds the named domains of each part, which
// match as they do in their part, and none other; a domain its part
// lacks is left out.
func TestJoin(t *testing.T) {
	one := func(domain, key, value string) *limits.Ruleset {
		return limits.NewRuleset([]*limits.Domain{{Name: domain, FailureMode: limits.FailClosed,
			Rules: []*limits.Rule{{Key: key, Value: value}}}}, []string{domain + ".yaml"}, domain)
	}
	a, b := one("edge", "user", "alice"), one("ai-gateway-quota", "backend_name", "x")
	both := limits.NewRuleset([]*limits.Domain{{Name: "edge"}, {Name: "other"}}, nil, "")
	rs := limits.Join(map[string]*limits.Ruleset{"edge": a, "ai-gateway-quota": b, "gone": b}, []string{"f"}, "sum")
	if got, want := rs.Domains(), []string{"ai-gateway-quota", "edge"}; !slices.Equal(got, want) {
		t.Errorf("Domains %q, want %q", got, want)
	}
	if r := rs.Match("edge", []limits.Entry{{Key: "user", Value: "alice"}}); r == nil || r != a.Match("edge", []limits.Entry{{Key: "user", Value: "alice"}}) {
		t.Errorf("edge matched %v in the join, not its part's rule", r)
	}
	if r := rs.Match("ai-gateway-quota", []limits.Entry{{Key: "backend_name", Value: "x"}}); r == nil {
		t.Error("ai-gateway-quota's rule does not match in the join")
	}
	if rs.FailureMode("edge", limits.FailOpen) != limits.FailClosed {
		t.Error("edge lost its failure mode in the join")
	}
	if rs.Checksum != "sum" || !slices.Equal(rs.Files, []string{"f"}) {
		t.Errorf("checksum %q, files %q", rs.Checksum, rs.Files)
	}
	if limits.Join(map[string]*limits.Ruleset{"other": a}, nil, "").HasDomain("other") || !both.HasDomain("other") {
		t.Error("a domain its part does not hold is in the join")
	}
}
