// Command release turns the binaries `make release` built into what a
// cluster installs: a multi-arch OCI image (an OCI layout, its archive, and
// one `docker load` tarball per platform), an SPDX SBOM per binary and the
// packaged Helm chart. It lives in the k8s module so that the main module
// does not carry go-containerregistry or Helm. The Makefile runs it as
//
//	cd k8s && go run ./release -root .. -bin ../bin -version V -revision R
//
// and writes SHA256SUMS over everything itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// options are the release's inputs; every path is the caller's.
type options struct {
	root     string // repository root: config/, LICENSE, NOTICE, charts/
	bin      string // where the binaries are and the artefacts go
	version  string
	revision string
	repo     string // the image's repository name in its tags
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", "..", "repository root")
	flag.StringVar(&o.bin, "bin", "../bin", "directory of the binaries and the artefacts")
	flag.StringVar(&o.version, "version", "dev", "version stamped in the binaries (git describe)")
	flag.StringVar(&o.revision, "revision", "", "commit the binaries were built from")
	flag.StringVar(&o.repo, "repository", defaultRepository, "image repository named in the tarballs' tags")
	printTags := flag.Bool("print-image-names", false, "print the image's names (repository:tag), one a line, and write nothing (make image tags its build with them)")
	flag.Parse()
	if *printTags {
		for _, t := range imageTags(o.version) {
			fmt.Println(o.repo + ":" + t)
		}
		return
	}
	files, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(filepath.Join(o.bin, f))
	}
}

// run writes every artefact and returns their names relative to o.bin.
func run(o options) ([]string, error) {
	if err := checkVersion(o.root, o.version); err != nil {
		return nil, err
	}
	var out []string
	img, err := writeImage(o)
	if err != nil {
		return nil, err
	}
	out = append(out, img...)
	sboms, err := writeSBOMs(o)
	if err != nil {
		return nil, err
	}
	out = append(out, sboms...)
	chart, err := packageChart(filepath.Join(o.root, "charts", "ratelimit-sidecar"), o.bin, versionTag(o.version))
	if err != nil {
		return nil, err
	}
	return append(out, chart), nil
}
