package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// runCLI runs the program with args, in an environment of env alone, and
// returns what it wrote and its error.
func runCLI(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errw bytes.Buffer
	err = runAs(context.Background(), "ratelimit-sidecar", args, env, &out, &errw)
	return out.String(), errw.String(), err
}

// TestHelp: help, -h and --help list every subcommand, the server, and
// the server's flags, on stdout, and succeed. They once printed only the
// server's flags, to stderr, and `help` failed with "unexpected argument".
func TestHelp(t *testing.T) {
	tests := [][]string{
		{"help"},
		{"--help"},
		{"-help"},
		{"-h"},
		{"--config", "rules/", "-h"},
		{"--config=/etc/ratelimit-sidecar/", "--grpc-addr=0.0.0.0:8081", "help"}, // after an image's entrypoint
	}
	for _, give := range tests {
		t.Run(strings.Join(give, " "), func(t *testing.T) {
			stdout, _, err := runCLI(t, nil, give...)
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			for _, want := range []string{
				"\n  (none)    serve Envoy's",
				"\n  check     ",
				"\n  explain   ",
				"\n  version   ",
				"\n  help      ",
				"\n  -grpc-addr string\n",
				"RLS_GRPC_ADDR",
			} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
		})
	}
}

// TestHelpOfACommand: `help check` is `check -h`, on stdout.
func TestHelpOfACommand(t *testing.T) {
	for _, name := range []string{"check", "explain", "version"} {
		t.Run(name, func(t *testing.T) {
			stdout, _, err := runCLI(t, nil, "help", name)
			if err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if want := "Usage: ratelimit-sidecar " + name; !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		})
	}
	if _, _, err := runCLI(t, nil, "help", "chek"); err == nil || !strings.Contains(err.Error(), `did you mean "check"?`) {
		t.Errorf("help chek: err = %v, want a suggestion of check", err)
	}
}

// TestUnknownCommand: a first argument that is not a flag and not a
// command is named, with the nearest command when one is near, or the
// list of commands. It was "unexpected argument", with no hint.
func TestUnknownCommand(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"chek"}, `unknown command "chek"; did you mean "check"?`},
		{[]string{"cehck", "--config", "x"}, `unknown command "cehck"; did you mean "check"?`},
		{[]string{"explian"}, `unknown command "explian"; did you mean "explain"?`},
		{[]string{"verison"}, `unknown command "verison"; did you mean "version"?`},
		{[]string{"hlep"}, `unknown command "hlep"; did you mean "help"?`},
		{[]string{"ver"}, `unknown command "ver"; did you mean "version"?`},
		{[]string{"--config=/etc/ratelimit-sidecar/", "chek"}, `unknown command "chek"; did you mean "check"?`},
		{[]string{"serve"}, `unknown command "serve"; the commands are check, explain, version and help, and with none the server runs`},
		{[]string{"config/"}, `unknown command "config/"; the commands are`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			_, _, err := runCLI(t, nil, tt.give...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			if errors.Is(err, flag.ErrHelp) {
				t.Errorf("err is flag.ErrHelp, which exits 0")
			}
		})
	}
}

// TestUnknownFlag: a flag the server does not have, or a bad value,
// fails with one line that names the nearest flag, when one is near,
// and points to help. It printed the whole usage, about 195 lines, to
// stderr.
func TestUnknownFlag(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--grpc-adr", "127.0.0.1:0"}, `unknown flag --grpc-adr; did you mean --grpc-addr? (ratelimit-sidecar help lists the flags)`},
		{[]string{"-redis-ulr=redis://r:6379"}, `unknown flag --redis-ulr; did you mean --redis-url?`},
		{[]string{"--no-such-thing"}, `unknown flag --no-such-thing (ratelimit-sidecar help lists the flags)`},
		{[]string{"--max-entries", "many"}, `invalid value "many" for flag -max-entries: parse error (ratelimit-sidecar help lists the flags)`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			stdout, stderr, err := runCLI(t, nil, tt.give...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("err has more than one line: %q", err)
			}
			if stdout != "" || stderr != "" {
				t.Errorf("printed %d lines to stdout and %d to stderr, want none: the error is the one line", strings.Count(stdout, "\n"), strings.Count(stderr, "\n"))
			}
		})
	}
}

