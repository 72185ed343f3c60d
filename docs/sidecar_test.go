package docs_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The docs are checked against the sidecar as its users run it: the
// binary, built once per test run from cmd/ratelimit-sidecar. Its flags
// are read from its help, not from package main, which no other package
// can import.

// startTimeout bounds how long a sidecar may take to log that it started.
const startTimeout = 30 * time.Second

var (
	buildOnce sync.Once
	binDir    string // the temporary directory the binary is built into
	binPath   string
	buildErr  error
)

// TestMain removes the binary after the tests, and checks that none left
// a goroutine behind (a sidecar's output reader, a gRPC connection).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sidecarBinary returns the path of the sidecar's binary, building it the
// first time a test asks.
func sidecarBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go tool to build the sidecar: %w", err)
			return
		}
		if binDir, err = os.MkdirTemp("", "docs-sidecar"); err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(binDir, "ratelimit-sidecar")
		cmd := exec.Command(goTool, "build", "-o", binPath, "./cmd/ratelimit-sidecar")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ratelimit-sidecar: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runSidecar runs the binary with args in dir, in an empty environment
// (so that no RLS_ variable of the test's own changes what it does), and
// returns what it printed on stdout and stderr.
func runSidecar(t *testing.T, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(sidecarBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// parseOnly runs the server's command line args as far as parsing and
// checking it, and no further: --version=true, unlike --version, is not
// taken before the flags are parsed, so the whole command line is parsed
// and checked (as the server would) and then the version is printed.
func parseOnly(t *testing.T, args []string) error {
	t.Helper()
	_, stderr, err := runSidecar(t, ".", append(args, "--version=true")...)
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr))
	}
	return nil
}

// TestParseOnly: parseOnly refuses what the server refuses, both what
// the flag package cannot parse and what the server checks afterwards.
func TestParseOnly(t *testing.T) {
	if err := parseOnly(t, []string{"--config", "config/"}); err != nil {
		t.Errorf("a good command line: %v", err)
	}
	for _, args := range [][]string{
		{"--bogus"},
		{"--drain-delay", "soon"},
		{"--log-format", "xml"},
		{"--config", "config/", "extra"},
	} {
		if err := parseOnly(t, args); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
}

// flagInfo is one flag as help lists it.
type flagInfo struct {
	usage string
	// def is the default as the flag package holds it (Flag.DefValue).
	def    string
	isBool bool // help names no type: a bool flag
}

// zeroDefaults are the zero values of the types of flag.Value flags, as
// their String gives them, for those whose zero is not "": help prints
// no default for a flag at its zero value.
var zeroDefaults = map[string]string{
	"response-headers": "none",
}

// helpFlags parses the flags of the flag package's PrintDefaults output,
// as `ratelimit-sidecar help` ends with and `help <command>` shows: a
// "  -name [type]" line each, then its usage on lines indented by four
// blanks and a tab, ending in " (default X)" unless the default is the
// zero value of the flag's type.
func helpFlags(text string) map[string]flagInfo {
	out := map[string]flagInfo{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], "  -")
		if !ok {
			continue
		}
		name, typ, _ := strings.Cut(rest, " ")
		var usage []string
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "    \t") {
			i++
			usage = append(usage, strings.TrimPrefix(lines[i], "    \t"))
		}
		f := flagInfo{usage: strings.Join(usage, "\n"), isBool: typ == ""}
		if at := strings.LastIndex(f.usage, " (default "); at >= 0 && strings.HasSuffix(f.usage, ")") {
			f.def = f.usage[at+len(" (default ") : len(f.usage)-1]
			if s, err := strconv.Unquote(f.def); err == nil {
				f.def = s
			}
		} else {
			f.def = zeroOf(name, typ)
		}
		out[name] = f
	}
	return out
}

// zeroOf is the DefValue of the flag name, of help's type name typ, at
// its zero value.
func zeroOf(name, typ string) string {
	switch typ {
	case "":
		return "false" // a bool flag
	case "string":
		return ""
	case "int", "uint", "int64", "uint64", "float":
		return "0"
	case "duration":
		return "0s"
	}
	// A backquoted word of the usage took the type's place: a string
	// flag or a flag.Value.
	return zeroDefaults[name]
}

var (
	flagsOnce sync.Once
	flagsList map[string]flagInfo // the server's
	flagsErr  error
)

