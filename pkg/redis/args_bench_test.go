package redis

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// BenchmarkSetArgs measures building one apply.lua call's KEYS and ARGV
// for a request of three ordinary checks (fixed and sliding window, token
// bucket): the encoding every check pays for.
func BenchmarkSetArgs(b *testing.B) {
	s := &Store{prefix: "rl:"}
	var checks []limits.Check
	for i, alg := range []limits.Algorithm{limits.FixedWindow, limits.SlidingWindow, limits.TokenBucket} {
		l, err := limits.NewLimit(alg, 100, limits.UnitMinute, 1, 0)
		if err != nil {
			b.Fatal(err)
		}
		checks = append(checks, limits.Check{Key: "tenant_" + string(rune('a'+i)) + "_0123456789", Limit: l, Hits: 1})
	}
	c := getCall(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		c.keys = c.keys[:0]
		s.setArgs(c, checks, nil, 0, "", modeApply)
	}
}
