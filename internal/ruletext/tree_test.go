package ruletext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// everyKind has every kind of rule, for the tree; its first line is a
// comment so that the lines are those of cmd's testdata/good/rules.yaml.
const everyKind = `# Every kind of rule.
domain: api
failure_mode: closed
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: tenant
    rate_limit:
      algorithm: sliding_window
      unit: minute
      requests_per_unit: 600
      name: tenant
    descriptors:
      - key: user
        rate_limits:
          - {algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 10}
          - {algorithm: leaky_bucket, unit: second, unit_multiplier: 30, requests_per_unit: 5}
  - key: tenant
    value: acme
    rate_limit:
      unit: minute
      requests_per_unit: 6000
      name: acme
      replaces: [{name: tenant}]
  - key: ip
    value: "10.*"
    share_threshold: true
    detailed_metric: true
    rate_limit: {algorithm: sliding_log, unit: hour, requests_per_unit: 100}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: path
    value: /beta/*
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: plan
    value: free
`

const internalRules = `domain: internal
descriptors:
  - key: client
    value_to_metric: true
    rate_limit: {unit: week, requests_per_unit: 1000000}
`

// parse is the ruleset of files, each a name and its text, in order.
func parse(t *testing.T, opts config.Options, files ...string) *limits.Ruleset {
	t.Helper()
	var fs []config.File
	for i := 0; i < len(files); i += 2 {
		fs = append(fs, config.File{Name: files[i], Data: []byte(files[i+1])})
	}
	rs, err := config.Parse(fs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestTree(t *testing.T) {
	tests := []struct {
		name  string
		give  []string // file names and texts
		merge bool
		root  string // the --config path
		want  string
	}{
		{
			name: "a directory",
			give: []string{"rules/rules.yaml", everyKind, "rules/team/internal.yml", internalRules},
			root: "rules/",
			want: `domain api (failure_mode: closed)
├── generic_key=global: fixed_window 1000 per 1s  # rules.yaml:5
├── tenant, any value: sliding_window 600 per 1m0s, name "tenant"  # rules.yaml:8
│   └── user, any value: token_bucket 5 per 1s, burst 10; leaky_bucket 5 per 30s, burst 5  # rules.yaml:15
├── tenant=acme: fixed_window 6000 per 1m0s, name "acme", replaces "tenant"  # rules.yaml:19
├── ip=10.* [share_threshold] [detailed_metric]: sliding_log 100 per 1h0m0s  # rules.yaml:26
├── path=/health: unlimited  # rules.yaml:31
├── path=/beta/*: fixed_window 0 per 24h0m0s (bans every request), shadow  # rules.yaml:34
└── plan=free: no rate_limit (always OK)  # rules.yaml:38

domain internal
└── client, any value [value_to_metric]: fixed_window 1000000 per 168h0m0s  # team/internal.yml:3

ok: 2 domains, 9 rules, 9 limits in 2 files
`,
		},
		{
			name: "one file",
			give: []string{"rules/internal.yml", internalRules},
			root: "rules/internal.yml",
			want: `domain internal
└── client, any value [value_to_metric]: fixed_window 1000000 per 168h0m0s  # internal.yml:3

ok: 1 domain, 1 rule, 1 limit in 1 file
`,
		},
		{
			name: "merged domains",
			give: []string{
				"m/a.yaml", "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
				"m/b.yaml", "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
			},
			merge: true,
			root:  "m",
			want: `domain shared
├── a, any value: fixed_window 1 per 1s  # a.yaml:3
└── b, any value: fixed_window 2 per 1s  # b.yaml:3

ok: 1 domain, 2 rules, 2 limits in 2 files
`,
		},
		{
			name: "overrides",
			give: []string{"r.yaml", "domain: ai\noverride: {algorithm: sliding_window}\ndescriptors:\n  - key: tenant\n    override: {algorithm: token_bucket, burst: 50}\n    descriptors:\n      - key: user\n"},
			root: "r.yaml",
			want: `domain ai (override: sliding_window)
└── tenant, any value [override: token_bucket, burst 50]: no rate_limit  # r.yaml:4
    └── user, any value: no rate_limit (always OK)  # r.yaml:7

ok: 1 domain, 2 rules, 0 limits in 1 file
`,
		},
		{
			name: "no rules",
			root: "empty/",
			want: "no rules: every request gets OK\n\nok: 0 domains, 0 rules, 0 limits in 0 files\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			Tree(&b, parse(t, config.Options{MergeDomains: tt.merge}, tt.give...), tt.root)
			if diff := cmp.Diff(tt.want, b.String()); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTreeGenerated: a rule made by a program (xDS) has no line; the
// tree names its document and YAML path.
func TestTreeGenerated(t *testing.T) {
	rs, err := config.ParseGenerated([]config.File{{Name: `RateLimitConfig "eg"`, Data: []byte(internalRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Tree(&b, rs, "push/")
	want := `domain internal
└── client, any value [value_to_metric]: fixed_window 1000000 per 168h0m0s  # RateLimitConfig "eg" descriptors[0]

ok: 1 domain, 1 rule, 1 limit in 1 file
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
}

// TestUnserved: the rules RLQS answers by the failure mode, counted, one
// a line with where and why.
func TestUnserved(t *testing.T) {
	var b strings.Builder
	Unserved(&b, parse(t, config.Options{}, "rules.yaml", everyKind), rlqs.Options{})
	want := `rlqs: 3 rules not served from their limits
  rules.yaml:5 descriptors[0]: window 1s is too short for Envoy's whole-second assignments
  rules.yaml:15 descriptors[1].descriptors[0]: 2 limits apply; RLQS serves one limit per bucket
  rules.yaml:26 descriptors[3]: algorithm sliding_log cannot be served exactly over RLQS
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("unserved (-want +got):\n%s", diff)
	}
}
