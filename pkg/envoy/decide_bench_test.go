package envoy_test

import (
	"context"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

// BenchmarkShouldRateLimit decides a request that every limit admits, and
// one that a ban rejects, through the server's message path on a memory
// store: the server's own cost around the engine, which a rejection adds
// to.
func BenchmarkShouldRateLimit(b *testing.B) {
	const benchRules = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(benchRules)}}, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := envoy.NewServer(limits.NewEngine(rs, memory.New(memory.Options{}), limits.EngineOptions{}), zap.NewNop(), envoy.Options{})
	for _, bc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want rlsv3.RateLimitResponse_Code
	}{
		{"admitted", &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{desc("user", "alice")}}, rlsv3.RateLimitResponse_OK},
		{"rejected", &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlscommon.RateLimitDescriptor{desc("banned", "mallory")}}, rlsv3.RateLimitResponse_OVER_LIMIT},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := srv.ShouldRateLimit(context.Background(), bc.req)
				if err != nil || resp.OverallCode != bc.want {
					b.Fatalf("%v, %v", resp.GetOverallCode(), err)
				}
			}
		})
	}
}
