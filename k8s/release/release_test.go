package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigyaml "sigs.k8s.io/yaml"
)

const root = "../.."

var (
	releaseOnce sync.Once
	releaseOpts options
	releaseOut  []string
	releaseErr  error
)

// released builds the sidecar for every platform, as make release does,
// into a temporary directory and runs the release tool on it, once for all
// tests of the package.
func released(t *testing.T) (options, []string) {
	t.Helper()
	releaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "release-test")
		if err != nil {
			releaseErr = err
			return
		}
		releaseOpts = options{root: root, bin: dir, version: "v9.9.9-1-gabcdef0", revision: "abcdef0", repo: defaultRepository}
		for _, p := range platforms {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, binaryName(p)), "./cmd/ratelimit-sidecar")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
			if out, err := cmd.CombinedOutput(); err != nil {
				releaseErr = &buildError{p, string(out), err}
				return
			}
		}
		releaseOut, releaseErr = run(releaseOpts)
	})
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseOpts, releaseOut
}

type buildError struct {
	p   v1.Platform
	out string
	err error
}

func (e *buildError) Error() string {
	return "build " + binaryName(e.p) + ": " + e.err.Error() + "\n" + e.out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseOpts.bin != "" {
		os.RemoveAll(releaseOpts.bin)
	}
	os.Exit(code)
}

// dockerfile reads the Dockerfile's ENTRYPOINT and USER, so that the image
// the release builds is held to the one docker builds.
func dockerfile(t *testing.T) (entry []string, user string) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(v), &entry); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT: %v", err)
			}
		}
		if v, ok := strings.CutPrefix(l, "USER "); ok {
			user = strings.TrimSpace(v)
		}
	}
	return entry, user
}

// layerFiles reads every regular file of img's layers.
func layerFiles(t *testing.T, img v1.Image) map[string][]byte {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				files["/"+h.Name] = b
			}
		}
		rc.Close()
	}
	return files
}

func TestReleaseImage(t *testing.T) {
	o, _ := released(t)
	wantEntry, wantUser := dockerfile(t)
	p, err := layout.FromPath(filepath.Join(o.bin, "image-oci"))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil || len(om.Manifests) != 1 {
		t.Fatalf("layout index: %v, %d entries, want 1", err, len(om.Manifests))
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(platforms) {
		t.Fatalf("index has %d images, want %d", len(im.Manifests), len(platforms))
	}
	for i, d := range im.Manifests {
		want := platforms[i]
		t.Run(want.Architecture, func(t *testing.T) {
			if d.Platform == nil || d.Platform.OS != want.OS || d.Platform.Architecture != want.Architecture {
				t.Errorf("index entry platform %v, want %s/%s", d.Platform, want.OS, want.Architecture)
			}
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != want.OS || cf.Architecture != want.Architecture {
				t.Errorf("config os/architecture %s/%s, want %s/%s", cf.OS, cf.Architecture, want.OS, want.Architecture)
			}
			if !slices.Equal(cf.Config.Entrypoint, wantEntry) {
				t.Errorf("entrypoint %q, Dockerfile has %q", cf.Config.Entrypoint, wantEntry)
			}
			if cf.Config.User != wantUser || wantUser == "" {
				t.Errorf("user %q, Dockerfile has %q", cf.Config.User, wantUser)
			}
			for k, v := range map[string]string{"org.opencontainers.image.version": o.version,
				"org.opencontainers.image.revision": o.revision, "org.opencontainers.image.title": "ratelimit-sidecar",
				"org.opencontainers.image.licenses": "Apache-2.0"} {
				if cf.Config.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
				}
			}
			bin, err := os.ReadFile(filepath.Join(o.bin, binaryName(want)))
			if err != nil {
				t.Fatal(err)
			}
			files := layerFiles(t, img)
			for _, path := range []string{"/usr/local/bin/ratelimit-sidecar", "/bin/ratelimit"} {
				if !bytes.Equal(files[path], bin) {
					t.Errorf("%s in the image (%d bytes) is not %s (%d bytes)", path, len(files[path]), binaryName(want), len(bin))
				}
			}
			if _, ok := files["/etc/ratelimit-sidecar/rules.yaml"]; !ok {
				t.Error("image lacks /etc/ratelimit-sidecar/rules.yaml")
			}
			// The docker-load tarball is the same image.
			tb, err := tarball.ImageFromPath(filepath.Join(o.bin, "ratelimit-sidecar-image-"+want.OS+"-"+want.Architecture+".tar"), nil)
			if err != nil {
				t.Fatal(err)
			}
			tcf, err := tb.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if tcf.Architecture != want.Architecture || !bytes.Equal(layerFiles(t, tb)["/bin/ratelimit"], bin) {
				t.Errorf("docker tarball of %s: architecture %s, or its /bin/ratelimit is not the binary", want.Architecture, tcf.Architecture)
			}
		})
	}
}

