package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// What "in step" means, written down in docs/releasing.md too:
//   - the chart's version and appVersion are the changelog's latest
//     released version (the first "## [X.Y.Z]" heading below
//     "## [Unreleased]"), always;
//   - a build stamped with a release tag (vX.Y.Z exactly, as git describe
//     says on a tagged commit) must carry that same X.Y.Z.
// Untagged builds (git describe's v0.2.0-3-gabc, a bare commit, "dev")
// are not releases, and only the first rule holds for them.

var (
	releaseHeading = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+[^\]]*)\]`)
	releaseTag     = regexp.MustCompile(`^v(\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?)$`)
	describeSuffix = regexp.MustCompile(`-\d+-g[0-9a-f]+(-dirty)?$`)
)

// latestRelease is the version of the changelog's first release heading.
func latestRelease(changelog string) (string, error) {
	f, err := os.Open(changelog)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := releaseHeading.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no release heading (## [X.Y.Z])", changelog)
}

// checkVersion fails when the chart, the changelog and a release tag
// disagree.
func checkVersion(root, version string) error {
	changelog := filepath.Join(root, "CHANGELOG.md")
	latest, err := latestRelease(changelog)
	if err != nil {
		return err
	}
	chartDir := filepath.Join(root, "charts", "ratelimit-sidecar")
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	if ch.Metadata.Version != latest {
		return fmt.Errorf("%s/Chart.yaml: version %q is not the latest release in %s, %q: the chart is released with the binary",
			chartDir, ch.Metadata.Version, changelog, latest)
	}
	if ch.Metadata.AppVersion != latest {
		return fmt.Errorf("%s/Chart.yaml: appVersion %q is not the latest release in %s, %q",
			chartDir, ch.Metadata.AppVersion, changelog, latest)
	}
	if tagged, ok := taggedVersion(version); ok && tagged != latest {
		return fmt.Errorf("version %s is tagged, but the latest release in %s is %q (rename [Unreleased] and set the chart's appVersion first)",
			version, changelog, latest)
	}
	return nil
}

// taggedVersion is X.Y.Z of a build stamped exactly vX.Y.Z; not for a
// git describe past a tag, a dirty tree or a commit.
func taggedVersion(version string) (string, bool) {
	if strings.HasSuffix(version, "-dirty") || describeSuffix.MatchString(version) {
		return "", false
	}
	m := releaseTag.FindStringSubmatch(version)
	if m == nil {
		return "", false
	}
	return m[1], true
}
