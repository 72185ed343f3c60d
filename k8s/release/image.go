package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// platforms are those `make release` builds binaries for.
var platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Paths as the Dockerfile has them.
const (
	binPath    = "/usr/local/bin/ratelimit-sidecar"
	refBinPath = "/bin/ratelimit" // envoyproxy/ratelimit's path, for its deployments
	user       = "65532:65532"
)

// entrypoint is the Dockerfile's ENTRYPOINT.
var entrypoint = []string{binPath, "--config=/etc/ratelimit-sidecar/", "--grpc-addr=0.0.0.0:8081",
	"--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"}

// epoch dates every file and the image, so that two releases of the same
// binaries are the same image.
var epoch = time.Unix(0, 0).UTC()

// binaryName is the file `make release` builds for p.
func binaryName(p v1.Platform) string {
	return fmt.Sprintf("ratelimit-sidecar-%s-%s", p.OS, p.Architecture)
}

// labels are the Dockerfile's LABELs.
func labels(o options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "ratelimit-sidecar",
		"org.opencontainers.image.description": "Envoy rate-limit service (RLS v3) to run beside Envoy",
		"org.opencontainers.image.source":      "https://github.com/ratelimit-sidecar/ratelimit-sidecar",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
	}
}

// writeImage builds one image per platform, an index over them, and writes
// the OCI layout (image-oci/), its tar archive and a docker-load tarball
// per platform.
func writeImage(o options) ([]string, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var files []string
	for _, p := range platforms {
		img, err := platformImage(o, p)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}}})
		refs := map[name.Reference]v1.Image{}
		for _, t := range imageTags(o.version) {
			tag, err := name.NewTag(o.repo + ":" + t)
			if err != nil {
				return nil, fmt.Errorf("image tag: %w", err)
			}
			refs[tag] = img
		}
		f := fmt.Sprintf("ratelimit-sidecar-image-%s-%s.tar", p.OS, p.Architecture)
		if err := tarball.MultiRefWriteToFile(filepath.Join(o.bin, f), refs); err != nil {
			return nil, fmt.Errorf("write %s: %w", f, err)
		}
		files = append(files, f)
	}
	dir := filepath.Join(o.bin, "image-oci")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", dir, err)
	}
	ann := map[string]string{"org.opencontainers.image.ref.name": versionTag(o.version)}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(ann)); err != nil {
		return nil, fmt.Errorf("write %s: %w", dir, err)
	}
	if err := tarDir(dir, filepath.Join(o.bin, "ratelimit-sidecar-image-oci.tar")); err != nil {
		return nil, err
	}
	return append(files, "ratelimit-sidecar-image-oci.tar"), nil
}

// platformImage is the image of p: one layer with the files the Dockerfile
// copies, and the Dockerfile's config.
func platformImage(o options, p v1.Platform) (v1.Image, error) {
	layer, err := rootLayer(o, p)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "ratelimit-sidecar release", Comment: binaryName(p)}})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", binaryName(p), err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = p.OS, p.Architecture, v1.Time{Time: epoch}
	cf.Config.Entrypoint = entrypoint
	cf.Config.User = user
	cf.Config.Labels = labels(o)
	cf.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	return mutate.ConfigFile(img, cf)
}

// rootLayer holds the binary at both paths, the example rules, the licence
// and passwd/group entries for the nonroot user.
// caBundle is where Debian keeps its CA certificates, and distroless too.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

func rootLayer(o options, p v1.Platform) (v1.Layer, error) {
	bin, err := os.ReadFile(filepath.Join(o.bin, binaryName(p)))
	if err != nil {
		return nil, fmt.Errorf("binary for %s/%s: %w (run make release)", p.OS, p.Architecture, err)
	}
	files := map[string]fileEntry{
		binPath:       {bin, 0o755},
		refBinPath:    {bin, 0o755},
		"/etc/passwd": {[]byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644},
		"/etc/group":  {[]byte("root:x:0:\nnonroot:x:65532:\n"), 0o644},
	}
	// The CA certificates of the machine that builds it, which distroless
	// would bring: Redis, xDS and OTLP over TLS with the system's roots
	// need them (Go reads this path first on Linux).
	if ca, err := os.ReadFile(caBundle); err == nil {
		files[caBundle] = fileEntry{ca, 0o644}
	}
	copies := map[string]string{"LICENSE": "/usr/share/doc/ratelimit-sidecar/LICENSE",
		"NOTICE": "/usr/share/doc/ratelimit-sidecar/NOTICE"}
	// COPY config/ /etc/ratelimit-sidecar/, as the Dockerfile does.
	cfg, err := os.ReadDir(filepath.Join(o.root, "config"))
	if err != nil {
		return nil, err
	}
	for _, e := range cfg {
		if e.Type().IsRegular() {
			copies["config/"+e.Name()] = "/etc/ratelimit-sidecar/" + e.Name()
		}
	}
	for src, dst := range copies {
		b, err := os.ReadFile(filepath.Join(o.root, src))
		if err != nil {
			return nil, err
		}
		files[dst] = fileEntry{b, 0o644}
	}
	b, err := tarFiles(files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

type fileEntry struct {
	data []byte
	mode int64
}

// tarFiles writes files and their parent directories, sorted, root-owned
// and dated epoch, so the layer's digest depends only on the contents.
func tarFiles(files map[string]fileEntry) ([]byte, error) {
	dirs := map[string]bool{"home/nonroot": true}
	var names []string
	for p := range files {
		names = append(names, strings.TrimPrefix(p, "/"))
		for d := filepath.Dir(strings.TrimPrefix(p, "/")); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		names = append(names, d+"/")
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: n, ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			if n == "home/nonroot/" {
				h.Uid, h.Gid = 65532, 65532
			}
		} else {
			f := files["/"+n]
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(files["/"+n].data); err != nil {
				return nil, err
			}
		}
	}
	// Close writes the last file's padding and the two zero blocks that end
	// an archive: the bytes are the layer only after it.
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir archives the OCI layout dir as out (skopeo's oci-archive:, and
// docker load since Docker 25).
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), epoch, 0, 0, "", ""
		h.AccessTime, h.ChangeTime, h.Format = time.Time{}, time.Time{}, tar.FormatPAX
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
