package main

import (
	"strings"
	"testing"
)

// TestCheckRLQS: check --rlqs adds, after the rules, the rules RLQS does
// not serve from their limits (internal/ruletext's TestUnserved has the
// lines); check alone does not.
func TestCheckRLQS(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{{[]string{"--rlqs"}, true}, {nil, false}} {
		var stdout, stderr strings.Builder
		if err := runCheck(append([]string{"--config", "testdata/good"}, tt.args...), &stdout, &stderr); err != nil {
			t.Fatalf("check %v: %v\n%s", tt.args, err, stderr.String())
		}
		got := strings.Contains(stdout.String(), "\nrlqs: 3 rules not served from their limits\n  testdata/good/rules.yaml:5 descriptors[0]:")
		if got != tt.want || strings.Contains(stdout.String(), "rlqs") != tt.want {
			t.Errorf("check %v printed:\n%s\nwant RLQS lines: %v", tt.args, stdout.String(), tt.want)
		}
	}
}
