package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
)

// version and revision are stamped at build time:
//
//	-ldflags "-X main.version=v0.1.0 -X main.revision=$(git rev-parse HEAD)"
//
// `make build` and `make release` do so. When they are empty (or version
// is "dev"), buildInfo falls back to what the Go toolchain recorded.
var version, revision string

// buildVersion says which build is running.
type buildVersion struct {
	version  string // v0.1.0, a git describe, a Go pseudo-version, or "dev"
	revision string // the commit; "" when unknown
	modified bool   // built from a work tree with uncommitted changes
}

// buildInfo returns the running build's version: the stamped one, else
// the main module's version as the Go toolchain recorded it (`go install
// …@v0.1.0` records v0.1.0), else "dev"; and the stamped revision, else
// the VCS revision the toolchain recorded (a build inside a git
// checkout).
func buildInfo() buildVersion {
	bi, _ := debug.ReadBuildInfo()
	return resolveBuild(version, revision, bi)
}

// resolveBuild is buildInfo for the stamped values and the toolchain's
// record bi (nil: none).
func resolveBuild(stamped, stampedRevision string, bi *debug.BuildInfo) buildVersion {
	b := buildVersion{version: stamped, revision: stampedRevision}
	if bi != nil {
		var vcsRevision string
		var vcsModified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRevision = s.Value
			case "vcs.modified":
				vcsModified = s.Value == "true"
			}
		}
		if b.revision == "" {
			b.revision = vcsRevision
		}
		b.modified = vcsModified && b.revision == vcsRevision && vcsRevision != ""
		if b.version == "" || b.version == "dev" {
			if v := bi.Main.Version; v != "" && v != "(devel)" {
				b.version = v
			}
		}
	}
	if b.version == "" {
		b.version = "dev"
	}
	return b
}

// metrics is b as ratelimit_sidecar_build_info labels it.
func (b buildVersion) metrics() metrics.Build {
	return metrics.Build{Version: b.version, Revision: b.revision}
}

// write prints b: the version on the first line, as `--version` always
// has, then one "name value" line each for the commit (when known), the
// Go version and the platform.
func (b buildVersion) write(w io.Writer) {
	fmt.Fprintln(w, "ratelimit-sidecar", b.version)
	if b.revision != "" {
		rev := b.revision
		if b.modified {
			rev += " (modified)"
		}
		fmt.Fprintln(w, "commit  ", rev)
	}
	fmt.Fprintln(w, "go      ", runtime.Version())
	fmt.Fprintln(w, "platform", runtime.GOOS+"/"+runtime.GOARCH)
}

// runVersion implements `ratelimit-sidecar version`.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: ratelimit-sidecar version")
		fmt.Fprintln(fs.Output(), "Prints the version, the commit when known, the Go version and the platform.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	buildInfo().write(stdout)
	return nil
}

// isVersionFlag reports whether a is -version or --version, which print
// the version whatever the other arguments and the environment hold.
func isVersionFlag(a string) bool {
	return strings.TrimLeft(a, "-") == "version" && strings.HasPrefix(a, "-") && len(a)-len("version") <= 2
}
