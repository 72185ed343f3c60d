package charts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestVersionsInStep keeps three version numbers in step: the chart's
// version, the changelog's latest release, and the version a build
// reports. "In step" means:
//   - the chart's version is the changelog's latest released version
//     (the first "## [X.Y.Z]" heading under "Unreleased");
//   - on a tree whose HEAD is tagged vX.Y.Z (a release), X.Y.Z is that
//     version and the chart's appVersion too, so the chart runs the image
//     of its own release. An untagged tree reports its commit (make
//     stamps `git describe`) and the chart's appVersion may stay "dev".
func TestVersionsInStep(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join("..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	released := latestRelease(string(log))
	if released == "" {
		t.Fatal(`CHANGELOG.md has no "## [X.Y.Z]" release heading`)
	}
	if chart.Version != released {
		t.Errorf("Chart.yaml version %s, CHANGELOG.md's latest release %s: bump them together", chart.Version, released)
	}
	tag, err := exec.Command("git", "describe", "--tags", "--exact-match").Output()
	if err != nil {
		t.Logf("HEAD is not tagged (or no git): only the chart and the changelog are compared")
		return
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(tag)), "v")
	if v != released || chart.AppVersion != v {
		t.Errorf("HEAD is tagged %s; want the changelog's latest release (%s) and the chart's appVersion (%s) to be %s", tag, released, chart.AppVersion, v)
	}
}

// latestRelease returns the version of the first release heading of a
// Keep a Changelog file, or "".
func latestRelease(log string) string {
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+[^\]]*)\]`).FindStringSubmatch(log)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestLatestRelease(t *testing.T) {
	log := "# Changelog\n\n## [Unreleased]\n\n### Added\n\n## [0.2.0] - 2027-01-01\n\n## [0.1.0] - 2026-11-24\n"
	if got := latestRelease(log); got != "0.2.0" {
		t.Errorf("latestRelease = %q, want 0.2.0", got)
	}
	if got := latestRelease("## [Unreleased]\n"); got != "" {
		t.Errorf("latestRelease of no release = %q, want none", got)
	}
}
