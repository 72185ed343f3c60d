package main

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheck: check fails with every problem on stderr (exit 1), or
// prints the rules' tree on stdout; its flags reach the loader.
// internal/ruletext's tests have the text of each.
func TestCheck(t *testing.T) {
	// testdata/merge has one domain in two files, which only
	// --merge-domains accepts.
	stdout, stderr, err := runCLI(t, nil, "check", "--config", "testdata/merge")
	if err == nil || err.Error() != "invalid config testdata/merge: 1 problem" || stdout != "" ||
		!strings.HasPrefix(stderr, `testdata/merge/b.yaml:1: domain: domain "shared" is already defined`) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("check of a domain in two files: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	stdout, stderr, err = runCLI(t, nil, "check", "--config", "testdata/merge", "--merge-domains")
	want := `domain shared
├── a, any value: fixed_window 1 per 1s  # a.yaml:3
└── b, any value: fixed_window 2 per 1s  # b.yaml:3

ok: 1 domain, 2 rules, 2 limits in 2 files
`
	if err != nil || stdout != want || stderr != "" {
		t.Errorf("check --merge-domains: %v\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", err, stdout, want, stderr)
	}

	// A path without rule files fails, naming the flag that accepts it.
	dir := t.TempDir()
	_, _, err = runCLI(t, nil, "check", "--config", dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.HasSuffix(err.Error(), "no rule files found (want *.yaml or *.yml files; names that start with a dot are skipped); pass --allow-empty-rules if the server is meant to run without rules") {
		t.Errorf("check of a directory without rule files: %v", err)
	}
	if stdout, _, err = runCLI(t, nil, "check", "--config", dir, "--allow-empty-rules"); err != nil || !strings.HasSuffix(stdout, "ok: 0 domains, 0 rules, 0 limits in 0 files\n") {
		t.Errorf("check --allow-empty-rules: %v\n%s", err, stdout)
	}

	// --xds-overlay reads --config as RateLimitConfigs, with the overlay.
	stdout, _, err = runCLI(t, nil, "check", "--config", "testdata/merge", "--xds-overlay", "testdata/missing.yaml")
	if err == nil || !strings.Contains(err.Error(), "read overlay: open testdata/missing.yaml") || stdout != "" {
		t.Errorf("check --xds-overlay of a missing overlay: %v\n%s", err, stdout)
	}
	if _, _, err = runCLI(t, nil, "check", "--config", "testdata/merge", "extra"); err == nil || err.Error() != `check: unexpected argument "extra"` {
		t.Errorf("check with an argument: %v", err)
	}
}

// TestSubcommandInheritsConfig: `docker run IMAGE check` and `explain`
// read the rules the entrypoint's --config (which comes before the
// command) or RLS_CONFIG names, as the server would; the entrypoint's
// flag beats the variable, a --config of the command's own beats both,
// and the server's other flags are not theirs.
func TestSubcommandInheritsConfig(t *testing.T) {
	rules, err := filepath.Abs("../../config")
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	write(t, filepath.Join(other, "r.yaml"), "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	entry := []string{"--config=" + rules + "/", "--grpc-addr=0.0.0.0:8081", "--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"}
	env := []string{"RLS_CONFIG=" + rules}
	tests := []struct {
		name string
		env  []string
		give []string
		want string
	}{
		{"check", nil, append(slices.Clone(entry), "check"), "ok: 1 domain"},
		{"explain", nil, append(slices.Clone(entry), "explain", "--domain", "edge", "--descriptor", "tenant=acme,user=42"), "token_bucket"},
		{"check's own flags", nil, append(slices.Clone(entry), "check", "--merge-domains"), "ok: 1 domain"},
		{"check's own --config wins", nil, append(slices.Clone(entry), "check", "--config", other), "domain other"},
		{"from the environment", env, []string{"check"}, "ok: 1 domain"},
		{"the entrypoint's flag beats the environment", env, []string{"--config=" + other, "check"}, "domain other"},
		{"check's own flag beats both", env, []string{"--config=/nowhere", "check", "--config", other}, "domain other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runCLI(t, tt.env, tt.give...)
			if err != nil || !strings.Contains(stdout, tt.want) {
				t.Errorf("%q ratelimit-sidecar %q: %v, want %q in:\n%s%s", tt.env, tt.give, err, tt.want, stdout, stderr)
			}
		})
	}
	// A flag value that happens to read "check" is not a subcommand.
	if _, err := parseFlags([]string{"--config", "check"}, noEnv, io.Discard); err != nil {
		t.Errorf("--config check: %v", err)
	}
}
