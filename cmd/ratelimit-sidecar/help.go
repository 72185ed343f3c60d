package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refenv"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/suggest"
)

// command is a subcommand: `ratelimit-sidecar <name> <args>`.
type command struct {
	name    string
	summary string // one line for help
	run     func(args []string, stdout, stderr io.Writer) error
	// shares are the server's flags the command has too, with the same
	// meaning: given before the command (an image's entrypoint), they
	// are the command's defaults.
	shares []string
}

// ruleFlags are the server's flags that say where the rules are and how
// they load.
var ruleFlags = []string{"config", "merge-domains", "calendar-months", "allow-empty-rules"}

// commands returns the subcommands, in the order help lists them. It is a
// function, not a variable, because help is one of them.
func commands() []command {
	return []command{
		{"check", "validate rule files and print their rules as a tree, or every problem", runCheck, ruleFlags},
		{"explain", "show how descriptors match the rules, the limits that apply and their keys", runExplain, ruleFlags[:3]},
		{"version", "print the version, commit (when the build recorded one), Go version and platform", runVersion, nil},
		{"help", "print this help, or a command's flags: help <command>", runHelp, nil},
	}
}

// inherited returns the arguments that set the flags c shares with the
// server as the server would have them: from their RLS_ variables (read
// by getenv), then from lead, --flag=value arguments before the command.
// Later arguments win, so lead beats the environment.
func (c command) inherited(lead []string, getenv func(string) (string, bool)) []string {
	var out []string
	for _, name := range c.shares {
		if v, ok := getenv(refenv.RLSVar(name)); ok {
			out = append(out, "--"+name+"="+v)
		}
	}
	for _, a := range lead {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if slices.Contains(c.shares, name) {
			out = append(out, a)
		}
	}
	return out
}

// lookupCommand returns the subcommand name, if there is one.
func lookupCommand(name string) (command, bool) {
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands()[i], true
}

// isHelpFlag reports whether a asks for help: -h, -help or --help.
func isHelpFlag(a string) bool {
	switch a {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// runHelp implements `ratelimit-sidecar help [command]`: the usage, or a
// command's own (its -h), on stdout.
func runHelp(args []string, stdout, _ io.Writer) error {
	switch len(args) {
	case 0:
		writeUsage(stdout)
		return nil
	case 1:
	default:
		return fmt.Errorf("help: want at most one command, got %q", args)
	}
	c, ok := lookupCommand(args[0])
	if !ok && !isHelpFlag(args[0]) {
		return unknownCommand(args[0])
	}
	if !ok || c.name == "help" {
		writeUsage(stdout)
		return nil
	}
	if err := c.run([]string{"-h"}, stdout, stdout); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil
}

// writeUsage writes the program's help: the server and each command, one
// line each, the environment, and the server's flags.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, `ratelimit-sidecar: Envoy's rate-limit service (RLS v3), to run beside Envoy.

Usage:
  ratelimit-sidecar [flags]                the server
  ratelimit-sidecar <command> [arguments]

Commands:
`)
	fmt.Fprintf(w, "  %-9s %s\n", "(none)", "serve Envoy's ShouldRateLimit calls (gRPC), /healthz, /readyz and /metrics")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'ratelimit-sidecar help <command>' for a command's flags.

Every server flag can also be set by an environment variable: RLS_ and the
flag's name in upper case with _ for - (RLS_GRPC_ADDR for --grpc-addr); the
command line wins. envoyproxy/ratelimit's variables (GRPC_PORT, REDIS_URL,
...) come below those: see docs/migration.md.

Server flags:
`)
	fs := flag.NewFlagSet("ratelimit-sidecar", flag.ContinueOnError)
	newSettings().define(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// unknownCommand is the error for a first argument that is neither a flag
// nor a command: with the nearest command, if one is near.
func unknownCommand(name string) error {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if near, ok := suggest.Nearest(name, names); ok {
		return fmt.Errorf("unknown command %q; did you mean %q?", name, near)
	}
	list := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	return fmt.Errorf("unknown command %q; the commands are %s, and with none the server runs (ratelimit-sidecar help)", name, list)
}

// helpHint ends a command-line error: where the flags are listed.
const helpHint = " (ratelimit-sidecar help lists the flags)"

// flagError is the one-line error for a command line that fs cannot
// parse: an unknown flag is named with the nearest flag, if one is near.
func flagError(fs *flag.FlagSet, err error) error {
	return flagErrorHint(fs, err, helpHint)
}

// flagErrorHint is flagError ending in hint, where the flags are listed.
func flagErrorHint(fs *flag.FlagSet, err error, hint string) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return fmt.Errorf("%w%s", err, hint)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near, ok := suggest.Nearest(name, names); ok {
		return fmt.Errorf("unknown flag --%s; did you mean --%s?%s", name, near, hint)
	}
	return fmt.Errorf("unknown flag --%s%s", name, hint)
}

// parseCommand parses the arguments of the subcommand whose flags fs
// holds (named "ratelimit-sidecar <command>"). -h prints its usage
// (fs.Usage) to fs.Output(); any other mistake is one line, as the
// server's are (flagError), without the usage.
func parseCommand(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return err
	}
	if err != nil {
		name := strings.TrimPrefix(fs.Name(), "ratelimit-sidecar ")
		return fmt.Errorf("%s: %w", name, flagErrorHint(fs, err, " (ratelimit-sidecar help "+name+" lists its flags)"))
	}
	return nil
}
