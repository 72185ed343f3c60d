package config_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// parsePaths reads each path with ReadFiles and parses them together, in
// order, as one config.
func parsePaths(t *testing.T, paths []string, opts config.Options) (*limits.Ruleset, error) {
	t.Helper()
	var files []config.File
	for _, p := range paths {
		fs, err := config.ReadFiles(p)
		if err != nil {
			t.Fatalf("ReadFiles(%q): %v", p, err)
		}
		files = append(files, fs...)
	}
	return config.Parse(files, opts)
}

// TestLoadRejects checks each bad file alone: it reports exactly one
// problem, as a *config.Error, written as file:line: path: reason.
func TestLoadRejects(t *testing.T) {
	tests := []struct {
		give []string // files parsed together, in order
		want string   // substring of the one problem
	}{
		{
			give: []string{"testdata/calendar_unknown_zone.bad.yaml"},
			want: `testdata/calendar_unknown_zone.bad.yaml:8: descriptors[0].rate_limit.time_zone: unknown time zone "Europe/Berln"`,
		},
		{
			give: []string{"testdata/calendar_domain_zone.bad.yaml"},
			want: `testdata/calendar_domain_zone.bad.yaml:2: time_zone: unknown time zone "Mars/Olympus_Mons"`,
		},
		{
			give: []string{"testdata/calendar_hour.bad.yaml"},
			want: "testdata/calendar_hour.bad.yaml:7: descriptors[0].rate_limit.calendar: a calendar window needs a unit of day, week, month or year, not hour",
		},
		{
			give: []string{"testdata/calendar_bucket.bad.yaml"},
			want: "testdata/calendar_bucket.bad.yaml:8: descriptors[0].rate_limit.calendar: a calendar window is counted as a fixed_window, not token_bucket",
		},
		{
			give: []string{"testdata/calendar_zone_without.bad.yaml"},
			want: "testdata/calendar_zone_without.bad.yaml:7: descriptors[0].rate_limit.time_zone: applies only with calendar: true",
		},
		{
			give: []string{"testdata/calendar_reset_day_unit.bad.yaml"},
			want: "testdata/calendar_reset_day_unit.bad.yaml:8: descriptors[0].rate_limit.reset_day: applies only to unit month, not day",
		},
		{
			give: []string{"testdata/calendar_override_bucket.bad.yaml"},
			want: "testdata/calendar_override_bucket.bad.yaml:6: descriptors[0].override.calendar: a calendar window is counted as a fixed_window of one unit, not token_bucket over 1",
		},
		{
			give: []string{"testdata/calendar_reset_day.bad.yaml"},
			want: "testdata/calendar_reset_day.bad.yaml:8: descriptors[0].rate_limit.reset_day:",
		},
		{
			give: []string{"testdata/unknown_top_field.bad.yaml"},
			want: "testdata/unknown_top_field.bad.yaml:2: descriptor: unknown field",
		},
		{
			give: []string{"testdata/alias_bomb.bad.yaml"},
			want: "testdata/alias_bomb.bad.yaml:10: more than 1048576 YAML nodes reached through aliases",
		},
		{
			give: []string{"testdata/too_deep.bad.yaml"},
			want: "testdata/too_deep.bad.yaml:65: nested more than 64 levels deep",
		},
		{
			give: []string{"testdata/unknown_descriptor_field.bad.yaml"},
			want: "testdata/unknown_descriptor_field.bad.yaml:4: descriptors[0].ratelimit: unknown field",
		},
		{
			give: []string{"testdata/unknown_rate_limit_field.bad.yaml"},
			want: "testdata/unknown_rate_limit_field.bad.yaml:6: descriptors[0].rate_limit.requestsperunit: unknown field",
		},
		{
			give: []string{"testdata/missing_unit.bad.yaml"},
			want: "testdata/missing_unit.bad.yaml:5: descriptors[0].rate_limit.unit: required",
		},
		{
			give: []string{"testdata/invalid_unit.bad.yaml"},
			want: `testdata/invalid_unit.bad.yaml:8: descriptors[0].descriptors[0].rate_limit.unit: unknown unit "fortnight"`,
		},
		{
			give: []string{"testdata/unlimited_with_unit.bad.yaml"},
			want: "testdata/unlimited_with_unit.bad.yaml:6: descriptors[0].rate_limit.unit: must not be set when unlimited is true",
		},
		{
			give: []string{"testdata/unlimited_in_rate_limits.bad.yaml"},
			want: "testdata/unlimited_in_rate_limits.bad.yaml:5: descriptors[0].rate_limits[0].unlimited: unlimited goes in rate_limit",
		},
		{
			give: []string{"testdata/burst_below_one.bad.yaml"},
			want: "testdata/burst_below_one.bad.yaml:8: descriptors[0].rate_limit.burst: must be at least 1",
		},
		{
			give: []string{"testdata/lease_sliding_log.bad.yaml"},
			want: "testdata/lease_sliding_log.bad.yaml:8: descriptors[0].rate_limit.lease: applies only to fixed_window, sliding_window, token_bucket or leaky_bucket, not sliding_log",
		},
		{
			give: []string{"testdata/concurrency_no_hold_key.bad.yaml"},
			want: "testdata/concurrency_no_hold_key.bad.yaml:3: descriptors[0].hold_key: required with algorithm concurrency: the descriptor entry that names the request (Envoy: x-request-id), by which its stream-end call frees its slot",
		},
		{
			give: []string{"testdata/hold_key_without_concurrency.bad.yaml"},
			want: "testdata/hold_key_without_concurrency.bad.yaml:4: descriptors[0].hold_key: applies only to a rule with a concurrency limit",
		},
		{
			give: []string{"testdata/release_after_sliding_log.bad.yaml"},
			want: "testdata/release_after_sliding_log.bad.yaml:9: descriptors[0].rate_limit.release_after: applies only to fixed_window, sliding_window, token_bucket or leaky_bucket, not sliding_log",
		},
		{
			give: []string{"testdata/release_after_no_hold_key.bad.yaml"},
			want: "testdata/release_after_no_hold_key.bad.yaml:3: descriptors[0].hold_key: required with release_after: the descriptor entry that names the request (Envoy: x-request-id), by which its stream-end call settles its reservation",
		},
		{
			give: []string{"testdata/release_after_not_a_duration.bad.yaml"},
			want: `testdata/release_after_not_a_duration.bad.yaml:5: descriptors[0].rate_limit.release_after: want a duration such as 90s or 5m, got "5 minutes"`,
		},
		{
			give: []string{"testdata/concurrency_too_many.bad.yaml"},
			want: "testdata/concurrency_too_many.bad.yaml:3: descriptors[0]: a concurrency limit of 20000 requests in flight; at most 10000",
		},
		{
			give: []string{"testdata/lease_unlimited.bad.yaml"},
			want: "testdata/lease_unlimited.bad.yaml:6: descriptors[0].rate_limit.lease: must not be set when unlimited is true",
		},
		{
			give: []string{"testdata/lease_zero.bad.yaml"},
			want: "testdata/lease_zero.bad.yaml:7: descriptors[0].rate_limits[0].lease: must be at least 1",
		},
		{
			give: []string{"testdata/burst_not_bucket.bad.yaml"},
			want: "testdata/burst_not_bucket.bad.yaml:7: descriptors[0].rate_limit.burst: applies only to token_bucket and leaky_bucket, not fixed_window",
		},
		{
			give: []string{"testdata/unknown_algorithm.bad.yaml"},
			want: `testdata/unknown_algorithm.bad.yaml:5: descriptors[0].rate_limit.algorithm: unknown algorithm "gcra"`,
		},
		{
			give: []string{"testdata/unit_multiplier_zero.bad.yaml"},
			want: "testdata/unit_multiplier_zero.bad.yaml:6: descriptors[0].rate_limit.unit_multiplier: must be at least 1",
		},
		{
			give: []string{"testdata/duplicate_key.bad.yaml"},
			want: `testdata/duplicate_key.bad.yaml:6: descriptors[1]: duplicate descriptor key "user" value "alice" at this level (first at testdata/duplicate_key.bad.yaml:3)`,
		},
		{
			give: []string{"testdata/duplicate_key_only.bad.yaml"},
			want: `testdata/duplicate_key_only.bad.yaml:8: descriptors[0].descriptors[1]: duplicate descriptor key "user" value ""`,
		},
		{
			give: []string{"testdata/field_twice.bad.yaml"},
			want: "testdata/field_twice.bad.yaml:6: descriptors[0].rate_limit.unit: field given twice",
		},
		{
			give: []string{"testdata/replaces_empty_name.bad.yaml"},
			want: "testdata/replaces_empty_name.bad.yaml:8: descriptors[0].rate_limit.replaces[0].name: required and must not be empty",
		},
		{
			give: []string{"testdata/replaces_self.bad.yaml"},
			want: `testdata/replaces_self.bad.yaml:9: descriptors[0].rate_limit.replaces: a limit cannot replace itself ("per_user")`,
		},
		{
			give: []string{"testdata/share_threshold_no_wildcard.bad.yaml"},
			want: `testdata/share_threshold_no_wildcard.bad.yaml:5: descriptors[0].share_threshold: needs a wildcard value (one with '*'), got "/files"`,
		},
		{
			give: []string{"testdata/charge.bad.yaml"},
			want: `testdata/charge.bad.yaml:4: descriptors[0].charge: unknown charge "tokens" (want auto, usage or admission)`,
		},
		{
			give: []string{"testdata/quota_mode.bad.yaml"},
			want: `testdata/quota_mode.bad.yaml:4: descriptors[0].quota_mode: want true or false, got "sometimes"`,
		},
		{
			give: []string{"testdata/metadata.bad.yaml"},
			want: `testdata/metadata.bad.yaml:5: descriptors[0].metadata: want a mapping, got "search"`,
		},
		{
			give: []string{"testdata/metadata_key.bad.yaml"},
			want: "testdata/metadata_key.bad.yaml:7: descriptors[0].metadata.team: keys must be strings",
		},
		{
			give: []string{"testdata/empty_domain.bad.yaml"},
			want: "testdata/empty_domain.bad.yaml:1: domain: required and must not be empty",
		},
		{
			give: []string{"testdata/missing_key.bad.yaml"},
			want: "testdata/missing_key.bad.yaml:3: descriptors[0].key: required and must not be empty",
		},
		{
			give: []string{"testdata/requests_not_number.bad.yaml"},
			want: `testdata/requests_not_number.bad.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number, got "ten"`,
		},
		{
			give: []string{"testdata/rate_limit_is_list.bad.yaml"},
			want: "testdata/rate_limit_is_list.bad.yaml:5: descriptors[0].rate_limit: want a rate limit mapping, got a list",
		},
		{
			give: []string{"testdata/descriptor_not_mapping.bad.yaml"},
			want: `testdata/descriptor_not_mapping.bad.yaml:3: descriptors[0]: want a descriptor mapping, got "user"`,
		},
		{
			// The line of the unclosed '{': yaml.v3 says the line before.
			give: []string{"testdata/invalid_yaml.bad.yaml"},
			want: "testdata/invalid_yaml.bad.yaml:4: invalid YAML: did not find expected ',' or '}'",
		},
		{
			// The line of the unclosed '[' (7); yaml.v3 says 6.
			give: []string{"testdata/unclosed_bracket.bad.yaml"},
			want: "testdata/unclosed_bracket.bad.yaml:7: invalid YAML: did not find expected ',' or ']'",
		},
		{
			// The tab's line (4); yaml.v3 says the line its scalar starts on.
			give: []string{"testdata/tab_indent.bad.yaml"},
			want: "testdata/tab_indent.bad.yaml:4: invalid YAML: found a tab character that violates indentation",
		},
		{
			give: []string{"testdata/misspelt_field.bad.yaml"},
			want: "testdata/misspelt_field.bad.yaml:6: descriptors[0].rate_limit.requests_per_unt: unknown field; did you mean requests_per_unit?",
		},
		{
			// A second document would be silently ignored otherwise.
			give: []string{"testdata/two_documents.bad.yaml"},
			want: "testdata/two_documents.bad.yaml:5: a second YAML document",
		},
		{
			give: []string{"testdata/merge_a.yaml", "testdata/duplicate_domain.bad.yaml"},
			want: `testdata/duplicate_domain.bad.yaml:1: domain: domain "shop" is already defined in testdata/merge_a.yaml (set --merge-domains to combine files)`,
		},
		{
			give: []string{"testdata/rate_limit_and_rate_limits.bad.yaml"},
			want: "testdata/rate_limit_and_rate_limits.bad.yaml:6: descriptors[0].rate_limits: use rate_limit or rate_limits, not both",
		},
		{
			give: []string{"testdata/override_unit.bad.yaml"},
			want: "testdata/override_unit.bad.yaml:6: descriptors[0].override.unit: comes with each request, in Envoy's descriptor.limit",
		},
		{
			give: []string{"testdata/override_concurrency.bad.yaml"},
			want: "testdata/override_concurrency.bad.yaml:3: override.algorithm: concurrency counts requests in flight, not a sent limit",
		},
		{
			give: []string{"testdata/override_burst_not_bucket.bad.yaml"},
			want: "testdata/override_burst_not_bucket.bad.yaml:6: descriptors[0].override.burst: applies only to token_bucket and leaky_bucket, not sliding_log",
		},
		{
			give: []string{"testdata/override_misspelt.bad.yaml"},
			want: "testdata/override_misspelt.bad.yaml:3: override.algoritm: unknown field; did you mean algorithm?",
		},
		{
			give: []string{"testdata/override_not_mapping.bad.yaml"},
			want: `testdata/override_not_mapping.bad.yaml:4: descriptors[0].override: want a mapping of how Envoy's descriptor.limit is counted (algorithm, unit_multiplier, burst, charge, calendar, time_zone, week_start, reset_day), got "token_bucket"`,
		},
		{
			give: []string{"testdata/rate_limits_same_window.bad.yaml"},
			want: "testdata/rate_limits_same_window.bad.yaml:6: descriptors[0].rate_limits[1]: same algorithm and window as another limit of this descriptor (fixed_window/60)",
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.give[len(tt.give)-1]), func(t *testing.T) {
			rs, err := parsePaths(t, tt.give, config.Options{})
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tt.want)
			}
			if rs != nil {
				t.Errorf("Parse returned a ruleset along with the error")
			}
			ps := config.Problems(err)
			if len(ps) != 1 {
				t.Errorf("got %d problems, want 1:\n%v", len(ps), err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Errorf("error %v is not a *config.Error", err)
			} else if ce.File != tt.give[len(tt.give)-1] {
				t.Errorf("Error.File = %q, want %q", ce.File, tt.give[len(tt.give)-1])
			}
		})
	}
}

