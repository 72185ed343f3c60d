package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// sbomFile is the SBOM's file name in the bin directory.
const sbomFile = "ratelimit-sidecar.spdx.json"

// The SBOM is SPDX 2.3 JSON, made from what the Go toolchain recorded in
// each binary (debug/buildinfo): the Go version, the main module and
// every module linked in, at the versions built. One package per binary,
// with its SHA-256, that contains the main module, which depends on the
// others. The image holds nothing else that runs.
type spdxDoc struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      spdxCreation   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Relationships     []spdxRelation `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string         `json:"name"`
	SPDXID           string         `json:"SPDXID"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	PrimaryPurpose   string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// writeSBOM writes the SBOM of the release binaries.
func writeSBOM(o options) (string, error) {
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "ratelimit-sidecar " + o.version,
		DocumentNamespace: fmt.Sprintf("https://github.com/ratelimit-sidecar/ratelimit-sidecar/spdx/%s-%s", o.version, o.revision),
		CreationInfo:      spdxCreation{Created: time.Unix(o.created, 0).UTC().Format(time.RFC3339), Creators: []string{"Tool: ratelimit-sidecar-release"}},
	}
	seen := map[string]bool{}
	for _, arch := range platforms {
		name := "ratelimit-sidecar-linux-" + arch
		path := filepath.Join(o.binDir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		binID := "SPDXRef-Binary-" + arch
		doc.Packages = append(doc.Packages, spdxPackage{Name: name, SPDXID: binID, VersionInfo: o.version,
			DownloadLocation: "NOASSERTION", PrimaryPurpose: "APPLICATION",
			Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}}})
		doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", binID})
		mods := append([]*buildModule{{Path: "stdlib", Version: strings.TrimPrefix(bi.GoVersion, "go")}, {Path: bi.Main.Path, Version: o.version}}, modulesOf(bi)...)
		for i, m := range mods {
			id := spdxID(m.Path, m.Version)
			if !seen[id] {
				seen[id] = true
				doc.Packages = append(doc.Packages, spdxPackage{Name: m.Path, SPDXID: id, VersionInfo: m.Version,
					DownloadLocation: "NOASSERTION", PrimaryPurpose: "LIBRARY",
					ExternalRefs: []spdxRef{{"PACKAGE-MANAGER", "purl", purl(m.Path, m.Version)}}})
			}
			rel := "CONTAINS"
			if i > 1 {
				rel = "DEPENDS_ON"
			}
			doc.Relationships = append(doc.Relationships, spdxRelation{binID, rel, id})
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", err
	}
	return sbomFile, os.WriteFile(filepath.Join(o.binDir, sbomFile), append(b, '\n'), 0o644)
}

// buildModule is a module as the SBOM lists it.
type buildModule struct{ Path, Version string }

// modulesOf returns the modules linked into a binary, a replaced one at
// its replacement.
func modulesOf(bi *buildinfo.BuildInfo) []*buildModule {
	var out []*buildModule
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		out = append(out, &buildModule{d.Path, d.Version})
	}
	return out
}

// spdxID makes an SPDX identifier of a module: letters, digits, '.' and
// '-' only.
func spdxID(path, version string) string {
	id := []byte("SPDXRef-Package-" + path + "-" + version)
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			id[i] = '-'
		}
	}
	return string(id)
}

// purl is a Go module's package URL.
func purl(path, version string) string {
	if path == "stdlib" {
		return "pkg:golang/stdlib@" + version
	}
	return "pkg:golang/" + path + "@" + version
}
