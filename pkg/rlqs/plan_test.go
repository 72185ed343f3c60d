package rlqs_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// TestServes asks, without a server, whether a bucket is served from its
// limit under a server's options, as examples/rlqs does.
func TestServes(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(planRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give map[string]string
		o    rlqs.Options
		want string // "" for served, else a part of the error
	}{
		{"token bucket", map[string]string{"route": "api"}, rlqs.Options{}, ""},
		// A minute's margin reserves more than half the burst.
		{"token bucket, long margin", map[string]string{"route": "api"}, rlqs.Options{Margin: time.Minute}, "burst 600 is too small"},
		{"sliding log", map[string]string{"log": "x"}, rlqs.Options{}, "sliding_log cannot be served"},
		{"short window", map[string]string{"fast": "x"}, rlqs.Options{}, "too short"},
		{"no rule", map[string]string{"other": "x"}, rlqs.Options{}, "no_rule"},
		{"empty id", map[string]string{}, rlqs.Options{}, "must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := rlqs.Serves(rs, tt.o, "rlqs", tt.give)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Serves = %v, want served", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Serves = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestUnservedTakesOptions: check --rlqs lists rules under the server's
// options, without building a server: a margin long enough to reserve
// more than half a token bucket's burst makes it unserved.
func TestUnservedTakesOptions(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(planRules)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const route = "rules.yaml:4 descriptors[0]: burst 600 is too small"
	if got := rlqs.Unserved(rs, rlqs.Options{}); len(got) != 2 || slices.ContainsFunc(got, func(u string) bool { return strings.HasPrefix(u, route) }) {
		t.Errorf("Unserved with the default margin = %q, want the sliding log and the short window only", got)
	}
	if got := rlqs.Unserved(rs, rlqs.Options{Margin: time.Minute}); len(got) != 3 || !strings.HasPrefix(got[0], route) {
		t.Errorf("Unserved with a minute's margin = %q, want the token bucket's burst too small first", got)
	}
}

// TestUnserved lists the rules RLQS cannot serve from a limit, with
// where they are and why, which the server logs once per ruleset.
func TestUnserved(t *testing.T) {
	rs, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`
domain: rlqs
descriptors:
  - key: log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 10}
  - key: small
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 20}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {algorithm: leaky_bucket, unit: minute, requests_per_unit: 60, burst: 30}
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1000, calendar: true}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := rlqs.Unserved(rs, rlqs.Options{})
	want := []string{
		"rules.yaml:4 descriptors[0]: algorithm sliding_log cannot be served exactly over RLQS",
		"rules.yaml:6 descriptors[1]: burst 20 is too small to serve over RLQS",
		"rules.yaml:13 descriptors[2].descriptors[1]: window 1s is too short for Envoy's whole-second assignments",
		"rules.yaml:15 descriptors[3]: a calendar window cannot be served over RLQS yet",
	}
	if len(got) != len(want) {
		t.Fatalf("Unserved = %q; want %d entries like %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("Unserved[%d] = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// planRules are rules of each kind Serves and Unserved tell apart.
const planRules = `
domain: rlqs
descriptors:
  - key: route
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 600, burst: 600}
  - key: log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 10}
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 5}
`
