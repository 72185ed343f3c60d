package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// spdxDoc is the part of SPDX 2.3 JSON we write: the binary as a package
// that contains the Go modules linked into it.
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
	SPDXID           string       `json:"SPDXID"`
	Name             string       `json:"name"`
	VersionInfo      string       `json:"versionInfo,omitempty"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	Checksums        []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
}

type spdxSum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// writeSBOMs writes <binary>.spdx.json beside each release binary. The
// image of a platform holds that binary and nothing else built from code,
// so the binary's SBOM is the image's.
func writeSBOMs(o options) ([]string, error) {
	var files []string
	for _, p := range platforms {
		path := filepath.Join(o.bin, binaryName(p))
		doc, err := sbom(path, o.version)
		if err != nil {
			return nil, err
		}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return nil, err
		}
		f := binaryName(p) + ".spdx.json"
		if err := os.WriteFile(filepath.Join(o.bin, f), append(b, '\n'), 0o644); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// sbom reads the module graph Go stamped into the binary at path.
func sbom(path, version string) (*spdxDoc, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read build info of %s: %w", path, err)
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(bin)
	name := filepath.Base(path)
	doc := &spdxDoc{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: name,
		DocumentNamespace: "https://github.com/ratelimit-sidecar/ratelimit-sidecar/sbom/" + name + "-" + hex.EncodeToString(sum[:8]),
		CreationInfo:      spdxCreation{Created: time.Unix(0, 0).UTC().Format(time.RFC3339), Creators: []string{"Tool: ratelimit-sidecar-release", "Tool: " + bi.GoVersion}},
	}
	root := spdxPackage{SPDXID: "SPDXRef-Package-binary", Name: bi.Main.Path, VersionInfo: version,
		DownloadLocation: "https://github.com/ratelimit-sidecar/ratelimit-sidecar", FilesAnalyzed: false,
		Checksums: []spdxSum{{"SHA256", hex.EncodeToString(sum[:])}}}
	doc.Packages = append(doc.Packages, root)
	doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", root.SPDXID})
	for i, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-go-%d", i)
		pkg := spdxPackage{SPDXID: id, Name: m.Path, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", purl(m.Path, m.Version)}}}
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, spdxRelation{root.SPDXID, "CONTAINS", id})
	}
	return doc, nil
}

// purl is the package URL of a Go module.
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}
