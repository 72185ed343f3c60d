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
)

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

func TestLoadNoRulesIsErrNoRules(t *testing.T) {
	if _, err := config.Load(t.TempDir(), config.Options{}); !errors.Is(err, config.ErrNoRules) {
		t.Errorf("err = %v, want ErrNoRules", err)
	}
}
