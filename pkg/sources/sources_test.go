package sources_test

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/sources"
)

// rules returns a ruleset whose domains each have one rule, key=value
// where value names the source, so that a match says whose rule it is.
func rules(source string, domains ...string) *limits.Ruleset {
	var ds []*limits.Domain
	for _, d := range domains {
		ds = append(ds, &limits.Domain{Name: d, Rules: []*limits.Rule{{Key: "from", Value: source}}})
	}
	return limits.NewRuleset(ds, []string{source + ".yaml"}, source+":"+strings.Join(domains, ","))
}

// whose returns the source whose rule for domain decides in e, "" if
// none does.
func whose(e *limits.Engine, domain string) string {
	for _, src := range []string{"files", "eg", "aigw"} {
		if e.Rules().Match(domain, []limits.Entry{{Key: "from", Value: src}}) != nil {
			return src
		}
	}
	return ""
}

func engine() *limits.Engine {
	return limits.NewEngine(limits.NewRuleset(nil, nil, ""), memory.New(memory.Options{}), limits.EngineOptions{})
}

// TestCombiner: each source's domains decide in the one engine; a
// domain a second source claims stays its first holder's, is reported,
// and the second source's other domains apply; when the holder drops it,
// the other source's rules for it take over.
func TestCombiner(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	e := engine()
	c := sources.New(e, zap.New(core))
	files, err := c.Add("files", rules("files", "local"))
	if err != nil {
		t.Fatal(err)
	}
	eg, _ := c.Add("eg", limits.NewRuleset(nil, nil, ""))
	aigw, _ := c.Add("aigw", limits.NewRuleset(nil, nil, ""))
	if _, err := c.Add("eg", nil); err == nil {
		t.Error("a second source named eg was added")
	}

	eg.SetRules(rules("eg", "edge", "shared"))
	aigw.SetRules(rules("aigw", "ai-gateway-quota", "shared"))
	for domain, want := range map[string]string{"local": "files", "edge": "eg", "shared": "eg", "ai-gateway-quota": "aigw"} {
		if got := whose(e, domain); got != want {
			t.Errorf("domain %s decided by %q, want %q", domain, got, want)
		}
	}
	want := []sources.Conflict{{Domain: "shared", Holder: "eg", Refused: "aigw"}}
	if got := c.Conflicts(); !slices.Equal(got, want) {
		t.Errorf("conflicts %v, want %v", got, want)
	}
	if c.Refused("aigw") != 1 || c.Refused("eg") != 0 {
		t.Errorf("refused: aigw %d, eg %d; want 1, 0", c.Refused("aigw"), c.Refused("eg"))
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), `rule source aigw: domain "shared" refused: rule source eg holds it`) {
		t.Errorf("Err: %v", err)
	}
	if n := logs.FilterMessageSnippet("rule source refused").FilterField(zap.String("domain", "shared")).Len(); n != 1 {
		t.Errorf("%d Error lines for the conflict, want 1", n)
	}
	// The holder pushes again, still with the domain: it keeps it, and
	// the conflict is not logged again.
	eg.SetRules(rules("eg", "edge", "shared", "more"))
	if whose(e, "shared") != "eg" || whose(e, "more") != "eg" {
		t.Errorf("after eg's second push: shared by %q, more by %q", whose(e, "shared"), whose(e, "more"))
	}
	if n := logs.FilterMessageSnippet("rule source refused").Len(); n != 1 {
		t.Errorf("%d Error lines for one standing conflict, want 1", n)
	}
	sum := e.Rules().Checksum

	// The holder drops the domain: the other source's rules take it.
	eg.SetRules(rules("eg", "edge"))
	if got := whose(e, "shared"); got != "aigw" {
		t.Errorf("after eg dropped shared: decided by %q, want aigw", got)
	}
	if len(c.Conflicts()) != 0 || c.Err() != nil {
		t.Errorf("conflicts left: %v", c.Conflicts())
	}
	if e.Rules().Checksum == sum {
		t.Error("the combined checksum did not change with the rules")
	}
	// And now aigw holds it: eg claiming it again is refused.
	eg.SetRules(rules("eg", "edge", "shared"))
	if got := whose(e, "shared"); got != "aigw" {
		t.Errorf("eg claiming shared back: decided by %q, want aigw, its holder", got)
	}
	if files.Rules().Checksum != "files:local" {
		t.Errorf("files' own rules: %q", files.Rules().Checksum)
	}
	if got := e.Rules().Files; !slices.Equal(got, []string{"files.yaml", "eg.yaml", "aigw.yaml"}) {
		t.Errorf("files %q", got)
	}
}

// TestCombinerOneSource: with one source the engine's rules are that
// source's, checksum and all, as without a combiner.
func TestCombinerOneSource(t *testing.T) {
	e := engine()
	s, err := sources.New(e, zap.NewNop()).Add("xds", limits.NewRuleset(nil, nil, "empty"))
	if err != nil {
		t.Fatal(err)
	}
	rs := rules("eg", "edge")
	s.SetRules(rs)
	if e.Rules() != rs {
		t.Errorf("engine rules %q, want the source's own %q", e.Rules().Checksum, rs.Checksum)
	}
}
