package ruletext

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// TestLoadProblems: every problem is written, one a line, as file:line:
// path: reason, and the error counts them.
func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []string // one prefix per line written, in order
		wantErr string
	}{
		{
			name:    "one problem",
			give:    "testdata/unknown_unit.bad.yaml",
			want:    []string{`testdata/unknown_unit.bad.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
			wantErr: "invalid config testdata/unknown_unit.bad.yaml: 1 problem",
		},
		{
			name: "many problems",
			give: "testdata/many.bad.yaml",
			want: []string{
				"testdata/many.bad.yaml:4: descriptors[0].key: required",
				"testdata/many.bad.yaml:7: descriptors[1].colour: unknown field",
				"testdata/many.bad.yaml:8: descriptors[1].rate_limit.burst: applies only to token_bucket and leaky_bucket",
				`testdata/many.bad.yaml:12: descriptors[3]: duplicate descriptor key "path" value "/a"`,
				"testdata/many.bad.yaml:17: descriptors[4].share_threshold: needs a wildcard value",
			},
			wantErr: "invalid config testdata/many.bad.yaml: 5 problems",
		},
		{
			name: "invalid YAML",
			give: "testdata/invalid_yaml.bad.yaml",
			// Line 3 holds the unclosed '['; yaml.v3 says line 2.
			want:    []string{"testdata/invalid_yaml.bad.yaml:3: invalid YAML"},
			wantErr: "invalid config testdata/invalid_yaml.bad.yaml: 1 problem",
		},
		{
			name:    "not a problem in the rules",
			give:    "testdata/missing",
			wantErr: "read config: stat testdata/missing: no such file or directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w strings.Builder
			rs, err := Load(tt.give, config.Options{}, &w)
			if rs != nil || err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Load = %v, %v; want no rules and %q", rs, err, tt.wantErr)
			}
			checkLines(t, w.String(), tt.want)
		})
	}
}

// checkLines checks that text has one line for each of want, which starts
// with it.
func checkLines(t *testing.T, text string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if text == "" {
		lines = nil
	}
	if len(lines) != len(want) {
		t.Fatalf("wrote %d lines, want %d:\n%s", len(lines), len(want), text)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d is %q, want it to start %q", i+1, lines[i], w)
		}
	}
}

// TestLoadOptions: Load reads rules as the server does with the same
// options: a domain in two files needs MergeDomains, and a path without
// rule files is config.ErrNoRules, returned unwritten, unless AllowEmpty.
func TestLoadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("domain: shared\ndescriptors:\n  - key: "+f[:1]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var w strings.Builder
	_, err := Load(dir, config.Options{}, &w)
	want := filepath.Join(dir, "b.yaml") + `:1: domain: domain "shared" is already defined in ` + filepath.Join(dir, "a.yaml") + " (set --merge-domains to combine files)\n"
	if err == nil || !strings.HasSuffix(err.Error(), ": 1 problem") || w.String() != want {
		t.Errorf("Load of one domain in two files: %v, wrote\n%s\nwant\n%s", err, w.String(), want)
	}
	if rs, err := Load(dir, config.Options{MergeDomains: true}, &w); err != nil || len(rs.Rules("shared")) != 2 {
		t.Errorf("Load with MergeDomains: %v", err)
	}

	empty := t.TempDir()
	w.Reset()
	if _, err := Load(empty, config.Options{}, &w); !errors.Is(err, config.ErrNoRules) || w.Len() > 0 {
		t.Errorf("Load of a directory without rule files: %v, wrote %q; want config.ErrNoRules and nothing", err, w.String())
	}
	if rs, err := Load(empty, config.Options{AllowEmpty: true}, &w); err != nil || len(rs.Domains()) != 0 {
		t.Errorf("Load with AllowEmpty: %v", err)
	}
}

// TestLoadOverlay: the rules an overlay makes of the RateLimitConfigs
// Envoy Gateway would push; an overlay with entries that match nothing
// fails, each entry written with the file, line, path and reason.
func TestLoadOverlay(t *testing.T) {
	var w strings.Builder
	rs, err := LoadOverlay("testdata/xds-overlay/push", "testdata/xds-overlay/overlay.yaml", config.Options{}, &w)
	if err != nil {
		t.Fatalf("LoadOverlay: %v\n%s", err, w.String())
	}
	Tree(&w, rs, "testdata/xds-overlay/push")
	want := `domain default/eg/http (failure_mode: closed)
└── httproute/default/api/rule/0/match/0/*=httproute/default/api/rule/0/match/0/*: no rate_limit  # RateLimitConfig "default/eg/http" descriptors[0]
    └── rule-0-match-0, any value: sliding_window 100 per 1m0s; fixed_window 10000 per 24h0m0s  # RateLimitConfig "default/eg/http" descriptors[0].descriptors[0]

ok: 1 domain, 2 rules, 2 limits in 1 file
`
	if diff := cmp.Diff(want, w.String()); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}

	w.Reset()
	rs, err = LoadOverlay("testdata/xds-overlay/push", "testdata/xds-overlay/unmatched.yaml", config.Options{}, &w)
	if wantErr := "testdata/xds-overlay/push with overlay testdata/xds-overlay/unmatched.yaml: 2 problems"; rs != nil || err == nil || err.Error() != wantErr {
		t.Fatalf("LoadOverlay of an overlay that matches nothing = %v, %v; want no rules and %q", rs, err, wantErr)
	}
	checkLines(t, w.String(), []string{
		`testdata/xds-overlay/unmatched.yaml:2: overlays[0]: matches nothing: path[0]: no descriptor with key "httproute/default/web/rule/0/match/0/*"`,
		`testdata/xds-overlay/unmatched.yaml:9: overlays[1]: matches nothing: no rules of domain "default/eg/https"`,
	})

	w.Reset()
	if _, err = LoadOverlay("testdata/xds-overlay/push", "testdata/missing.yaml", config.Options{}, &w); !errors.Is(err, os.ErrNotExist) || w.Len() > 0 {
		t.Errorf("LoadOverlay of a missing overlay: %v, wrote %q; want the error, unwritten", err, w.String())
	}
}
