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

// BenchmarkPushOverlay is BenchmarkPush's flat push of 10,000
// descriptors through Preview, as the client applies it, without an
// overlay and with one of entries entries, each matching one descriptor
// by path.
func BenchmarkPushOverlay(b *testing.B) {
	res, err := anypb.New(flatConfig(10_000))
	if err != nil {
		b.Fatal(err)
	}
	for _, entries := range []int{0, 10, 100} {
		var ov *config.Overlay
		if entries > 0 {
			text := "overlays:\n"
			for i := range entries {
				text += fmt.Sprintf("  - {domain: edge, path: [{key: user, value: u%d}], rate_limit: {algorithm: sliding_window}}\n", i*97)
			}
			if ov, err = config.ParseOverlay("overlay.yaml", []byte(text)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, unmatched, err := xds.Preview([]*anypb.Any{res}, ov, config.Options{}); err != nil || len(unmatched) > 0 {
					b.Fatal(err, unmatched)
				}
			}
		})
	}
}
