package xds_test

import (
	"fmt"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/alloctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// flatConfig is domain edge with n descriptors on one level.
func flatConfig(n int) *rlsconf.RateLimitConfig {
	ds := make([]*rlsconf.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = &rlsconf.RateLimitDescriptor{Key: "user", Value: fmt.Sprintf("u%d", i), RateLimit: policy(rlsconf.RateLimitUnit_SECOND, 10)}
	}
	return edge(ds...)
}

// deepConfig is domain edge with one chain of n nested descriptors.
func deepConfig(n int) *rlsconf.RateLimitConfig {
	var d *rlsconf.RateLimitDescriptor
	for i := n - 1; i >= 0; i-- {
		nd := &rlsconf.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i), RateLimit: policy(rlsconf.RateLimitUnit_SECOND, 10)}
		if d != nil {
			nd.Descriptors = []*rlsconf.RateLimitDescriptor{d}
		}
		d = nd
	}
	return edge(d)
}

// mergedConfigs is n resources of domain edge with one descriptor each.
func mergedConfigs(n int) []*rlsconf.RateLimitConfig {
	out := make([]*rlsconf.RateLimitConfig, n)
	for i := range out {
		out[i] = &rlsconf.RateLimitConfig{Name: fmt.Sprintf("part%d", i), Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "user", Value: fmt.Sprintf("u%d", i), RateLimit: policy(rlsconf.RateLimitUnit_SECOND, 10)},
		}}
	}
	return out
}

// one makes a push of the single resource build makes.
func one(build func(int) *rlsconf.RateLimitConfig) func(int) []*rlsconf.RateLimitConfig {
	return func(n int) []*rlsconf.RateLimitConfig { return []*rlsconf.RateLimitConfig{build(n)} }
}

// TestPushCostLinear: rendering and parsing a push allocates in
// proportion to its size. Four times the descriptors may cost about four
// times the bytes, flat or nested, never the sixteen times of a cost
// quadratic in them. It counts bytes, not time, so a busy machine cannot
// fail it. (A nested push rendered as YAML whose indentation grew with
// the depth, and was refused for its depth only after that.)
func TestPushCostLinear(t *testing.T) {
	tests := []struct {
		name  string
		build func(int) []*rlsconf.RateLimitConfig
		opts  config.Options
		n     int
	}{
		{name: "flat", build: one(flatConfig), n: 5_000},
		{name: "nested", build: one(deepConfig), n: 300},
		{name: "merged resources", build: mergedConfigs, opts: config.Options{MergeDomains: true}, n: 1_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost := func(n int) uint64 {
				cfgs := tt.build(n)
				return alloctest.Bytes(func() { parsePush(t, tt.opts, cfgs...) }) //nolint:errcheck // nested pushes are refused: their cost is what counts
			}
			small, large := cost(tt.n), cost(4*tt.n)
			ratio := float64(large) / float64(small)
			t.Logf("%d descriptors: %d KiB; %d: %d KiB; ratio %.1f", tt.n, small>>10, 4*tt.n, large>>10, ratio)
			if ratio > 6 {
				t.Errorf("4x the descriptors allocated %.1fx the bytes (%d KiB, was %d KiB), want about 4x", ratio, large>>10, small>>10)
			}
		})
	}
}
