package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckGood(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			// Every kind of rule, and two files; .ignored.yaml is not read.
			name: "directory",
			args: []string{"--config", "testdata/good"},
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
└── client, any value [value_to_metric]: fixed_window 1000000 per 168h0m0s  # internal.yml:3

ok: 2 domains, 9 rules, 9 limits in 2 files
`,
		},
		{
			name: "one file",
			args: []string{"--config", "testdata/good/internal.yml"},
			want: `domain internal
└── client, any value [value_to_metric]: fixed_window 1000000 per 168h0m0s  # internal.yml:3

ok: 1 domain, 1 rule, 1 limit in 1 file
`,
		},
		{
			name: "merged domains",
			args: []string{"--config", "testdata/merge", "--merge-domains"},
			want: `domain shared
├── a, any value: fixed_window 1 per 1s  # a.yaml:3
└── b, any value: fixed_window 2 per 1s  # b.yaml:3

ok: 1 domain, 2 rules, 2 limits in 2 files
`,
		},
		{
			name: "the default rules",
			args: []string{"--config", "../../config/"},
			want: `domain edge
├── generic_key=global: fixed_window 1000 per 1s  # rules.yaml:13
├── tenant, any value: sliding_window 600 per 1m0s  # rules.yaml:21
│   └── user, any value: token_bucket 5 per 1s, burst 10  # rules.yaml:29
└── tenant=acme: sliding_window 6000 per 1m0s  # rules.yaml:39
    └── user, any value: token_bucket 5 per 1s, burst 10  # rules.yaml:46

ok: 1 domain, 5 rules, 5 limits in 1 file
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := runCheck(tt.args, &stdout, &stderr); err != nil {
				t.Fatalf("check: %v\n%s", err, stderr.String())
			}
			if got := stdout.String(); got != tt.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, tt.want)
			}
			if stderr.Len() > 0 {
				t.Errorf("stderr: %s", stderr.String())
			}
		})
	}
}

