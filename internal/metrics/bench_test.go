package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// BenchmarkDecideObserved is limits' BenchmarkDecideMemory/three_tier with
// metrics on: the difference is what metrics cost per decision.
func BenchmarkDecideObserved(b *testing.B) {
	rs, err := limits.Load("../../config/", limits.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New("bench", 0.8)
	e := limits.NewEngine(rs, m.Store("memory", limits.NewMemoryStore()), limits.DefaultRequestLimits, limits.WithObserver(m))
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
