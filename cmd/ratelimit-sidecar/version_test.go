package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestVersionCommand: version, -version and --version print the version
// on the first line, as --version always did, then the commit when it is
// known, the Go version and the platform. `version` failed with
// "unexpected argument".
func TestVersionCommand(t *testing.T) {
	for _, give := range [][]string{
		{"version"},
		{"--version"},
		{"-version"},
		{"--config=/etc/ratelimit-sidecar/", "version"},
	} {
		t.Run(strings.Join(give, " "), func(t *testing.T) {
			stdout, _, err := runCLI(t, []string{"RLS_MAX_HITS_ADDEND=lots"}, give...)
			if err != nil {
				t.Fatalf("err = %v, want nil (the environment's settings do not matter to version)", err)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "ratelimit-sidecar ") || len(lines[0]) <= len("ratelimit-sidecar ") {
				t.Errorf("first line %q, want ratelimit-sidecar and the version", lines[0])
			}
			for _, want := range []string{"go       " + runtime.Version(), "platform " + runtime.GOOS + "/" + runtime.GOARCH} {
				if !strings.Contains(stdout, "\n"+want+"\n") {
					t.Errorf("stdout lacks the line %q:\n%s", want, stdout)
				}
			}
		})
	}
}
