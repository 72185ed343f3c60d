// Command ratelimit-sidecar is an Envoy rate-limit service (RLS v3) meant to
// run beside Envoy in each pod.
//
// Run with no command it is the server; `ratelimit-sidecar help` lists the
// commands (check, explain, version, help) and the server's flags. Every
// server flag can also be set by an environment variable named RLS_ and
// the flag in upper case with underscores, e.g. RLS_GRPC_ADDR; a flag on
// the command line wins. Below those come envoyproxy/ratelimit's variables
// (GRPC_PORT, REDIS_URL, ...), and run as "ratelimit", as that project's
// image runs it, its defaults: see internal/refenv and docs/migration.md.
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
	// The time zones of calendar windows (time_zone in rule files), built
	// in: the distroless image has no /usr/share/zoneinfo.
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := runAs(ctx, os.Args[0], os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		reportFatal(err, os.Stderr)
		os.Exit(1)
	}
}

// reportFatal writes err, which ends the program, to stderr, unless the
// log has it already in a format a plain line would break (logFatal).
func reportFatal(err error, stderr io.Writer) {
	if errors.As(err, new(loggedError)) {
		return
	}
	fmt.Fprintf(stderr, "ratelimit-sidecar: %v\n", err)
}

// run is the whole program; it returns when ctx is cancelled and shutdown
// has finished, or on a startup error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runAs(ctx, "ratelimit-sidecar", args, os.Environ(), stdout, stderr)
}

// runAs is run for the program run as argv0 (os.Args[0]; run as
// "ratelimit", envoyproxy/ratelimit's defaults apply) in the environment
// environ (os.Environ()).
func runAs(ctx context.Context, argv0 string, args, environ []string, stdout, stderr io.Writer) error {
	// A subcommand may follow --flag=value arguments, as it does when an
	// image's entrypoint passes server flags before the command's own
	// (docker run IMAGE check): those it shares with the server (--config)
	// it takes as its defaults, as it does their RLS_ variables, and its
	// own arguments override them.
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			c, ok := lookupCommand(a)
			if !ok {
				return unknownCommand(a)
			}
			return c.run(append(c.inherited(args[:i], lookupIn(environ)), args[i+1:]...), stdout, stderr)
		}
		if !strings.Contains(a, "=") {
			break
		}
	}
	// Help and the version, asked for among the server's flags, need
	// neither valid flags nor a valid environment.
	for _, a := range args {
		if a == "--" {
			break
		}
		if isHelpFlag(a) {
			writeUsage(stdout)
			return nil
		}
		if isVersionFlag(a) {
			buildInfo().Write(stdout)
			return nil
		}
	}
	cfg, err := parseFlagsAs(argv0, args, lookupIn(environ), environ, stderr)
	if err != nil {
		return err
	}
	if cfg.version {
		buildInfo().Write(stdout)
		return nil
	}
	return serve(ctx, cfg, stderr)
}

// lookupIn returns a getenv that reads environ ("KEY=value" entries) as
// os.LookupEnv reads the process's: the first entry of a key wins.
func lookupIn(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if _, dup := m[k]; ok && !dup {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
