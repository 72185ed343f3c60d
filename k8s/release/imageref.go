package main

import (
	"regexp"
	"strings"
)

// The image's name, in one place: every artefact that names the image (the
// docker-load tarballs, the OCI layout, the packaged chart) and `make
// image` take it from here, and k8s/kustomization.yaml names localTag.
//
//   - The repository is defaultRepository (the -repository flag).
//   - versionTag is the version without git's "v": X.Y.Z for the release
//     tagged vX.Y.Z (the chart's appVersion), 0.2.0-3-gabc0123 for a
//     build past it, the commit or "dev" otherwise.
//   - Every image is also tagged localTag, "dev": the name k8s/ runs, so
//     that the image a user built or loaded last is the one it runs.

// defaultRepository is where we plan to publish images; the chart's
// values.yaml names the same.
const defaultRepository = "ghcr.io/ratelimit-sidecar/ratelimit-sidecar"

// localTag is the tag every image carries besides its version's, and the
// one k8s/kustomization.yaml runs.
const localTag = "dev"

var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// versionTag is the image tag of version, as git describe stamps it: with
// a leading "v" before a digit dropped, and what a tag cannot hold ("+",
// "/") replaced by "_". It is also the packaged chart's appVersion.
func versionTag(version string) string {
	if rest, ok := strings.CutPrefix(version, "v"); ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
		version = rest
	}
	tag := notInTag.ReplaceAllString(version, "_")
	if tag == "" || tag[0] == '.' || tag[0] == '-' {
		tag = "_" + tag
	}
	return tag[:min(len(tag), 128)]
}

// imageTags are the tags of the image of version: its versionTag first,
// then localTag.
func imageTags(version string) []string {
	if t := versionTag(version); t != localTag {
		return []string{t, localTag}
	}
	return []string{localTag}
}
