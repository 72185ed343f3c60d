package limits_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func loadDefault(b *testing.B) *limits.Ruleset {
	rs, err := config.Load("../../config/", config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return rs
}

// tieredRequests returns n requests shaped like rlsload's tiered workload:
// global, tenant, and tenant+user, over 10 tenants and 1000 users.
func tieredRequests(n int) []limits.Request {
	reqs := make([]limits.Request, n)
	for i := range reqs {
		tenant, user := fmt.Sprint("t", i%10), fmt.Sprint("u", i%1000)
		reqs[i] = limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{
			{Entries: []limits.Entry{{Key: "generic_key", Value: "global"}}},
			{Entries: []limits.Entry{{Key: "tenant", Value: tenant}}},
			{Entries: []limits.Entry{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}}},
		}}
	}
	return reqs
}

func BenchmarkMatch(b *testing.B) {
	rs := loadDefault(b)
	reqs := tieredRequests(1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for _, d := range reqs[i%len(reqs)].Descriptors {
			if rs.Match("edge", d.Entries) == nil {
				b.Fatal("no match")
			}
		}
		i++
	}
}

func BenchmarkDecideMemory(b *testing.B) {
	rs := loadDefault(b)
	tiered := tieredRequests(1024)
	single := make([]limits.Request, len(tiered))
	for i, r := range tiered {
		single[i] = limits.Request{Domain: "edge", Descriptors: r.Descriptors[2:]}
	}
	for _, bc := range []struct {
		name string
		reqs []limits.Request
	}{{"one_descriptor", single}, {"three_tier", tiered}} {
		b.Run(bc.name, func(b *testing.B) {
			// Limits far above the load, so every decision does full work.
			e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var d limits.Decision
				i := 0
				for pb.Next() {
					if err := e.Decide(context.Background(), &bc.reqs[i%len(bc.reqs)], &d); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}

// BenchmarkMatchWildcardsOtherKey matches a key with no wildcard rules
// on a level that has 10,000 wildcard rules of another key: they must
// cost it nothing.
func BenchmarkMatchWildcardsOtherKey(b *testing.B) {
	var rules []*limits.Rule
	for i := range 10_000 {
		rules = append(rules, &limits.Rule{Key: "path", Value: fmt.Sprintf("/api/%d/*", i)})
	}
	rules = append(rules, &limits.Rule{Key: "user"})
	rs := limits.NewRuleset([]*limits.Domain{{Name: "edge", Rules: rules}}, nil, "")
	entries := []limits.Entry{{Key: "user", Value: "alice"}}
	b.ReportAllocs()
	for b.Loop() {
		if rs.Match("edge", entries) == nil {
			b.Fatal("no match")
		}
	}
}

// BenchmarkDecideOverride decides one descriptor that carries Envoy's
// own limit, 1000 users, on the memory store: counted as the reference
// counts it, and by a token bucket the domain's override names.
func BenchmarkDecideOverride(b *testing.B) {
	reqs := make([]limits.Request, 1000)
	for i := range reqs {
		reqs[i] = limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
			Entries:  []limits.Entry{{Key: "route", Value: "api"}, {Key: "user", Value: fmt.Sprint("u", i)}},
			Override: &limits.Override{Requests: 1 << 30, Unit: limits.UnitMinute},
		}}}
	}
	for _, bc := range []struct {
		name string
		spec *limits.OverrideSpec
	}{{"reference", nil}, {"token_bucket", &limits.OverrideSpec{Algorithm: limits.TokenBucket}}} {
		b.Run(bc.name, func(b *testing.B) {
			user := &limits.Rule{Domain: "d", Key: "user"}
			route := &limits.Rule{Domain: "d", Key: "route", Children: []*limits.Rule{user}}
			rs := limits.NewRuleset([]*limits.Domain{{Name: "d", Rules: []*limits.Rule{route}, Override: bc.spec}}, nil, "")
			e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{})
			var d limits.Decision
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := e.Decide(context.Background(), &reqs[i%len(reqs)], &d); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
