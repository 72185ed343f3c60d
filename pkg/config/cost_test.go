package config_test

import (
	"fmt"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/alloctest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// mergedFiles is n rule files of one domain with one descriptor each,
// as an xDS push of n resources of one domain is.
func mergedFiles(n int) []config.File {
	files := make([]config.File, n)
	for i := range files {
		files[i] = config.File{
			Name: fmt.Sprintf("part%d.yaml", i),
			Data: fmt.Appendf(nil, "domain: edge\ndescriptors:\n  - {key: user, value: u%d, rate_limit: {unit: second, requests_per_unit: 10}}\n", i),
		}
	}
	return files
}

// TestParseCostLinear: parsing allocates in proportion to the
// descriptors parsed. Four times the descriptors may cost about four
// times the bytes, never the sixteen times of a cost quadratic in them.
// It counts bytes, not time, so a busy machine cannot fail it.
func TestParseCostLinear(t *testing.T) {
	tests := []struct {
		name  string
		build func(int) []config.File
		opts  config.Options
		n     int
	}{
		{name: "one level", build: func(n int) []config.File { return []config.File{flatFile(n)} }, n: 5_000},
		// One domain merged from many files: each file's duplicate
		// checks must not index the rules of every file before it again.
		{name: "merged files", build: mergedFiles, opts: config.Options{MergeDomains: true}, n: 2_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cost := func(n int) uint64 {
				files := tt.build(n)
				return alloctest.Bytes(func() {
					if _, err := config.Parse(files, tt.opts); err != nil {
						t.Fatal(err)
					}
				})
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
