package main

import (
	"path/filepath"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// writeChart packages charts/ratelimit-sidecar as Helm does (`helm
// package`): ratelimit-sidecar-<chart version>.tgz, which `helm push`
// sends to an OCI registry.
func writeChart(o options) (string, error) {
	c, err := loader.Load(filepath.Join(o.repo, "charts", "ratelimit-sidecar"))
	if err != nil {
		return "", err
	}
	path, err := chartutil.Save(c, o.binDir)
	if err != nil {
		return "", err
	}
	return filepath.Base(path), nil
}