// TestCheckBad checks that every problem is printed, one a line, as
// file:line: path: reason, and that check fails.
func TestCheckBad(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string // one substring per stderr line, in order
		wantErr string
	}{
		{
			name:    "unknown unit",
			args:    []string{"--config", "testdata/unknown_unit.bad.yaml"},
			want:    []string{`testdata/unknown_unit.bad.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight"`},
			wantErr: "invalid config testdata/unknown_unit.bad.yaml: 1 problem",
		},
		{
			name: "many problems",
			args: []string{"--config", "testdata/many.bad.yaml"},
			want: []string{
				"testdata/many.bad.yaml:4: descriptors[0].key: required",
				"testdata/many.bad.yaml:7: descriptors[1].colour: unknown field",
				"testdata/many.bad.yaml:8: descriptors[1].rate_limit.burst: applies only to token_bucket and leaky_bucket",
				`testdata/many.bad.yaml:12: descriptors[3]: duplicate descriptor key "path" value "/a"`,
				"descriptors[4].share_threshold: needs a wildcard value",
			},
			wantErr: "invalid config testdata/many.bad.yaml: 5 problems",
		},
		{
			name: "invalid YAML",
			args: []string{"--config", "testdata/invalid_yaml.bad.yaml"},
			// Line 3 holds the unclosed '['; yaml.v3 says line 2.
			want:    []string{"testdata/invalid_yaml.bad.yaml:3: invalid YAML"},
			wantErr: "1 problem",
		},
		{
			name:    "domain in two files",
			args:    []string{"--config", "testdata/merge"},
			want:    []string{`testdata/merge/b.yaml:1: domain: domain "shared" is already defined in testdata/merge/a.yaml (set --merge-domains to combine files)`},
			wantErr: "1 problem",
		},
		{
			name:    "missing path",
			args:    []string{"--config", "testdata/missing"},
			wantErr: "read config: stat testdata/missing: no such file or directory",
		},
		{
			name:    "extra argument",
			args:    []string{"--config", "testdata/good", "rules.yaml"},
			wantErr: `check: unexpected argument "rules.yaml"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runCheck(tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("check returned %v, want an error with %q", err, tt.wantErr)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %s", stdout.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if stderr.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(tt.want), stderr.String())
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Errorf("stderr line %d is %q, want it to contain %q", i+1, lines[i], want)
				}
			}
		})
	}
}

func TestCheckUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runCheck([]string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("check -h returned %v, want flag.ErrHelp", err)
	}
	if !strings.HasPrefix(stderr.String(), "Usage: ratelimit-sidecar check") || !strings.Contains(stderr.String(), "-merge-domains") {
		t.Errorf("help:\n%s", stderr.String())
	}
	stderr.Reset()
	// A bad flag is one line that says where the flags are, without the
	// usage (TestUnknownCommandFlag).
	err := runCheck([]string{"--config", "testdata/good", "--verbose"}, &stdout, &stderr)
	if err == nil || err.Error() != "check: unknown flag --verbose (ratelimit-sidecar help check lists its flags)" {
		t.Errorf("check --verbose returned %v", err)
	}
	if stderr.Len() > 0 {
		t.Errorf("usage after a bad flag:\n%s", stderr.String())
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout: %s", stdout.String())
	}
}

// TestSubcommandAfterEntrypointFlags: the image's entrypoint passes server
// flags first; `docker run IMAGE check --config …` must still run check.
func TestSubcommandAfterEntrypointFlags(t *testing.T) {
	var stdout bytes.Buffer
	args := []string{"--config=/etc/ratelimit-sidecar/", "--grpc-addr=0.0.0.0:8081", "check", "--config", "../../config/"}
	if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	if !strings.Contains(stdout.String(), "ok: 1 domain") {
		t.Errorf("check output:\n%s", stdout.String())
	}
	// A flag value that happens to read "check" is not a subcommand.
	if _, err := parseFlags([]string{"--config", "check"}, noEnv, io.Discard); err != nil {
		t.Errorf("--config check: %v", err)
	}
}

// TestSubcommandTakesEntrypointConfig: `docker run IMAGE check` and
// `explain` read the rules the entrypoint's --config names, as the server
// would; a --config of their own wins, and the server's other flags are
// not theirs.
func TestSubcommandTakesEntrypointConfig(t *testing.T) {
	rules, err := filepath.Abs("../../config")
	if err != nil {
		t.Fatal(err)
	}
	entry := []string{"--config=" + rules + "/", "--grpc-addr=0.0.0.0:8081", "--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"}
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"check", []string{"check"}, "ok: 1 domain"},
		{"explain", []string{"explain", "--domain", "edge", "--descriptor", "tenant=acme,user=42"}, "token_bucket"},
		{"check merging", []string{"check", "--merge-domains"}, "ok: 1 domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(slices.Clone(entry), tt.give...)
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("run %q: %v\n%s", args, err, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.want) {
				t.Errorf("run %q: want %q in:\n%s", args, tt.want, stdout.String())
			}
		})
	}
	// The command's own --config comes later and wins.
	dir := t.TempDir()
	write(t, filepath.Join(dir, "r.yaml"), "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	var stdout bytes.Buffer
	if err := run(context.Background(), append(slices.Clone(entry), "check", "--config", dir), &stdout, io.Discard); err != nil || !strings.Contains(stdout.String(), "other") {
		t.Errorf("check --config %s after the entrypoint's: %v\n%s", dir, err, stdout.String())
	}
}

// TestSubcommandTakesRLSConfig: check reads the rules RLS_CONFIG names,
// as the server does; the entrypoint's --config beats it, and check's
// own --config beats both.
func TestSubcommandTakesRLSConfig(t *testing.T) {
	rules, err := filepath.Abs("../../config")
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	write(t, filepath.Join(other, "r.yaml"), "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"from the environment", []string{"check"}, "ok: 1 domain"},
		{"the entrypoint's flag wins", []string{"--config=" + other, "check"}, "domain other"},
		{"check's own flag wins", []string{"--config=/nowhere", "check", "--config", other}, "domain other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runCLI(t, []string{"RLS_CONFIG=" + rules}, tt.give...)
			if err != nil || !strings.Contains(stdout, tt.want) {
				t.Errorf("RLS_CONFIG=%s ratelimit-sidecar %q: %v, want %q in:\n%s%s", rules, tt.give, err, tt.want, stdout, stderr)
			}
		})
	}
}

// TestCheckNoRules: check on a directory without rule files fails, naming
// the path and what it did not find, unless --allow-empty-rules is given.
func TestCheckNoRules(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml.orig"), userRules)
	var stdout, stderr bytes.Buffer
	err := runCheck([]string{"--config", dir}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no rule files found") {
		t.Errorf("check of a directory without rule files = %v; want an error naming %s and saying no rule files were found", err, dir)
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout: %s", stdout.String())
	}

	stdout.Reset()
	if err := runCheck([]string{"--config", dir, "--allow-empty-rules"}, &stdout, &stderr); err != nil {
		t.Fatalf("check --allow-empty-rules: %v", err)
	}
	want := "no rules: every request gets OK\n\nok: 0 domains, 0 rules, 0 limits in 0 files\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

// TestCheckXDSOverlay: with --xds-overlay, check reads the RateLimitConfigs
// Envoy Gateway would push and prints the rules the overlay makes of
// them; an overlay with entries that match nothing fails, each entry
// named with the file, line, path and reason.
func TestCheckXDSOverlay(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"--config", "testdata/xds-overlay/push", "--xds-overlay", "testdata/xds-overlay/overlay.yaml"}
	if err := runCheck(args, &stdout, &stderr); err != nil {
		t.Fatalf("check: %v\n%s", err, stderr.String())
	}
	want := `domain default/eg/http (failure_mode: closed)
└── httproute/default/api/rule/0/match/0/*=httproute/default/api/rule/0/match/0/*: no rate_limit  # RateLimitConfig "default/eg/http" descriptors[0]
    └── rule-0-match-0, any value: sliding_window 100 per 1m0s; fixed_window 10000 per 24h0m0s  # RateLimitConfig "default/eg/http" descriptors[0].descriptors[0]

ok: 1 domain, 2 rules, 2 limits in 1 file
`
	if got := stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}

	stdout.Reset()
	args[3] = "testdata/xds-overlay/unmatched.yaml"
	err := runCheck(args, &stdout, &stderr)
	if err == nil || !strings.HasSuffix(err.Error(), "with overlay testdata/xds-overlay/unmatched.yaml: 2 problems") {
		t.Errorf("check of an overlay that matches nothing: %v, want it to fail counting 2 problems", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	for i, want := range []string{
		`testdata/xds-overlay/unmatched.yaml:2: overlays[0]: matches nothing: path[0]: no descriptor with key "httproute/default/web/rule/0/match/0/*"`,
		`testdata/xds-overlay/unmatched.yaml:9: overlays[1]: matches nothing: no rules of domain "default/eg/https"`,
	} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("stderr line %d: want it to start %q; stderr:\n%s", i+1, want, stderr.String())
		}
	}
	if stdout.Len() > 0 {
		t.Errorf("stdout of a failed check: %s", stdout.String())
	}
}
