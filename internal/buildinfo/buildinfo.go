// Package buildinfo says which build of the sidecar is running: the
// version and commit stamped at build time, else what the Go toolchain
// recorded, for `ratelimit-sidecar version`, the start-up log and the
// build_info metric.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Build says which build is running.
type Build struct {
	Version  string // v0.1.0, a git describe, a Go pseudo-version, or "dev"
	Revision string // the commit; "" when unknown
	Modified bool   // built from a work tree with uncommitted changes
}

// Running returns the running build: the stamped version, else the main
// module's version as the Go toolchain recorded it (`go install
// …@v0.1.0` records v0.1.0), else "dev"; and the stamped revision, else
// the VCS revision the toolchain recorded (a build inside a git
// checkout).
func Running(stamped, stampedRevision string) Build {
	bi, _ := debug.ReadBuildInfo()
	return Resolve(stamped, stampedRevision, bi)
}

// Resolve is Running for the toolchain's record bi (nil: none).
func Resolve(stamped, stampedRevision string, bi *debug.BuildInfo) Build {
	b := Build{Version: stamped, Revision: stampedRevision}
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
		if b.Revision == "" {
			b.Revision = vcsRevision
		}
		b.Modified = vcsModified && b.Revision == vcsRevision && vcsRevision != ""
		if b.Version == "" || b.Version == "dev" {
			if v := bi.Main.Version; v != "" && v != "(devel)" {
				b.Version = v
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	return b
}

// Write prints b: the version on the first line, as `--version` always
// has, then one "name value" line each for the commit (when known), the
// Go version and the platform.
func (b Build) Write(w io.Writer) {
	fmt.Fprintln(w, "ratelimit-sidecar", b.Version)
	if b.Revision != "" {
		rev := b.Revision
		if b.Modified {
			rev += " (modified)"
		}
		fmt.Fprintln(w, "commit  ", rev)
	}
	fmt.Fprintln(w, "go      ", runtime.Version())
	fmt.Fprintln(w, "platform", runtime.GOOS+"/"+runtime.GOARCH)
}
