package config_test

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// egRules is what Envoy Gateway pushes for a BackendTrafficPolicy on
// HTTPRoute default/api with one rule (a Distinct x-user-id header, 100
// a minute) and one named rule (100 a second on the route), rendered as
// the xDS client renders a RateLimitConfig.
const egRules = `
domain: default/eg/http
descriptors:
  - key: httproute/default/api/rule/0/match/0/*
    value: httproute/default/api/rule/0/match/0/*
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: MINUTE, requests_per_unit: 100}
  - key: httproute/default/api/rule/1/match/-1/*
    value: httproute/default/api/rule/1/match/-1/*
    rate_limit: {unit: SECOND, requests_per_unit: 100, name: api-total}
`

// pushed is egRules as the documents of a push: YAML nodes, as the xDS
// client hands them over.
func pushed(t *testing.T) []config.File {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(egRules), &doc); err != nil {
		t.Fatal(err)
	}
	return []config.File{{Name: `RateLimitConfig "default/eg/http"`, Data: []byte(egRules), Root: doc.Content[0]}}
}

func parseOverlay(t *testing.T, text string) *config.Overlay {
	t.Helper()
	ov, err := config.ParseOverlay("overlay.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return ov
}

// applyOverlay applies text to egRules and parses the result.
func applyOverlay(t *testing.T, text string) (*limits.Ruleset, *config.Overlaid) {
	t.Helper()
	a := parseOverlay(t, text).Apply(pushed(t))
	rs, err := config.ParseGenerated(a.Files, config.Options{})
	if err = a.Blame(err); err != nil {
		t.Fatal(err)
	}
	return rs, a
}

// limitsOf is the limits of the rule at path (key=value of each level)
// of domain default/eg/http, one string each.
func limitsOf(t *testing.T, rs *limits.Ruleset, path ...string) []string {
	t.Helper()
	rules := rs.Rules("default/eg/http")
	var r *limits.Rule
	for _, step := range path {
		key, value, _ := strings.Cut(step, "=")
		r = nil
		for _, c := range rules {
			if c.Key == key && c.Value == value {
				r = c
			}
		}
		if r == nil {
			t.Fatalf("no rule %s", strings.Join(path, " / "))
		}
		rules = r.Children
	}
	var out []string
	for _, l := range r.Limits {
		out = append(out, l.String())
	}
	return out
}

const (
	route0 = "httproute/default/api/rule/0/match/0/*=httproute/default/api/rule/0/match/0/*"
	route1 = "httproute/default/api/rule/1/match/-1/*=httproute/default/api/rule/1/match/-1/*"
)

// TestOverlayByPath: an entry that names a descriptor by its key and
// value at each level sets the algorithm of the pushed limit, keeping its
// unit and count, and adds a limit beside it.
func TestOverlayByPath(t *testing.T) {
	rs, a := applyOverlay(t, `
overlays:
  - domain: default/eg/http
    path:
      - {key: httproute/default/api/rule/0/match/0/*, value: httproute/default/api/rule/0/match/0/*}
      - {key: rule-0-match-0}
    rate_limit: {algorithm: sliding_window}
    add_rate_limits:
      - {algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 10}
    shadow_mode: true
`)
	if len(a.Unmatched) != 0 {
		t.Errorf("unmatched: %v", a.Unmatched)
	}
	got := strings.Join(limitsOf(t, rs, route0, "rule-0-match-0"), "; ")
	if want := "sliding_window 100 per 1m0s; token_bucket 5 per 1s, burst 10"; !strings.HasPrefix(got, "sliding_window 100 per 1m0s") || !strings.Contains(got, "token_bucket 5 per 1s, burst 10") {
		t.Errorf("overlaid limits %q, want %q", got, want)
	}
	if got := limitsOf(t, rs, route1); len(got) != 1 || !strings.HasPrefix(got[0], "fixed_window 100 per 1s") {
		t.Errorf("the other route's limits %q, want the pushed fixed window", got)
	}
}

// TestOverlayByName: an entry that names the pushed limit finds it
// wherever it is; a domain entry sets the failure mode.
func TestOverlayByName(t *testing.T) {
	rs, a := applyOverlay(t, `
overlays:
  - domain: default/eg/http
    name: api-total
    rate_limit: {algorithm: token_bucket, burst: 300}
  - domain: default/eg/http
    failure_mode: closed
`)
	if len(a.Unmatched) != 0 {
		t.Errorf("unmatched: %v", a.Unmatched)
	}
	if got := limitsOf(t, rs, route1); len(got) != 1 || !strings.HasPrefix(got[0], "token_bucket 100 per 1s, burst 300") {
		t.Errorf("limits of the rule named api-total: %q, want a token bucket of burst 300", got)
	}
	if got := rs.FailureMode("default/eg/http", limits.FailDefault); got != limits.FailClosed {
		t.Errorf("failure mode %v, want closed", got)
	}
}

// TestOverlayCalendar: an overlay puts a pushed limit on the calendar,
// as Envoy Gateway cannot say, and adds a calendar month beside it.
func TestOverlayCalendar(t *testing.T) {
	rs, a := applyOverlay(t, `
overlays:
  - domain: default/eg/http
    name: api-total
    rate_limit: {unit: day, calendar: true, time_zone: America/New_York}
    add_rate_limits:
      - {unit: month, requests_per_unit: 1000, calendar: true, time_zone: Europe/Berlin, reset_day: 15}
`)
	if len(a.Unmatched) != 0 {
		t.Errorf("unmatched: %v", a.Unmatched)
	}
	got := strings.Join(limitsOf(t, rs, route1), "; ")
	for _, want := range []string{"fixed_window 100 per calendar day in America/New_York", "fixed_window 1000 per calendar month in Europe/Berlin/15"} {
		if !strings.Contains(got, want) {
			t.Errorf("overlaid limits %q, want one starting %q", got, want)
		}
	}
}

// TestOverlayReservation: an overlay makes a pushed limit reserve each
// request's hits under its id, which Envoy Gateway cannot say.
func TestOverlayReservation(t *testing.T) {
	rs, a := applyOverlay(t, `
overlays:
  - domain: default/eg/http
    name: api-total
    hold_key: request_id
    rate_limit: {release_after: 5m}
`)
	if len(a.Unmatched) != 0 {
		t.Errorf("unmatched: %v", a.Unmatched)
	}
	if got := strings.Join(limitsOf(t, rs, route1), "; "); !strings.Contains(got, "reservations released after 5m0s") {
		t.Errorf("overlaid limits %q, want them released after 5m0s", got)
	}
}

// TestOverlayChecksum: the rules' checksum changes with the overlay, so
// an overlay edit is a change of rules.
func TestOverlayChecksum(t *testing.T) {
	sums := map[string]bool{}
	for _, text := range []string{
		"overlays: []",
		"overlays: [{domain: default/eg/http, failure_mode: closed}]",
		"overlays: [{domain: default/eg/http, failure_mode: open}]",
	} {
		rs, _ := applyOverlay(t, text)
		sums[rs.Checksum] = true
	}
	if len(sums) != 3 {
		t.Errorf("%d checksums for 3 overlays, want 3", len(sums))
	}
}

// TestOverlayUnmatched: an entry that matches nothing is reported with
// the overlay file, the entry's line and path, and why.
func TestOverlayUnmatched(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"domain", "overlays:\n  - domain: default/eg/https\n    failure_mode: closed\n",
			`overlay.yaml:2: overlays[0]: matches nothing: no rules of domain "default/eg/https"`},
		{"top level", "overlays:\n  - domain: default/eg/http\n    path: [{key: rule-0-match-0}]\n    rate_limit: {algorithm: sliding_window}\n",
			`overlay.yaml:2: overlays[0]: matches nothing: path[0]: no descriptor with key "rule-0-match-0" and no value at the top level of domain "default/eg/http"`},
		{"second level", "overlays:\n  - domain: default/eg/http\n    failure_mode: closed\n  - domain: default/eg/http\n    path:\n      - {key: httproute/default/api/rule/0/match/0/*, value: httproute/default/api/rule/0/match/0/*}\n      - {key: rule-0-match-1}\n    rate_limit: {algorithm: sliding_window}\n",
			`overlay.yaml:4: overlays[1]: matches nothing: path[1]: no descriptor with key "rule-0-match-1" and no value under descriptors[0] of domain "default/eg/http"`},
		{"value", "overlays:\n  - domain: default/eg/http\n    path: [{key: httproute/default/api/rule/0/match/0/*}]\n    shadow_mode: true\n",
			`overlay.yaml:2: overlays[0]: matches nothing: path[0]: no descriptor with key "httproute/default/api/rule/0/match/0/*" and no value at the top level`},
		{"name", "overlays:\n  - domain: default/eg/http\n    name: api\n    rate_limit: {algorithm: sliding_window}\n",
			`overlay.yaml:2: overlays[0]: matches nothing: no rate_limit of domain "default/eg/http" is named "api"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := parseOverlay(t, tt.give).Apply(pushed(t))
			if len(a.Unmatched) != 1 || !strings.HasPrefix(a.Unmatched[0].Error(), tt.want) {
				t.Errorf("unmatched %v, want one starting %q", a.Unmatched, tt.want)
			}
		})
	}
}

// TestOverlayBad: an overlay file that cannot be applied anywhere is
// refused, every problem naming the file, line and path.
func TestOverlayBad(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"not yaml", "overlays: [", "overlay.yaml:1: invalid YAML"},
		{"top field", "overlay: []\n", "overlay.yaml:1: overlay: unknown field"},
		{"no domain", "overlays:\n  - failure_mode: closed\n", "overlay.yaml:2: overlays[0].domain: required"},
		{"nothing set", "overlays:\n  - domain: d\n    name: n\n", "overlay.yaml:2: overlays[0]: sets nothing"},
		{"no target", "overlays:\n  - domain: d\n    rate_limit: {algorithm: sliding_window}\n", "overlay.yaml:2: overlays[0]: sets descriptor fields but says not which descriptor"},
		{"path and name", "overlays:\n  - domain: d\n    name: n\n    path: [{key: k}]\n    shadow_mode: true\n", "overlays[0].name: use path or name, not both"},
		{"empty path", "overlays:\n  - domain: d\n    path: []\n    shadow_mode: true\n", "overlay.yaml:3: overlays[0].path: must not be empty"},
		{"path key", "overlays:\n  - domain: d\n    path: [{value: v}]\n    shadow_mode: true\n", "overlay.yaml:3: overlays[0].path[0].key: required"},
		{"entry field", "overlays:\n  - domain: d\n    name: n\n    descriptors: []\n", "overlay.yaml:4: overlays[0].descriptors: unknown field"},
		{"limit field", "overlays:\n  - domain: d\n    name: n\n    rate_limit: {algoritm: sliding_window}\n", "overlay.yaml:4: overlays[0].rate_limit.algoritm: unknown field"},
		{"algorithm", "overlays:\n  - domain: d\n    name: n\n    rate_limit: {algorithm: sliding}\n", "overlay.yaml:4: overlays[0].rate_limit.algorithm: unknown algorithm"},
		{"failure mode", "overlays:\n  - domain: d\n    failure_mode: maybe\n", "overlay.yaml:3: overlays[0].failure_mode:"},
		{"add limits", "overlays:\n  - domain: d\n    name: n\n    add_rate_limits: {unit: day}\n", "overlay.yaml:4: overlays[0].add_rate_limits: want a list"},
		{"twice", "overlays:\n  - {domain: d, name: n, shadow_mode: true}\n  - {domain: d, name: n, detailed_metric: true}\n", "overlay.yaml:3: overlays[1]: matches what overlays[0] matches"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.ParseOverlay("overlay.yaml", []byte(tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestOverlayBlame: fields an overlay sets that do not fit the pushed
// limit fail as in a rule file, and the problem names the overlay entry.
func TestOverlayBlame(t *testing.T) {
	a := parseOverlay(t, "overlays:\n  - domain: default/eg/http\n    name: api-total\n    rate_limit: {burst: 10}\n").Apply(pushed(t))
	_, err := config.ParseGenerated(a.Files, config.Options{})
	err = a.Blame(err)
	want := `RateLimitConfig "default/eg/http": descriptors[1].rate_limit.burst: applies only to token_bucket and leaky_bucket, not fixed_window (with overlay.yaml:2 overlays[0])`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestOverlayOverride: an entry sets how Envoy's descriptor.limit is
// counted (Envoy Gateway's limit.fromMetadata) on a pushed descriptor,
// and, without path or name, for the domain.
func TestOverlayOverride(t *testing.T) {
	rs, a := applyOverlay(t, `
overlays:
  - domain: default/eg/http
    path:
      - {key: httproute/default/api/rule/0/match/0/*, value: httproute/default/api/rule/0/match/0/*}
      - {key: rule-0-match-0}
    override: {algorithm: token_bucket, burst: 20}
  - domain: default/eg/http
    override: {algorithm: sliding_window, charge: usage}
`)
	if len(a.Unmatched) != 0 {
		t.Errorf("unmatched: %v", a.Unmatched)
	}
	k0 := "httproute/default/api/rule/0/match/0/*"
	entries := []limits.Entry{{Key: k0, Value: k0}, {Key: "rule-0-match-0", Value: "tenant-a"}}
	if got, want := rs.OverrideSpec("default/eg/http", entries), (limits.OverrideSpec{Algorithm: limits.TokenBucket, Burst: 20}); got == nil || *got != want {
		t.Errorf("the descriptor's override %+v, want %+v", got, want)
	}
	route := []limits.Entry{{Key: "httproute/default/api/rule/1/match/-1/*", Value: "httproute/default/api/rule/1/match/-1/*"}}
	if got, want := rs.OverrideSpec("default/eg/http", route), (limits.OverrideSpec{Algorithm: limits.SlidingWindow, Charge: limits.ChargeUsage}); got == nil || *got != want {
		t.Errorf("the domain's override %+v, want %+v", got, want)
	}
	// The pushed limits stay as they were.
	if got := limitsOf(t, rs, route0, "rule-0-match-0"); len(got) != 1 || !strings.HasPrefix(got[0], "fixed_window 100 per 1m0s") {
		t.Errorf("limits %q, want the pushed fixed window", got)
	}
}

// TestOverlayBadOverride: an override the overlay cannot give anywhere is
// refused with the overlay, naming file, line and path.
func TestOverlayBadOverride(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"unit", "overlays:\n  - domain: d\n    override: {algorithm: sliding_window, unit: hour}\n", "overlay.yaml:3: overlays[0].override.unit: comes with each request"},
		{"algorithm", "overlays:\n  - domain: d\n    override: {algorithm: concurrency}\n", "overlay.yaml:3: overlays[0].override.algorithm: concurrency counts requests in flight"},
		{"burst", "overlays:\n  - domain: d\n    name: n\n    override: {burst: 5}\n", "overlay.yaml:4: overlays[0].override.burst: applies only to token_bucket and leaky_bucket, not fixed_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.ParseOverlay("overlay.yaml", []byte(tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
