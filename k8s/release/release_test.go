package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// TestRelease builds the release artefacts from stand-in binaries (this
// test's own executable, which carries build information as the
// sidecar's does) and checks what a cluster and a user would rely on: the
// image per platform runs the binary it was given as the Dockerfile's
// image does, the SBOM lists that binary's modules and checksum, and the
// chart archive loads and renders.
func TestRelease(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, arch := range platforms {
		// Each platform its own bytes, so that a mix-up shows.
		b := append(slices.Clone(bin), byte(i))
		if err := os.WriteFile(filepath.Join(dir, "ratelimit-sidecar-linux-"+arch), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o := options{binDir: dir, repo: filepath.Join("..", ".."), version: "v1.2.3", revision: "abc123", created: 1700000000}
	files, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{imageArchive, sbomFile, "ratelimit-sidecar-" + chartVersion(t, o.repo) + ".tgz"}; !slices.Equal(files, want) {
		t.Errorf("artefacts %v, want %v", files, want)
	}
	t.Run("image", func(t *testing.T) { checkImage(t, o) })
	t.Run("sbom", func(t *testing.T) { checkSBOM(t, o) })
	t.Run("chart", func(t *testing.T) { checkChart(t, filepath.Join(dir, files[2])) })
}

func checkImage(t *testing.T, o options) {
	p, err := layout.FromPath(filepath.Join(o.binDir, imageLayout))
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Fatalf("layout's index: %+v, want one image index tagged 1.2.3", im.Manifests)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	entrypoint, user := dockerfile(t, o.repo)
	var arches []string
	for _, d := range m.Manifests {
		arch := d.Platform.Architecture
		arches = append(arches, d.Platform.OS+"/"+arch)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if !slices.Equal(cf.Config.Entrypoint, entrypoint) || cf.Config.User != user {
			t.Errorf("%s: entrypoint %q user %q, want the Dockerfile's %q and %q", arch, cf.Config.Entrypoint, cf.Config.User, entrypoint, user)
		}
		if cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || cf.Config.Labels["org.opencontainers.image.revision"] != "abc123" {
			t.Errorf("%s: labels %v", arch, cf.Config.Labels)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", arch, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		got := layerFiles(t, rc)
		want, err := os.ReadFile(filepath.Join(o.binDir, "ratelimit-sidecar-linux-"+arch))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got["usr/local/bin/ratelimit-sidecar"], want) {
			t.Errorf("%s: /usr/local/bin/ratelimit-sidecar is not the release's binary for %s", arch, arch)
		}
		rules := slices.ContainsFunc(slices.Collect(maps.Keys(got)), func(n string) bool { return strings.HasPrefix(n, "etc/ratelimit-sidecar/") })
		if !bytes.Equal(got["bin/ratelimit"], want) || got["etc/passwd"] == nil || !rules {
			t.Errorf("%s: layer lacks /bin/ratelimit (the same binary), /etc/passwd or the default rules: %v", arch, slices.Sorted(maps.Keys(got)))
		}
	}
	if !slices.Equal(arches, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", arches)
	}
	if _, err := os.Stat(filepath.Join(o.binDir, imageArchive)); err != nil {
		t.Error(err)
	}
}

// layerFiles reads a layer's regular files by name; a hard link reads as
// the file it names.
func layerFiles(t *testing.T, r io.ReadCloser) map[string][]byte {
	defer r.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = b
		case tar.TypeLink:
			if out[h.Linkname] == nil {
				t.Errorf("%s links to %s, which comes later or not at all", h.Name, h.Linkname)
			}
			out[h.Name] = out[h.Linkname]
		}
	}
}

// dockerfile returns the Dockerfile's ENTRYPOINT and USER.
func dockerfile(t *testing.T, repo string) ([]string, string) {
	b, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var entrypoint []string
	if m := regexp.MustCompile(`(?m)^ENTRYPOINT (\[.*\])$`).FindSubmatch(b); m == nil || json.Unmarshal(m[1], &entrypoint) != nil {
		t.Fatal("no JSON ENTRYPOINT in the Dockerfile")
	}
	m := regexp.MustCompile(`(?m)^USER (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no USER in the Dockerfile")
	}
	return entrypoint, string(m[1])
}

func checkSBOM(t *testing.T, o options) {
	b, err := os.ReadFile(filepath.Join(o.binDir, sbomFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	listed := map[string]string{}
	sums := map[string]string{}
	for _, p := range doc.Packages {
		listed[p.Name] = p.VersionInfo
		for _, c := range p.Checksums {
			sums[p.Name] = c.Value
		}
	}
	for _, arch := range platforms {
		name := "ratelimit-sidecar-linux-" + arch
		path := filepath.Join(o.binDir, name)
		bin, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(bin)
		if sums[name] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SBOM checksum %q, want its SHA-256", name, sums[name])
		}
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range modulesOf(bi) {
			if listed[m.Path] != m.Version {
				t.Errorf("%s links %s %s; the SBOM lists %q", name, m.Path, m.Version, listed[m.Path])
			}
		}
	}
}

func checkChart(t *testing.T, archive string) {
	c, err := loader.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(c, map[string]any{}, chartutil.ReleaseOptions{Name: "rl", Namespace: "default"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	var deployment string
	for name, text := range out {
		if strings.HasSuffix(name, "deployment.yaml") {
			deployment = text
		}
	}
	if !strings.Contains(deployment, "kind: Deployment") {
		t.Errorf("the packaged chart renders no Deployment; templates: %v", slices.Sorted(maps.Keys(out)))
	}
}

func chartVersion(t *testing.T, repo string) string {
	c, err := loader.Load(filepath.Join(repo, "charts", "ratelimit-sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	return c.Metadata.Version
}
