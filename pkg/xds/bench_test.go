package xds_test

import (
	"fmt"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/xds"
)

// BenchmarkPush renders and parses a push as the client does, from the
// resources as they arrive to the ruleset: flat pushes are applied,
// nested ones refused.
func BenchmarkPush(b *testing.B) {
	for _, bc := range []struct {
		name  string
		build func(int) *rlsconf.RateLimitConfig
		sizes []int
	}{
		{name: "flat", build: flatConfig, sizes: []int{10_000, 40_000, 100_000}},
		{name: "nested", build: deepConfig, sizes: []int{9_990}},
	} {
		for _, n := range bc.sizes {
			res, err := anypb.New(bc.build(n))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%d", bc.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					files, err := xds.Render([]*anypb.Any{res})
					if err == nil {
						_, err = config.ParseGenerated(files, config.Options{})
					}
					if (err == nil) != (bc.name == "flat") {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
