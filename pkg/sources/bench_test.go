package sources_test

import (
	"fmt"
	"testing"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/sources"
)

// BenchmarkSetRules is the cost of one source's push when two sources
// hold 1,000 domains each: every push joins the whole rule set again.
func BenchmarkSetRules(b *testing.B) {
	domains := func(prefix string) []string {
		out := make([]string, 1000)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	c := sources.New(engine(), zap.NewNop())
	eg, _ := c.Add("eg", rules("eg", domains("eg")...))
	aigw, _ := c.Add("aigw", limits.NewRuleset(nil, nil, ""))
	push := rules("aigw", domains("aigw")...)
	_ = eg
	b.ReportAllocs()
	for b.Loop() {
		aigw.SetRules(push)
	}
}