// TestUnknownCommandFlag: a subcommand's flag that does not exist, or a
// bad value, fails as the server's do: one line naming the nearest flag
// and where the command's flags are listed. It printed "flag provided but
// not defined: -confg" and the command's whole usage.
func TestUnknownCommandFlag(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"check", "--confg", "config/"}, `check: unknown flag --confg; did you mean --config? (ratelimit-sidecar help check lists its flags)`},
		{[]string{"explain", "--domian", "edge"}, `explain: unknown flag --domian; did you mean --domain?`},
		{[]string{"explain", "--descriptr", "a=b"}, `explain: unknown flag --descriptr; did you mean --descriptor?`},
		{[]string{"version", "--verbose"}, `version: unknown flag --verbose (ratelimit-sidecar help version lists its flags)`},
		{[]string{"check", "--merge-domains=maybe"}, `check: invalid boolean value "maybe" for -merge-domains: parse error (ratelimit-sidecar help check lists its flags)`},
		{[]string{"--config=/etc/ratelimit-sidecar/", "check", "--confg", "x"}, `check: unknown flag --confg; did you mean --config?`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			stdout, stderr, err := runCLI(t, nil, tt.give...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("err has more than one line: %q", err)
			}
			if stdout != "" || stderr != "" {
				t.Errorf("printed %d lines to stdout and %d to stderr, want none: the error is the one line\n%s", strings.Count(stdout, "\n"), strings.Count(stderr, "\n"), stderr)
			}
		})
	}
	// -h still prints the command's usage, to stderr, as before.
	_, stderr, err := runCLI(t, nil, "check", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "Usage: ratelimit-sidecar check") || !strings.Contains(stderr, "-config") {
		t.Errorf("check -h: %v\n%s", err, stderr)
	}
}

// TestUnknownRLSAtStart: an RLS_ variable that no setting reads is named
// in a warning as the server starts, with the nearest setting's variable
// when one is near. The warning was there; the hint was not.
func TestUnknownRLSAtStart(t *testing.T) {
	env := []string{"RLS_GRPC_ADR=127.0.0.1:1", "RLS_NOTHING_LIKE_IT=1", "RLS_LOG_LEVEL=info"}
	// A missing rule directory stops the server after the start log.
	_, stderr, err := runCLI(t, env, "--config", t.TempDir()+"/missing", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if err == nil {
		t.Fatal("started with a missing rule directory")
	}
	for _, want := range []string{
		`"msg":"RLS_ environment variables that no setting reads: misspelt?"`,
		`"variables":["RLS_GRPC_ADR","RLS_NOTHING_LIKE_IT"]`,
		`"did_you_mean":["RLS_GRPC_ADR: RLS_GRPC_ADDR"]`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("log lacks %s:\n%s", want, stderr)
		}
	}
}

// TestHelpListsEveryCommand: help has a line for every command the
// program dispatches, since both come from one table.
func TestHelpListsEveryCommand(t *testing.T) {
	stdout, _, err := runCLI(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		if !strings.Contains(stdout, "\n  "+c.name+strings.Repeat(" ", 10-len(c.name))+c.summary+"\n") {
			t.Errorf("help lacks the line of %s:\n%s", c.name, stdout)
		}
		if _, _, err := runCLI(t, nil, c.name, "-h"); !errors.Is(err, flag.ErrHelp) && err != nil {
			t.Errorf("%s -h: %v", c.name, err)
		}
	}
}

// TestHelpShowsRequestBounds: help shows the defaults of the request's
// bounds, which it once printed without, from settings it built empty.
func TestHelpShowsRequestBounds(t *testing.T) {
	stdout, _, err := runCLI(t, nil, "help")
	if err != nil {
		t.Fatal(err)
	}
	d := limits.DefaultRequestLimits
	for name, def := range map[string]string{
		"max-descriptors": strconv.Itoa(d.MaxDescriptors),
		"max-entries":     strconv.Itoa(d.MaxEntries),
		"max-value-bytes": strconv.Itoa(d.MaxValueBytes),
		"max-hits-addend": strconv.FormatUint(d.MaxHits, 10),
	} {
		_, rest, ok := strings.Cut(stdout, "\n  -"+name+" ")
		usage, _, _ := strings.Cut(rest, "\n  -")
		if want := "(default " + def + ")"; !ok || !strings.Contains(usage, want) {
			t.Errorf("help of --%s lacks %q:\n  -%s %s", name, want, name, usage)
		}
	}
}
