package config_test

import (
	"errors"
	"fmt"
	"os"
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

func mustWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func oneRule(domain, key string) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: second, requests_per_unit: 1}\n", domain, key)
}

// mountConfigMap lays out dir as Kubernetes mounts a ConfigMap with one key,
// rules.yaml: the real file sits in a timestamped dot-directory, ..data
// links to it, and the top-level name links through ..data.
func mountConfigMap(t *testing.T, dir, stamp, rules string) {
	t.Helper()
	mustWriteFile(t, filepath.Join(dir, stamp, "rules.yaml"), rules)
	mustSymlink(t, stamp, filepath.Join(dir, "..data"))
	mustSymlink(t, filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml"))
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	mountConfigMap(t, dir, "..2026_11_22_00_00_00.123", oneRule("mounted", "user"))
	mustWriteFile(t, filepath.Join(dir, "a.yaml"), oneRule("alpha", "user"))
	mustWriteFile(t, filepath.Join(dir, "sub", "b.yml"), oneRule("beta", "user"))
	mustWriteFile(t, filepath.Join(dir, "z.yaml"), oneRule("zulu", "user"))
	// Skipped: dot-files, dot-directories, other extensions. Each would
	// break the load (bad YAML, or a duplicate domain) if it were read.
	mustWriteFile(t, filepath.Join(dir, ".hidden.yaml"), "not: [valid")
	mustWriteFile(t, filepath.Join(dir, ".git", "config.yaml"), oneRule("alpha", "user"))
	mustWriteFile(t, filepath.Join(dir, "sub", ".cache", "c.yaml"), oneRule("beta", "user"))
	mustWriteFile(t, filepath.Join(dir, "README.md"), "not: [valid")
	mustWriteFile(t, filepath.Join(dir, "rules.yaml.bak"), "not: [valid")

	rs, err := config.Load(dir, config.Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	wantFiles := []string{
		filepath.Join(dir, "a.yaml"),
		filepath.Join(dir, "rules.yaml"),
		filepath.Join(dir, "sub", "b.yml"),
		filepath.Join(dir, "z.yaml"),
	}
	if diff := cmp.Diff(wantFiles, rs.Files); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"alpha", "beta", "mounted", "zulu"}, rs.Domains()); diff != "" {
		t.Errorf("Domains (-want +got):\n%s", diff)
	}
	if got := len(rs.Rules("mounted")); got != 1 {
		t.Errorf("domain mounted has %d rules, want 1 (read once)", got)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real", "limits.yaml")
	mustWriteFile(t, target, oneRule("shop", "user"))
	link := filepath.Join(dir, "link.yaml")
	mustSymlink(t, target, link)

	tests := []struct {
		name string
		give string
	}{
		{name: "file", give: target},
		{name: "symlink to a file", give: link},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := config.Load(tt.give, config.Options{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff([]string{tt.give}, rs.Files); diff != "" {
				t.Errorf("Files (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"shop"}, rs.Domains()); diff != "" {
				t.Errorf("Domains (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadDirectoryThroughSymlink loads a config path whose last element
// is a symbolic link to a directory, as with envoyproxy/ratelimit's
// RUNTIME_ROOT convention (a "current" link swapped on deploy) or a
// hand-made "config -> config-v2" link.
func TestLoadDirectoryThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "config-v2", "limits.yaml"), oneRule("shop", "user"))
	link := filepath.Join(dir, "config")
	mustSymlink(t, "config-v2", link)

	rs, err := config.Load(link, config.Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff([]string{"shop"}, rs.Domains()); diff != "" {
		t.Errorf("Domains (-want +got):\n%s\n(files read: %q)", diff, rs.Files)
	}
}

func TestLoadMissingPath(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "nope"), config.Options{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing path: err = %v, want one wrapping os.ErrNotExist", err)
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

func TestChecksum(t *testing.T) {
	dir := t.TempDir()
	mountConfigMap(t, dir, "..2026_11_22_00_00_00.123", oneRule("shop", "user"))
	mustWriteFile(t, filepath.Join(dir, "other.yaml"), oneRule("other", "user"))
	load := func() string {
		t.Helper()
		rs, err := config.Load(dir, config.Options{})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		return rs.Checksum
	}
	// swap points ..data at a new timestamped directory, as the kubelet
	// does on a ConfigMap update.
	swap := func(stamp, rules string) {
		t.Helper()
		mustWriteFile(t, filepath.Join(dir, stamp, "rules.yaml"), rules)
		tmp := filepath.Join(dir, "..data_tmp")
		mustSymlink(t, stamp, tmp)
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}

	first := load()
	if len(first) != 64 {
		t.Errorf("Checksum = %q, want 64 hex digits (SHA-256)", first)
	}
	if again := load(); again != first {
		t.Errorf("Checksum changed without a change: %s then %s", first, again)
	}

	swap("..2026_11_22_00_05_00.456", oneRule("shop", "user"))
	if got := load(); got != first {
		t.Errorf("Checksum changed on a ..data swap to identical content: %s then %s", first, got)
	}

	swap("..2026_11_22_00_10_00.789", oneRule("shop", "tenant"))
	second := load()
	if second == first {
		t.Errorf("Checksum did not change when rules.yaml changed through a ..data swap")
	}

	mustWriteFile(t, filepath.Join(dir, "other.yaml"), oneRule("other", "tenant"))
	third := load()
	if third == second {
		t.Errorf("Checksum did not change on an in-place edit of other.yaml")
	}

	files := []config.File{{Name: "a.yaml", Data: []byte(oneRule("shop", "user"))}}
	moved := []config.File{{Name: "b.yaml", Data: []byte(oneRule("shop", "user"))}}
	a, err := config.Parse(files, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Parse(moved, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Checksum == b.Checksum {
		t.Errorf("Checksum ignores the file name: a.yaml and b.yaml with one content both give %s", a.Checksum)
	}
}

// TestLoadNoRules: a config path that holds no rule at all is an error
// naming the path, not an empty ruleset that answers OK to everything.
func TestLoadNoRules(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{name: "empty directory", setup: func(*testing.T, string) {}, want: "no rule files found"},
		{name: "only dot-files", setup: func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, ".rules.yaml"), oneRule("edge", "user"))
			mustWriteFile(t, filepath.Join(dir, ".git", "rules.yaml"), oneRule("edge", "user"))
		}, want: "no rule files found"},
		{name: "only other extensions", setup: func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, "rules.yaml.bak"), oneRule("edge", "user"))
			mustWriteFile(t, filepath.Join(dir, "rules.json"), "{}")
		}, want: "no rule files found"},
		{name: "ConfigMap with its key removed", setup: func(t *testing.T, dir string) {
			// The kubelet's layout after the last key went: ..data and
			// its directory, and no top-level link.
			mustWriteFile(t, filepath.Join(dir, "..2026_11_22_00_00_00.1", ".keep"), "")
			mustSymlink(t, "..2026_11_22_00_00_00.1", filepath.Join(dir, "..data"))
		}, want: "no rule files found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			rs, err := config.Load(dir, config.Options{})
			if err == nil {
				t.Fatalf("Load succeeded with domains %q, want an error", rs.Domains())
			}
			if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %s and saying %q", err, dir, tt.want)
			}
		})
	}
}

// TestLoadNothingButBrokenFiles: files that define no domain at all (empty,
// comments only) are each a problem naming the file, and a dangling
// ConfigMap ..data link is an error naming the link.
func TestLoadNothingButBrokenFiles(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{name: "empty file", setup: func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, "rules.yaml"), "")
		}, want: "rules.yaml: domain: required, and the file is empty"},
		{name: "comments only", setup: func(t *testing.T, dir string) {
			mustWriteFile(t, filepath.Join(dir, "rules.yaml"), "# moved to another ConfigMap\n")
		}, want: "rules.yaml: domain: required, and the file is empty"},
		{name: "..data points nowhere", setup: func(t *testing.T, dir string) {
			mustSymlink(t, "..2026_11_22_00_00_00.1", filepath.Join(dir, "..data"))
			mustSymlink(t, filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml"))
		}, want: "rules.yaml: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			if _, err := config.Load(dir, config.Options{}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one with %q", err, tt.want)
			}
		})
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

func TestLoadNoRulesIsErrNoRules(t *testing.T) {
	if _, err := config.Load(t.TempDir(), config.Options{}); !errors.Is(err, config.ErrNoRules) {
		t.Errorf("err = %v, want ErrNoRules", err)
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
