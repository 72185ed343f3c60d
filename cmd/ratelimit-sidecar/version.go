package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/buildinfo"
)

// version and revision are stamped at build time:
//
//	-ldflags "-X main.version=v0.1.0 -X main.revision=$(git rev-parse HEAD)"
//
// `make build` and `make release` do so. When they are empty (or version
// is "dev"), buildinfo.Running falls back to what the Go toolchain recorded.
var version, revision string

// buildInfo returns the running build (see internal/buildinfo).
func buildInfo() buildinfo.Build { return buildinfo.Running(version, revision) }

// runVersion implements `ratelimit-sidecar version`.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: ratelimit-sidecar version")
		fmt.Fprintln(fs.Output(), "Prints the version, the commit when known, the Go version and the platform.")
	}
	if err := parseCommand(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	buildInfo().Write(stdout)
	return nil
}

// isVersionFlag reports whether a is -version or --version, which print
// the version whatever the other arguments and the environment hold.
func isVersionFlag(a string) bool {
	return strings.TrimLeft(a, "-") == "version" && strings.HasPrefix(a, "-") && len(a)-len("version") <= 2
}
