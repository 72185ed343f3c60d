package main

import (
	"strings"
	"testing"
)

// TestExplain: explain prints each descriptor's explanation on stdout
// (internal/ruletext's tests have the text), its flags reach the loader
// and the keys, and a request it cannot explain fails (exit 1) with one
// line and nothing printed.
func TestExplain(t *testing.T) {
	stdout, stderr, err := runCLI(t, nil, "explain", "--config", "testdata/merge", "--merge-domains", "--domain", "shared",
		"--descriptor", "a=1", "--descriptor", "b=2", "--key-prefix", "prod:")
	want := `descriptor 1: a=1
  entries[0] a=1: matched descriptors[0] (a, any value) at testdata/merge/a.yaml:3 by any value
  result: reached descriptors[0] (a, any value) at the last entry; its limit applies
  limit: fixed_window 1 per 1s
    key: prod:{6:shared1:a1:1}14:fixed_window/1

descriptor 2: b=2
  entries[0] b=2: matched descriptors[0] (b, any value) at testdata/merge/b.yaml:3 by any value
  result: reached descriptors[0] (b, any value) at the last entry; its limit applies
  limit: fixed_window 2 per 1s
    key: prod:{6:shared1:b1:2}14:fixed_window/1
`
	if err != nil || stdout != want || stderr != "" {
		t.Errorf("explain: %v\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", err, stdout, want, stderr)
	}

	tests := []struct {
		name       string
		give       []string
		wantErr    string
		wantStderr string // a prefix; "" for none
	}{
		{"missing --domain", []string{"--descriptor", "a=1"}, "explain: --domain is required", ""},
		{"missing --descriptor", []string{"--domain", "shared"}, "explain: at least one --descriptor is required", ""},
		{"bad --descriptor", []string{"--domain", "shared", "--descriptor", "a=1,b"}, `invalid value "a=1,b" for flag -descriptor: entry 1 "b" has no '='`, ""},
		{"extra argument", []string{"--domain", "shared", "--descriptor", "a=1", "c=d"}, `explain: unexpected argument "c=d"`, ""},
		{"invalid config", []string{"--domain", "shared", "--descriptor", "a=1", "--merge-domains=false"}, "invalid config testdata/merge: 1 problem", "testdata/merge/b.yaml:1: domain: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runCLI(t, nil, append([]string{"explain", "--config", "testdata/merge"}, tt.give...)...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("explain returned %v, want an error with %q", err, tt.wantErr)
			}
			if stdout != "" || !strings.HasPrefix(stderr, tt.wantStderr) || tt.wantStderr == "" && stderr != "" {
				t.Errorf("stdout:\n%s\nstderr:\n%s\nwant stderr to start %q", stdout, stderr, tt.wantStderr)
			}
		})
	}
}
