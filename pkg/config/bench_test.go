package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// flatFile is a rule file with n descriptors on one level.
func flatFile(n int) config.File {
	var b strings.Builder
	b.WriteString("domain: flat\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: user, value: u%d, rate_limit: {unit: second, requests_per_unit: 10}}\n", i)
	}
	return config.File{Name: "flat.yaml", Data: []byte(b.String())}
}

func BenchmarkParseFlat(b *testing.B) {
	for _, n := range []int{10_000, 40_000, 100_000} {
		f := flatFile(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := config.Parse([]config.File{f}, config.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// deepFile is a rule file whose descriptors nest n deep, in flow style
// (about 30 bytes a level).
func deepFile(n int) config.File {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors: [")
	for i := range n {
		fmt.Fprintf(&b, "{key: k%d, descriptors: [", i)
	}
	b.WriteString("{key: last, rate_limit: {unit: second, requests_per_unit: 1}}")
	for range n {
		b.WriteString("]}")
	}
	b.WriteString("]\n")
	return config.File{Name: "deep.yaml", Data: []byte(b.String())}
}

// BenchmarkParseDeep parses files nested past MaxDepth, which are
// refused: the cost is yaml.v3's reading of the file.
func BenchmarkParseDeep(b *testing.B) {
	for _, n := range []int{1_000, 4_000} {
		f := deepFile(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := config.Parse([]config.File{f}, config.Options{}); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}
