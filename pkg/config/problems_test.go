package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// TestProblemsBounded: a file of thousands of bad descriptors, or of one
// huge bad value, makes an error of bounded size: the first
// config.MaxProblems problems and a count of the rest, each message cut.
// The error goes to the log line of a refused reload or push, and to
// /debug/config; before, it listed every problem in full (a rejected
// 100,000-descriptor push logged megabytes in one line).
func TestProblemsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	const bad = 3 * config.MaxProblems
	for i := range bad {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", i)
	}
	fmt.Fprintf(&b, "  - key: huge\n    rate_limit: {unit: %s, requests_per_unit: 1}\n", strings.Repeat("x", 1<<20))
	_, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(b.String())}}, config.Options{})
	problems := config.Problems(err)
	if len(problems) != config.MaxProblems+1 {
		t.Fatalf("%d problems listed, want the first %d and a count of the rest", len(problems), config.MaxProblems)
	}
	if got, want := problems[config.MaxProblems].Error(), fmt.Sprintf("rules.yaml: %d more problems not listed", bad+1-config.MaxProblems); got != want {
		t.Errorf("last problem %q, want %q", got, want)
	}
	if n := len(err.Error()); n > 64<<10 {
		t.Errorf("the error is %d bytes, want at most 64 KiB", n)
	}

	// One problem whose value is 1 MiB: its message is cut.
	_, err = config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(
		"domain: edge\ndescriptors:\n  - key: huge\n    rate_limit: {unit: " + strings.Repeat("x", 1<<20) + ", requests_per_unit: 1}\n")}}, config.Options{})
	if err == nil || len(err.Error()) > 2<<10 || !strings.Contains(err.Error(), "rate_limit.unit: unknown unit") {
		t.Errorf("a 1 MiB bad value: error of %d bytes, want at most 2 KiB naming the path", len(fmt.Sprint(err)))
	}
}
