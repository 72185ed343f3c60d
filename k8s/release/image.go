package main

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image is the Dockerfile's, built without a Docker engine: the same
// paths, user, ports, labels and entrypoint (k8s/dockerfile_test.go reads
// the Dockerfile, and the release's test compares). Its base is not
// distroless's (which cannot be pulled here) but the few files of it the
// sidecar uses: a passwd and group naming the nonroot user, the CA
// certificates of the machine that builds it (for Redis and xDS over TLS
// with the system's roots), and /tmp.
const (
	imageUser = "65532:65532"
	// ImageLayout and ImageArchive are the image's file names in the bin
	// directory: an OCI image layout directory, and the same as a tar
	// (skopeo's and crane's oci-archive).
	imageLayout  = "ratelimit-sidecar-oci"
	imageArchive = "ratelimit-sidecar-oci.tar"
	caBundle     = "/etc/ssl/certs/ca-certificates.crt"
)

var (
	imageEntrypoint = []string{"/usr/local/bin/ratelimit-sidecar", "--config=/etc/ratelimit-sidecar/",
		"--grpc-addr=0.0.0.0:8081", "--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"}
	imagePorts = []string{"8080/tcp", "8081/tcp"}
)

func imageLabels(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "ratelimit-sidecar",
		"org.opencontainers.image.description": "Envoy rate-limit service (RLS v3) to run beside Envoy",
		"org.opencontainers.image.source":      "https://github.com/ratelimit-sidecar/ratelimit-sidecar",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
	}
}

// writeImage writes the multi-arch image as an OCI layout, tagged with
// the version, and as an oci-archive of that layout.
func writeImage(o options) ([]string, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range platforms {
		img, err := platformImage(o, arch)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	dir := filepath.Join(o.binDir, imageLayout)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, err
	}
	tag := strings.TrimPrefix(o.version, "v")
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return nil, err
	}
	if err := tarDir(dir, filepath.Join(o.binDir, imageArchive), time.Unix(o.created, 0)); err != nil {
		return nil, err
	}
	return []string{imageArchive}, nil
}

// platformImage is the image of linux/arch: one layer, and the config.
func platformImage(o options, arch string) (v1.Image, error) {
	bin, err := os.ReadFile(filepath.Join(o.binDir, "ratelimit-sidecar-linux-"+arch))
	if err != nil {
		return nil, err
	}
	files, err := imageFiles(o, bin)
	if err != nil {
		return nil, err
	}
	b, err := layerTar(files, time.Unix(o.created, 0))
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: time.Unix(o.created, 0).UTC()}
	cf.Config.Entrypoint = imageEntrypoint
	cf.Config.User = imageUser
	cf.Config.Labels = imageLabels(o)
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + caBundle}
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range imagePorts {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of the image's layer.
type file struct {
	mode os.FileMode
	data []byte
	dir  bool
	link string // a hard link to this file, by its name in the layer
}

// imageFiles are the image's files: the binary at both paths, the
// default rules, the licence, and what the sidecar needs of a base.
func imageFiles(o options, bin []byte) (map[string]file, error) {
	files := map[string]file{
		"usr/local/bin/ratelimit-sidecar": {mode: 0o755, data: bin},
		"bin/ratelimit":                   {mode: 0o755, link: "usr/local/bin/ratelimit-sidecar"},
		"etc/passwd":                      {mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		"etc/group":                       {mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		"tmp":                             {mode: 0o777 | os.ModeSticky, dir: true},
		"home/nonroot":                    {mode: 0o700, dir: true},
	}
	if ca, err := os.ReadFile(caBundle); err == nil {
		files[strings.TrimPrefix(caBundle, "/")] = file{mode: 0o644, data: ca}
	}
	for _, name := range []string{"LICENSE", "NOTICE"} {
		b, err := os.ReadFile(filepath.Join(o.repo, name))
		if err != nil {
			return nil, err
		}
		files["usr/share/doc/ratelimit-sidecar/"+name] = file{mode: 0o644, data: b}
	}
	err := filepath.WalkDir(filepath.Join(o.repo, "config"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(o.repo, "config"), path)
		files["etc/ratelimit-sidecar/"+filepath.ToSlash(rel)] = file{mode: 0o644, data: b}
		return nil
	})
	return files, err
}

// layerTar writes files as a tar, with their parent directories, in
// name order (hard links last), owned by root and dated at, so that the same inputs make
// the same layer.
func layerTar(files map[string]file, at time.Time) ([]byte, error) {
	all := map[string]file{}
	for name, f := range files {
		all[name] = f
		for d := filepath.Dir(name); d != "."; d = filepath.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = file{mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	// Hard links last: a link must follow the file it names.
	sort.Slice(names, func(i, j int) bool {
		li, lj := all[names[i]].link != "", all[names[j]].link != ""
		if li != lj {
			return lj
		}
		return names[i] < names[j]
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := all[n]
		h := &tar.Header{Name: n, Mode: int64(f.mode.Perm()), ModTime: at, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000 // c_ISVTX
		}
		switch {
		case f.dir:
			h.Name, h.Typeflag, h.Size = n+"/", tar.TypeDir, 0
		case f.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, f.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir into a tar at out, with names
// relative to dir, in name order, dated at.
func tarDir(dir, out string, at time.Time) error {
	files := map[string]file{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = file{mode: 0o644, data: b}
		return nil
	})
	if err != nil {
		return err
	}
	b, err := layerTar(files, at)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
