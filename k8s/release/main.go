// Command release turns the binaries that `make release` built into what a
// cluster installs, without a Docker engine: a multi-arch OCI image (an
// OCI image layout, and the same as an oci-archive tarball), an SPDX SBOM
// of the binaries' modules, and the packaged Helm chart.
//
//	go run ./release -bin ../bin -version v0.2.0 -revision abc123 -repo ..
//
// It lives in the k8s module, which already has Helm's packages, so that
// the sidecar's own module takes on none of their dependencies.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	var o options
	flag.StringVar(&o.binDir, "bin", "../bin", "directory of the release binaries (ratelimit-sidecar-linux-<arch>); the artefacts are written there too")
	flag.StringVar(&o.repo, "repo", "..", "the repository's root: config/, LICENSE, NOTICE and charts/ratelimit-sidecar")
	flag.StringVar(&o.version, "version", "dev", "the version the binaries report, for the image's labels and tag")
	flag.StringVar(&o.revision, "revision", "", "the commit the binaries were built from")
	flag.Int64Var(&o.created, "created", 0, "the image's creation time, Unix seconds (the commit's time, so that a rebuild is identical)")
	flag.Parse()
	files, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(filepath.Join(o.binDir, f))
	}
}

// options are what build needs.
type options struct {
	binDir, repo      string
	version, revision string
	created           int64
}

// platforms are the architectures of the release, as `make release`
// builds them (PLATFORMS in the Makefile).
var platforms = []string{"amd64", "arm64"}

// build writes the artefacts into o.binDir and returns their names.
func build(o options) ([]string, error) {
	img, err := writeImage(o)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	sbom, err := writeSBOM(o)
	if err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	chart, err := writeChart(o)
	if err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return append(img, sbom, chart), nil
}
