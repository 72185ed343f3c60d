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