// serverFlags returns the server's flags, as `ratelimit-sidecar help`
// lists them.
func serverFlags(t *testing.T) map[string]flagInfo {
	t.Helper()
	bin := sidecarBinary(t)
	flagsOnce.Do(func() {
		out, err := exec.Command(bin, "help").Output()
		if err != nil {
			flagsErr = fmt.Errorf("ratelimit-sidecar help: %w", err)
			return
		}
		_, list, ok := strings.Cut(string(out), "\nServer flags:\n")
		if !ok {
			flagsErr = fmt.Errorf("ratelimit-sidecar help has no \"Server flags:\" line:\n%s", out)
			return
		}
		flagsList = helpFlags(list)
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	if len(flagsList) < 50 {
		t.Fatalf("read %d flags from ratelimit-sidecar help: its shape changed", len(flagsList))
	}
	return flagsList
}

// commandFlags returns the flags of a subcommand, as `ratelimit-sidecar
// help <command>` lists them.
func commandFlags(t *testing.T, command string) map[string]flagInfo {
	t.Helper()
	out, _, err := runSidecar(t, ".", "help", command)
	if err != nil {
		t.Fatalf("ratelimit-sidecar help %s: %v", command, err)
	}
	fs := helpFlags(out)
	if len(fs) == 0 {
		t.Fatalf("no flags in ratelimit-sidecar help %s:\n%s", command, out)
	}
	return fs
}

func TestHelpFlags(t *testing.T) {
	const text = "Server flags:\n" +
		"  -addr string\n    \taddress (default \"127.0.0.1:8081\")\n" +
		"  -on\n    \tturn it on\n" +
		"  -n int\n    \thow many;\n    \tover two lines (default 64)\n" +
		"  -wait duration\n    \thow long\n" +
		"  -endpoint URL\n    \tthe `URL`\n" +
		"  -response-headers mode\n    \tthe `mode`\n" +
		"  -keys mode\n    \tthe `mode` (default shared)\n"
	want := map[string]flagInfo{
		"addr":             {usage: "address (default \"127.0.0.1:8081\")", def: "127.0.0.1:8081"},
		"on":               {usage: "turn it on", def: "false", isBool: true},
		"n":                {usage: "how many;\nover two lines (default 64)", def: "64"},
		"wait":             {usage: "how long", def: "0s"},
		"endpoint":         {usage: "the `URL`"},
		"response-headers": {usage: "the `mode`", def: "none"},
		"keys":             {usage: "the `mode` (default shared)", def: "shared"},
	}
	got := helpFlags(text)
	if len(got) != len(want) {
		t.Errorf("helpFlags read %d flags, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
	}
}

// sidecar is a running sidecar process.
type sidecar struct {
	grpcAddr, httpAddr, adminAddr string
	rls                           rlsv3.RateLimitServiceClient
}

// startSidecar starts the binary with args (and gRPC and HTTP on free
// loopback ports unless args name them), waits until it logs that it
// started, and stops it at the end of the test.
func startSidecar(t *testing.T, args ...string) *sidecar {
	t.Helper()
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(sidecarBinary(t), args...)
	cmd.Env = []string{}
	// Killed with this process too, should it die before cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log safeBuffer
	started := make(chan *sidecar, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			log.WriteLine(sc.Text())
			var l struct {
				Msg       string `json:"msg"`
				GRPCAddr  string `json:"grpc_addr"`
				HTTPAddr  string `json:"http_addr"`
				AdminAddr string `json:"admin_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "ratelimit-sidecar started" {
				started <- &sidecar{grpcAddr: l.GRPCAddr, httpAddr: l.HTTPAddr, adminAddr: l.AdminAddr}
			}
		}
		io.Copy(io.Discard, r) //nolint:errcheck // a line too long: drain the rest
	}()
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		w.Close()
		exited <- err
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		if err := <-exited; err != nil {
			t.Errorf("sidecar %s: %v\n%s", strings.Join(args, " "), err, log.String())
		}
		<-copied
	}
	var s *sidecar
	select {
	case s = <-started:
	case err := <-exited:
		<-copied
		t.Fatalf("sidecar %s exited before it started: %v\n%s", strings.Join(args, " "), err, log.String())
	case <-time.After(startTimeout):
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-exited
		<-copied
		t.Fatalf("sidecar %s did not log that it started within %v:\n%s", strings.Join(args, " "), startTimeout, log.String())
	}
	t.Cleanup(stop)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.rls = rlsv3.NewRateLimitServiceClient(conn)
	return s
}

// safeBuffer is a log that one goroutine writes and another reads.
type safeBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *safeBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.WriteString(s + "\n")
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