func TestReleaseSBOM(t *testing.T) {
	o, _ := released(t)
	for _, p := range platforms {
		bi, err := buildinfo.ReadFile(filepath.Join(o.bin, binaryName(p)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(o.bin, binaryName(p)+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc spdxDoc
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) == 0 || doc.Packages[0].Name != bi.Main.Path {
			t.Fatalf("%s: SBOM does not describe the binary: %s, first package %+v", p.Architecture, doc.SPDXVersion, doc.Packages[:min(1, len(doc.Packages))])
		}
		listed := map[string]string{}
		for _, pkg := range doc.Packages[1:] {
			listed[pkg.Name] = pkg.VersionInfo
		}
		if len(bi.Deps) < 10 || len(listed) != len(bi.Deps) {
			t.Errorf("%s: SBOM lists %d modules, the binary has %d", p.Architecture, len(listed), len(bi.Deps))
		}
		for _, m := range bi.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			if listed[m.Path] != m.Version {
				t.Errorf("%s: module %s: SBOM says %q, binary has %q", p.Architecture, m.Path, listed[m.Path], m.Version)
			}
		}
	}
}

func TestReleaseChart(t *testing.T) {
	o, out := released(t)
	var tgz string
	for _, f := range out {
		if strings.HasSuffix(f, ".tgz") {
			tgz = f
		}
	}
	ch, err := loader.Load(filepath.Join(o.bin, tgz))
	if err != nil {
		t.Fatalf("load %q: %v", tgz, err)
	}
	if tgz != ch.Metadata.Name+"-"+ch.Metadata.Version+".tgz" {
		t.Errorf("archive %q, want %s-%s.tgz", tgz, ch.Metadata.Name, ch.Metadata.Version)
	}
	vals, err := chartutil.ToRenderValues(ch, map[string]any{}, chartutil.ReleaseOptions{Name: "rl", Namespace: "edge"}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("render %s: %v", tgz, err)
	}
	want := "image: " + defaultRepository + ":" + ch.Metadata.AppVersion
	dep := rendered["ratelimit-sidecar/templates/deployment.yaml"]
	if !strings.Contains(dep, want) && !strings.Contains(dep, `image: "`+defaultRepository+":"+ch.Metadata.AppVersion+`"`) {
		t.Errorf("rendered deployment does not run %q:\n%s", want, dep)
	}
	if notes := rendered["ratelimit-sidecar/templates/NOTES.txt"]; !strings.Contains(notes, "image.repository") {
		t.Errorf("NOTES.txt does not say how to run a locally built image:\n%s", notes)
	}
}

func TestReleaseVersionInStep(t *testing.T) {
	if err := checkVersion(root, "dev"); err != nil {
		t.Fatalf("chart and changelog out of step: %v", err)
	}
	latest, err := latestRelease(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkVersion(root, "v"+latest); err != nil {
		t.Errorf("tag v%s refused: %v", latest, err)
	}
	for _, v := range []string{"v" + latest + "-3-gabcdef0", "v" + latest + "-dirty", "abcdef0"} {
		if err := checkVersion(root, v); err != nil {
			t.Errorf("untagged build %s refused: %v", v, err)
		}
	}
	if err := checkVersion(root, "v99.0.0"); err == nil {
		t.Error("tag v99.0.0 accepted, though the changelog's latest release is " + latest)
	}
	// A chart bumped alone is out of step too.
	other := t.TempDir()
	if err := os.CopyFS(filepath.Join(other, "charts", "ratelimit-sidecar"), os.DirFS(filepath.Join(root, "charts", "ratelimit-sidecar"))); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "CHANGELOG.md"), log, 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(other, "charts", "ratelimit-sidecar", "Chart.yaml")
	text, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	bumped := regexp.MustCompile(`(?m)^version: .*$`).ReplaceAll(text, []byte("version: 99.0.0"))
	if err := os.WriteFile(chart, bumped, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkVersion(other, "dev"); err == nil || !strings.Contains(err.Error(), "version \"99.0.0\"") {
		t.Errorf("a chart at version 99.0.0 against release %s: %v, want refused", latest, err)
	}
}

// TestStrictTar holds the strict reader to what it must refuse: an
// archive cut before its end-of-archive blocks (what Go's archive/tar
// reads without complaint) or inside a file's bytes.
func TestStrictTar(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := bytes.Repeat([]byte("notice "), 217) // 1,519 bytes: the last block is partial
	if err := tw.WriteHeader(&tar.Header{Name: "a/NOTICE", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	unclosed := bytes.Clone(buf.Bytes())
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := strictTar(buf.Bytes())
	if err != nil || !bytes.Equal(files["a/NOTICE"], data) {
		t.Fatalf("a complete archive: %v, NOTICE %d bytes, want %d", err, len(files["a/NOTICE"]), len(data))
	}
	for name, b := range map[string][]byte{
		"without the end-of-archive blocks": unclosed,
		"cut inside the file":               buf.Bytes()[:512+1024],
		"cut inside the padding":            unclosed[:len(unclosed)-100],
		"with one zero block":               buf.Bytes()[:len(unclosed)+512],
	} {
		if _, err := strictTar(b); err == nil {
			t.Errorf("an archive %s (%d bytes): no error", name, len(b))
		}
	}
	// Go's reader accepts the unclosed archive: the reason for this one.
	if _, err := tar.NewReader(bytes.NewReader(unclosed)).Next(); err != nil {
		t.Logf("archive/tar refuses the unclosed archive too: %v", err)
	}
}

// TestReleaseLayersComplete reads every layer of every platform's image,
// the docker-load tarballs and the OCI archive with the strict reader, and
// checks every file of a layer against its source; with GNU tar on the
// machine it unpacks each layer with it too.
func TestReleaseLayersComplete(t *testing.T) {
	o, _ := released(t)
	sources := map[string]string{
		"usr/share/doc/ratelimit-sidecar/LICENSE": filepath.Join(root, "LICENSE"),
		"usr/share/doc/ratelimit-sidecar/NOTICE":  filepath.Join(root, "NOTICE"),
		"etc/ratelimit-sidecar/rules.yaml":        filepath.Join(root, "config", "rules.yaml"),
	}
	gnuTar := ""
	if out, err := exec.Command("tar", "--version").Output(); err == nil && strings.Contains(string(out), "GNU tar") {
		gnuTar = "tar"
	}
	p, err := layout.FromPath(filepath.Join(o.bin, "image-oci"))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		arch := d.Platform.Architecture
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(o.bin, "ratelimit-sidecar-"+d.Platform.OS+"-"+arch)
		for i, l := range layers {
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			files, err := strictTar(b)
			if err != nil {
				t.Errorf("%s layer %d (%d bytes): %v", arch, i, len(b), err)
				continue
			}
			want := map[string]string{"usr/local/bin/ratelimit-sidecar": bin, "bin/ratelimit": bin}
			for k, v := range sources {
				want[k] = v
			}
			for name, src := range want {
				sb, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(files[name], sb) {
					t.Errorf("%s layer %d: %s has %d bytes, %s %d", arch, i, name, len(files[name]), src, len(sb))
				}
			}
			if gnuTar != "" {
				gnuUnpack(t, gnuTar, b, files, arch)
			}
		}
	}
	for _, f := range []string{"ratelimit-sidecar-image-linux-amd64.tar", "ratelimit-sidecar-image-linux-arm64.tar", "ratelimit-sidecar-image-oci.tar"} {
		b, err := os.ReadFile(filepath.Join(o.bin, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := strictTar(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// gnuUnpack unpacks layer with GNU tar and compares what it wrote with
// files, the strict reader's reading of it.
func gnuUnpack(t *testing.T, tarCmd string, layer []byte, files map[string][]byte, arch string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(tarCmd, "-x", "-f", "-", "-C", dir, "--no-same-owner", "--no-same-permissions")
	cmd.Stdin = bytes.NewReader(layer)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s layer: GNU tar: %v\n%s", arch, err, out)
		return
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s layer: GNU tar unpacked %s as %d bytes (%v), want %d", arch, name, len(got), err, len(want))
		}
	}
}

func TestVersionTag(t *testing.T) {
	tests := []struct{ give, want string }{
		{"v0.1.0", "0.1.0"},
		{"v0.2.0-3-gabc0123", "0.2.0-3-gabc0123"},
		{"v0.2.0-3-gabc0123-dirty", "0.2.0-3-gabc0123-dirty"},
		{"312c3d6", "312c3d6"},
		{"dev", "dev"},
		{"version", "version"},
		{"v1.0.0+meta/x", "1.0.0_meta_x"},
	}
	for _, tt := range tests {
		if got := versionTag(tt.give); got != tt.want {
			t.Errorf("versionTag(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// TestReleaseImageNames renders the chart make release packaged (with
// Helm's engine) and k8s/'s kustomization (with kustomize), and checks
// that the image each runs is one the docker-load tarballs carry, and
// that the chart's is the OCI layout's tag: every way to deploy runs the
// image the release wrote, with no override.
func TestReleaseImageNames(t *testing.T) {
	o, out := released(t)
	var tagged []string
	for _, p := range platforms {
		f := filepath.Join(o.bin, "ratelimit-sidecar-image-"+p.OS+"-"+p.Architecture+".tar")
		tags := tarballTags(t, f)
		if tagged == nil {
			tagged = tags
		} else if !slices.Equal(tags, tagged) {
			t.Errorf("%s is tagged %q, the first platform's tarball %q", f, tags, tagged)
		}
	}
	want := []string{defaultRepository + ":9.9.9-1-gabcdef0", defaultRepository + ":dev"}
	if !slices.Equal(tagged, want) {
		t.Errorf("tarballs are tagged %q, want %q", tagged, want)
	}

	p, err := layout.FromPath(filepath.Join(o.bin, "image-oci"))
	if err != nil {
		t.Fatal(err)
	}
	outer, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	ociTag := om.Manifests[0].Annotations["org.opencontainers.image.ref.name"]

	var tgz string
	for _, f := range out {
		if strings.HasSuffix(f, ".tgz") {
			tgz = f
		}
	}
	chartImage := renderedChartImage(t, filepath.Join(o.bin, tgz))
	if !slices.Contains(tagged, chartImage) || chartImage != defaultRepository+":"+ociTag {
		t.Errorf("the chart runs %q; the tarballs carry %q and the OCI layout is tagged %q", chartImage, tagged, ociTag)
	}
	kustImage := kustomizedImage(t, filepath.Join(root, "k8s"))
	if !slices.Contains(tagged, kustImage) {
		t.Errorf("k8s/ runs %q; the tarballs carry %q", kustImage, tagged)
	}
}

// tarballTags reads the RepoTags of a docker-load tarball's manifest.json.
func tarballTags(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files, err := strictTar(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var m []struct{ RepoTags []string }
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 {
		t.Fatalf("%s: manifest.json: %v, %d images", path, err, len(m))
	}
	slices.Sort(m[0].RepoTags)
	return m[0].RepoTags
}

// renderedChartImage renders the packaged chart with its defaults and
// returns the image of its Deployment's ratelimit-sidecar container.
func renderedChartImage(t *testing.T, tgz string) string {
	t.Helper()
	ch, err := loader.Load(tgz)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, map[string]any{}, chartutil.ReleaseOptions{Name: "rl", Namespace: "edge"}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	return containerImage(t, tgz, []byte(rendered["ratelimit-sidecar/templates/deployment.yaml"]))
}

// kustomizedImage builds the kustomization in dir, as kubectl apply -k
// does, and returns the image of the ratelimit-sidecar container.
func kustomizedImage(t *testing.T, dir string) string {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return containerImage(t, dir, b)
}

// containerImage returns the image of the container named
// ratelimit-sidecar (or init container) of the Deployment in docs.
func containerImage(t *testing.T, source string, docs []byte) string {
	t.Helper()
	for _, doc := range strings.Split(string(docs), "\n---\n") {
		var d appsv1.Deployment
		if err := sigyaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			if c.Name == "ratelimit-sidecar" {
				return c.Image
			}
		}
	}
	t.Fatalf("%s: no Deployment with a ratelimit-sidecar container", source)
	return ""
}

// TestImageSubcommands runs the subcommands as a user runs them in the
// image (docker run IMAGE check): the image's entrypoint and cmd, as its
// config has them, then the command's arguments, with the image's
// environment and user, in a directory laid out as the image's layers
// lay it out. No Docker engine runs here: as root the binary runs
// chrooted there as the image's user; otherwise (and as root too, so that
// this way is tested) the arguments' absolute paths are taken below the
// directory.
func TestImageSubcommands(t *testing.T) {
	o, _ := released(t)
	p := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	if !slices.ContainsFunc(platforms, func(q v1.Platform) bool { return q.OS == p.OS && q.Architecture == p.Architecture }) {
		t.Skipf("no image for this machine's platform, %s/%s", p.OS, p.Architecture)
	}
	img, err := tarball.ImageFromPath(filepath.Join(o.bin, "ratelimit-sidecar-image-"+p.OS+"-"+p.Architecture+".tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	unpackImage(t, img, rootfs)
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"check", []string{"check"}, "ok: 1 domain"},
		{"explain", []string{"explain", "--domain", "edge", "--descriptor", "tenant=acme,user=42"}, "token_bucket"},
		{"version", []string{"version"}, "ratelimit-sidecar "},
	}
	ways := []bool{false}
	if os.Geteuid() == 0 {
		ways = []bool{true, false}
	}
	for _, chroot := range ways {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/chroot=%v", tt.name, chroot), func(t *testing.T) {
				argv := append(append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...), tt.give...)
				cmd := imageCommand(t, rootfs, cf.Config.User, argv, chroot)
				cmd.Env = cf.Config.Env
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("docker run IMAGE %s, as %q: %v\n%s", strings.Join(tt.give, " "), cmd.Args, err, stderr.String())
				}
				if !strings.Contains(stdout.String(), tt.want) {
					t.Errorf("docker run IMAGE %s: want %q in:\n%s", strings.Join(tt.give, " "), tt.want, stdout.String())
				}
			})
		}
	}
}

// imageCommand is argv run in the image unpacked at rootfs: chrooted
// there as user ("uid:gid"), which needs root, or with the absolute paths
// of --flag=/path arguments taken below rootfs.
func imageCommand(t *testing.T, rootfs, user string, argv []string, chroot bool) *exec.Cmd {
	t.Helper()
	if chroot {
		cmd := exec.Command(argv[0], argv[1:]...)
		cred := &syscall.Credential{}
		if u, g, ok := strings.Cut(user, ":"); ok {
			uid, err1 := strconv.ParseUint(u, 10, 32)
			gid, err2 := strconv.ParseUint(g, 10, 32)
			if err1 != nil || err2 != nil {
				t.Fatalf("image user %q is not uid:gid", user)
			}
			cred.Uid, cred.Gid = uint32(uid), uint32(gid)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: cred}
		cmd.Dir = "/"
		return cmd
	}
	args := slices.Clone(argv[1:])
	for i, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "/") {
			args[i] = k + "=" + filepath.Join(rootfs, v) + "/"
		}
	}
	cmd := exec.Command(filepath.Join(rootfs, argv[0]), args...)
	cmd.Dir = rootfs
	return cmd
}

// unpackImage writes the files and directories of img's layers under dir,
// with their modes.
func unpackImage(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, filepath.FromSlash(h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, 0o755)
			case tar.TypeReg:
				var b []byte
				if b, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, b, os.FileMode(h.Mode).Perm())
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rc.Close()
	}
}