// TestLoadReportsEveryProblem checks that validation goes on after a
// problem, so a file with several problems reports all of them, each as
// file:line: path: reason.
func TestLoadReportsEveryProblem(t *testing.T) {
	tests := []struct {
		give string
		want []string // file:line: path of each problem, in order
	}{
		{
			// Problems spread over the file and its nesting.
			give: "testdata/multi.bad.yaml",
			want: []string{
				"testdata/multi.bad.yaml:2: version",
				"testdata/multi.bad.yaml:6: descriptors[0].rate_limit.unit",
				"testdata/multi.bad.yaml:8: descriptors[1].key",
				"testdata/multi.bad.yaml:10: descriptors[2]",
				"testdata/multi.bad.yaml:19: descriptors[3].descriptors[0].rate_limit.burst",
				"testdata/multi.bad.yaml:22: descriptors[3].descriptors[1].share_threshold",
				"testdata/multi.bad.yaml:23: descriptors[3].descriptors[1].rate_limit.requests_per_unit",
			},
		},
		{
			// Several problems inside one rate_limit: one must not hide
			// the next.
			give: "testdata/multi_one_limit.bad.yaml",
			want: []string{
				"testdata/multi_one_limit.bad.yaml:5: descriptors[0].rate_limit.colour",
				"testdata/multi_one_limit.bad.yaml:9: descriptors[0].rate_limit.burst",
				"testdata/multi_one_limit.bad.yaml:10: descriptors[0].rate_limit.unit_multiplier",
			},
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.give), func(t *testing.T) {
			_, err := config.Load(tt.give, config.Options{})
			if err == nil {
				t.Fatal("Load succeeded, want errors")
			}
			var got []string
			for _, p := range config.Problems(err) {
				var ce *config.Error
				if !errors.As(p, &ce) {
					t.Errorf("problem %v is not a *config.Error", p)
					continue
				}
				if ce.Msg == "" {
					t.Errorf("problem %v has no reason", p)
				}
				if want := fmt.Sprintf("%s:%d: %s: %s", ce.File, ce.Line, ce.Path, ce.Msg); p.Error() != want {
					t.Errorf("problem reads %q, want the form %q", p.Error(), want)
				}
				got = append(got, fmt.Sprintf("%s:%d: %s", ce.File, ce.Line, ce.Path))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\nfull error:\n%v", diff, err)
			}
		})
	}
}

