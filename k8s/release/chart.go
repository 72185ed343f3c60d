package main

import (
	"fmt"
	"path/filepath"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// packageChart writes <name>-<version>.tgz of the chart in dir to out, as
// `helm package --app-version` does, and returns its file name. The
// archive's appVersion is appVersion, the tag of the image the release
// wrote, so that the chart runs that image without an override; for a
// tagged release it is the chart's own (checkVersion).
func packageChart(dir, out, appVersion string) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	ch.Metadata.AppVersion = appVersion
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	path, err := chartutil.Save(ch, out)
	if err != nil {
		return "", fmt.Errorf("package chart %s: %w", dir, err)
	}
	return filepath.Base(path), nil
}
