package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// BenchmarkDecideObserved is limits' BenchmarkDecideMemory/three_tier with
// metrics on: the difference is what metrics cost per decision.
func BenchmarkDecideObserved(b *testing.B) {
	rs, err := config.Load("../../config/", config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New(metrics.Build{Version: "bench"}, 0.8, metrics.DefaultMaxValues)
	e := limits.NewEngine(rs, store.Timed(memory.New(memory.Options{}), m.StoreCalls("memory")), limits.EngineOptions{Observer: m})
	reqs := make([]limits.Request, 1024)
	for i := range reqs {
		tenant, user := fmt.Sprint("t", i%10), fmt.Sprint("u", i%1000)
		reqs[i] = limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{
			{Entries: []limits.Entry{{Key: "generic_key", Value: "global"}}},
			{Entries: []limits.Entry{{Key: "tenant", Value: tenant}}},
			{Entries: []limits.Entry{{Key: "tenant", Value: tenant}, {Key: "user", Value: user}}},
		}}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var d limits.Decision
		i := 0
		for pb.Next() {
			if err := e.Decide(context.Background(), &reqs[i%len(reqs)], &d); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkDecideDetailed decides one descriptor of a detailed_metric rule
// with metrics on: "few" cycles through 100 tenants, which all fit under
// the default cap, "many" through 100,000, which mostly overflow (before
// the cap, each got series of its own).
func BenchmarkDecideDetailed(b *testing.B) {
	for _, bb := range []struct {
		name    string
		tenants int
	}{{"few", 100}, {"many", 100_000}} {
		b.Run(bb.name, func(b *testing.B) {
			rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(rules)}}, config.Options{})
			if err != nil {
				b.Fatal(err)
			}
			m := metrics.New(metrics.Build{Version: "bench"}, 0.8, metrics.DefaultMaxValues)
			e := limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{Observer: m})
			reqs := make([]limits.Request, bb.tenants)
			for i := range reqs {
				reqs[i] = limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{
					{Entries: []limits.Entry{{Key: "tenant", Value: fmt.Sprint("t", i)}}},
				}}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var d limits.Decision
				i := 0
				for pb.Next() {
					if err := e.Decide(context.Background(), &reqs[i%len(reqs)], &d); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
