// Command ratelimit-sidecar is an Envoy rate-limit service (RLS v3) meant to
// run beside Envoy in each pod.
//
// Run `ratelimit-sidecar -h` for its flags. Every flag can also be set by an
// environment variable named RLS_ and the flag in upper case with
// underscores, e.g. RLS_GRPC_ADDR; a flag on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ratelimit-sidecar: %v\n", err)
		os.Exit(1)
	}
}

// run is the whole program; it returns when ctx is cancelled and shutdown
// has finished, or on a startup error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// A subcommand may follow --flag=value arguments, as it does when an
	// image's entrypoint passes server flags before the command's own.
	for i, a := range args {
		if a == "check" {
			return runCheck(args[i+1:], stdout, stderr)
		}
		if a == "explain" {
			return runExplain(args[i+1:], stdout, stderr)
		}
		if !strings.HasPrefix(a, "-") || !strings.Contains(a, "=") {
			break
		}
	}
	cfg, err := parseFlags(args, os.LookupEnv, stderr)
	if err != nil {
		return err
	}
	if cfg.version {
		fmt.Fprintln(stdout, "ratelimit-sidecar", version)
		return nil
	}
	return serve(ctx, cfg, stderr)
}