func TestMergeDomains(t *testing.T) {
	give := []string{"testdata/merge_a.yaml", "testdata/merge_b.yaml"}
	if _, err := parsePaths(t, give, config.Options{}); err == nil {
		t.Error("without MergeDomains, one domain in two files loaded; want an error")
	}
	rs, err := parsePaths(t, give, config.Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("with MergeDomains: %v", err)
	}
	var keys []string
	for _, r := range rs.Rules("shop") {
		keys = append(keys, r.Key)
	}
	if diff := cmp.Diff([]string{"user", "tenant"}, keys); diff != "" {
		t.Errorf("merged rules (-want +got):\n%s", diff)
	}
}

// TestMergeDomainsDuplicateKey checks that merging files still rejects a
// key/value that both files define at one level, as the reference does.
func TestMergeDomainsDuplicateKey(t *testing.T) {
	files := []config.File{
		{Name: "one.yaml", Data: []byte(oneRule("shop", "user"))},
		{Name: "two.yaml", Data: []byte(oneRule("shop", "user"))},
	}
	_, err := config.Parse(files, config.Options{MergeDomains: true})
	want := `two.yaml:3: descriptors[0]: duplicate descriptor key "user" value "" at this level (first at one.yaml:3)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// TestLoadDomainWithoutDescriptors: a domain with no descriptors is a
// rule: Envoy's per-request limits (descriptor.limit) apply to a domain
// that a rule file defines, so an override-only config is deliberate.
func TestLoadDomainWithoutDescriptors(t *testing.T) {
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "rules.yaml"), "domain: edge\ndescriptors: []\n")
	rs, err := config.Load(dir, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rs.HasDomain("edge") {
		t.Errorf("domains %q, want edge", rs.Domains())
	}
}

// TestLoadOverride reads how Envoy's descriptor.limit is counted: the
// domain's override, and a rule's, which holds below it too.
func TestLoadOverride(t *testing.T) {
	rs, err := config.Load("testdata/override.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := &limits.OverrideSpec{Algorithm: limits.TokenBucket, Burst: 50, Multiplier: 2, Charge: limits.ChargeAdmission}
	tests := []struct {
		give []limits.Entry
		want *limits.OverrideSpec
	}{
		{[]limits.Entry{{Key: "tenant", Value: "a"}}, tenant},
		{[]limits.Entry{{Key: "tenant", Value: "a"}, {Key: "user", Value: "u"}}, tenant},
		{[]limits.Entry{{Key: "route", Value: "r"}}, &limits.OverrideSpec{Algorithm: limits.SlidingWindow}},
		{[]limits.Entry{{Key: "other", Value: "o"}}, &limits.OverrideSpec{Algorithm: limits.SlidingWindow}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, rs.OverrideSpec("tenants", tt.give)); diff != "" {
			t.Errorf("OverrideSpec(%v) (-want +got):\n%s", tt.give, diff)
		}
	}
}

// Files merged into one domain must not say two overrides for it.
func TestMergeDomainsOverride(t *testing.T) {
	_, err := parsePaths(t, []string{"testdata/override_merge_a.yaml", "testdata/override_merge.bad.yaml"}, config.Options{MergeDomains: true})
	want := `testdata/override_merge.bad.yaml:4: override: another file of domain "tenants" sets a different override`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

// TestMergeDomainsFailureMode: files merged into one domain must agree on
// its failure_mode; one that says none takes the other's.
func TestMergeDomainsFailureMode(t *testing.T) {
	file := func(name, mode string) config.File {
		return config.File{Name: name, Data: []byte("domain: shop\n" + mode + "descriptors:\n  - key: " + name + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	}
	tests := []struct {
		name    string
		give    []config.File
		want    limits.FailureMode
		wantErr string
	}{
		{name: "agree", give: []config.File{file("a.yaml", "failure_mode: open\n"), file("b.yaml", "failure_mode: open\n")}, want: limits.FailOpen},
		{name: "one says none", give: []config.File{file("a.yaml", ""), file("b.yaml", "failure_mode: closed\n")}, want: limits.FailClosed},
		{name: "differ", give: []config.File{file("a.yaml", "failure_mode: open\n"), file("b.yaml", "failure_mode: closed\n")},
			wantErr: `b.yaml:2: failure_mode: closed, but another file of domain "shop" says open`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := config.Parse(tt.give, config.Options{MergeDomains: true})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rs.FailureMode("shop", limits.FailLocal); got != tt.want {
				t.Errorf("FailureMode = %v, want %v", got, tt.want)
			}
		})
	}
}
