package docs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
)

// The tests in this file run what README.md and the pages under docs/
// show: the flags they name, the commands, the check and explain
// sessions, the Quick start's request and the rule files.

// flagPlaceholders are --names the docs use for "some flag", not a flag.
var flagPlaceholders = map[string]bool{
	"flag": true, // docker run … IMAGE --flag
}

var (
	// flagRE finds --name, not inside a word or a longer run of dashes;
	// a trailing '*' (--xds-tls-*) makes it a prefix.
	flagRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])--([a-z][a-z0-9-]*)(\*?)`)
	// toolRE finds the names of commands whose flags a line may show.
	// ratelimit-sidecar's own flags are checked; the others' are not.
	toolRE = regexp.MustCompile("(?:^|[\\s`(/])(ratelimit-sidecar|curl|docker|git|helm|kubectl|redis-cli|redis-server|redis-benchmark|grpcurl|Envoy's)(?:[\\s`]|$)")
)

// otherCommand reports whether a line of a code block runs another
// program than the sidecar: every flag on it is that program's, even
// after an argument named ratelimit-sidecar (a Helm release, a path).
func otherCommand(line string) bool {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
	for len(f) > 0 && strings.Contains(f[0], "=") { // VAR=value before the command
		f = f[1:]
	}
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "curl", "docker", "git", "helm", "kubectl", "redis-cli", "redis-server", "redis-benchmark", "grpcurl", "envoy", "skopeo", "crane":
		return true
	}
	return false
}

// flagMention is a --name on a line of a Markdown file.
type flagMention struct {
	line   int
	name   string
	prefix bool // written --name-*, so it stands for flags starting with name
}

// flagMentions returns the --names of text that must be the sidecar's:
// on each line (a fenced command continued with '\' is one line), those
// that no other command's name precedes. The nearest command name before
// a --name decides: `ratelimit-sidecar` (or none: prose and tables) means
// the sidecar's; curl, docker, git, helm, kubectl, redis-cli,
// redis-server, redis-benchmark, grpcurl and "Envoy's" mean another
// program's, which is not checked.
func flagMentions(text string) []flagMention {
	var out []flagMention
	lines := mdLines(text)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		line := l.text
		for l.fenced && strings.HasSuffix(strings.TrimSpace(line), "\\") && i+1 < len(lines) && lines[i+1].fenced {
			i++
			line = strings.TrimSuffix(strings.TrimSpace(line), "\\") + " " + lines[i].text
		}
		if l.fenced && otherCommand(line) {
			continue
		}
		tools := toolRE.FindAllStringSubmatchIndex(line, -1)
		for _, m := range flagRE.FindAllStringSubmatchIndex(line, -1) {
			at := m[2] - 2
			tool := "ratelimit-sidecar"
			for _, tm := range tools {
				if tm[3] <= at {
					tool = line[tm[2]:tm[3]]
				}
			}
			if tool != "ratelimit-sidecar" {
				continue
			}
			out = append(out, flagMention{line: l.n, name: line[m[2]:m[3]], prefix: m[5] > m[4]})
		}
	}
	return out
}

// sidecarFlagNames returns the names of every flag of the sidecar, and
// of its check and explain subcommands, as help lists them.
func sidecarFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name := range serverFlags(t) {
		names[name] = true
	}
	for _, command := range []string{"check", "explain"} {
		for name := range commandFlags(t, command) {
			names[name] = true
		}
	}
	for _, want := range []string{"config", "redis-url", "version", "domain", "descriptor"} {
		if !names[want] {
			t.Fatalf("flag --%s not found; found %v", want, names)
		}
	}
	return names
}

// TestDocsFlags checks that every --flag README.md and the docs name as
// the sidecar's (see flagMentions for which) is one of its flags.
func TestDocsFlags(t *testing.T) {
	names := sidecarFlagNames(t)
	checked := 0
	for _, doc := range docFiles(t) {
		for _, m := range flagMentions(readDoc(t, doc)) {
			checked++
			switch {
			case flagPlaceholders[m.name]:
			case m.prefix:
				if !hasPrefixed(names, m.name) {
					t.Errorf("%s:%d: --%s*: no flag starts so", doc, m.line, m.name)
				}
			case !names[m.name]:
				t.Errorf("%s:%d: --%s is not a flag of ratelimit-sidecar", doc, m.line, m.name)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d flag mentions; the docs hold far more, so the scan is broken", checked)
	}
}

// hasPrefixed reports whether a name in names starts with prefix.
func hasPrefixed(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// shellWords splits a command line as sh would for the docs' commands:
// on blanks, with single-quoted words and backslash line ends.
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t' || r == '\\':
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// sidecarCommand returns the arguments of a command line that runs the
// sidecar (`ratelimit-sidecar …` or `go run ./cmd/ratelimit-sidecar …`),
// with a trailing comment removed.
func sidecarCommand(line string) ([]string, bool) {
	line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	words := shellWords(line)
	switch {
	case len(words) >= 1 && words[0] == "ratelimit-sidecar":
		return words[1:], true
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/ratelimit-sidecar":
		return words[3:], true
	}
	return nil, false
}

// TestDocsCommandsParse checks that every command in a sh block of
// README.md and the docs that runs the sidecar's server parses as written,
// and passes the checks the server makes of its flags before it starts
// (parseOnly).
func TestDocsCommandsParse(t *testing.T) {
	n := 0
	for _, doc := range docFiles(t) {
		lines := mdLines(readDoc(t, doc))
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			if !l.fenced || l.info != "sh" {
				continue
			}
			line := l.text
			for strings.HasSuffix(strings.TrimSpace(line), "\\") && i+1 < len(lines) && lines[i+1].fenced {
				i++
				line = strings.TrimSuffix(strings.TrimSpace(line), "\\") + " " + lines[i].text
			}
			args, ok := sidecarCommand(line)
			if !ok || slices.Contains(args, "check") || slices.Contains(args, "explain") {
				continue
			}
			n++
			if err := parseOnly(t, args); err != nil {
				t.Errorf("%s:%d: %s: %v", doc, l.n, strings.TrimSpace(line), err)
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d sidecar commands in sh blocks; the Quick start and Redis sections hold more", n)
	}
}

// TestDocsConsoleSessions runs every `$ go run ./cmd/ratelimit-sidecar
// check|explain …` of a console block in README.md and the docs, from
// the repository's root, and compares what it prints with the lines that
// follow it in the block.
func TestDocsConsoleSessions(t *testing.T) {
	type session struct {
		where string
		args  []string
		want  string
	}
	var sessions []session
	for _, doc := range docFiles(t) {
		var cur *session
		for _, l := range mdLines(readDoc(t, doc)) {
			switch {
			case !l.fenced || l.info != "console" || strings.HasPrefix(strings.TrimSpace(l.text), "```"):
				cur = nil
			case strings.HasPrefix(l.text, "$ "):
				cur = nil
				if args, ok := sidecarCommand(l.text); ok && len(args) > 0 && (args[0] == "check" || args[0] == "explain") {
					sessions = append(sessions, session{where: doc + ":" + strconv.Itoa(l.n), args: args})
					cur = &sessions[len(sessions)-1]
				}
			case cur != nil:
				cur.want += l.text + "\n"
			}
		}
	}
	if len(sessions) < 2 {
		t.Fatalf("found %d check or explain sessions, want the two of the rules page", len(sessions))
	}
	for _, s := range sessions {
		stdout, stderr, err := runSidecar(t, repoRoot, s.args...)
		if err != nil {
			t.Errorf("%s: %v\n%s", s.where, err, stderr)
			continue
		}
		if got, want := strings.TrimRight(stdout, "\n"), strings.TrimRight(s.want, "\n"); got != want {
			t.Errorf("%s: the command prints\n%s\nthe page shows\n%s", s.where, got, want)
		}
	}
}

func TestFlagMentions(t *testing.T) {
	const text = "Set `--redis-url` and `--xds-tls-*`; keep it above Envoy's `--concurrency`.\n" +
		"| `--grpc-addr` | x |\n|---|---|\n" +
		"```sh\n" +
		"go run ./cmd/ratelimit-sidecar --config config/ \\\n  --bogus\n" +
		"docker build --build-arg VERSION=$(git describe --tags) -t x .\n" +
		"curl -s --data-urlencode a=b 127.0.0.1:8080/x\n" +
		"helm upgrade eg oci://docker.io/envoyproxy/gateway-helm --version 1\n" +
		"```\n"
	want := []flagMention{
		{1, "redis-url", false},
		{1, "xds-tls-", true},
		{2, "grpc-addr", false},
		{5, "config", false},
		{5, "bogus", false},
	}
	if got := flagMentions(text); !slices.Equal(got, want) {
		t.Errorf("flagMentions =\n%v, want\n%v", got, want)
	}
}

func TestShellWords(t *testing.T) {
	got := shellWords(`go run ./cmd/ratelimit-sidecar explain --config config/ --descriptor 'tenant=acme,user=42' \`)
	want := []string{"go", "run", "./cmd/ratelimit-sidecar", "explain", "--config", "config/", "--descriptor", "tenant=acme,user=42"}
	if !slices.Equal(got, want) {
		t.Errorf("shellWords = %q, want %q", got, want)
	}
}

// TestREADMEQuickStart sends the Quick start's grpcurl request, and then
// the same without hits_addend, to a sidecar on config/, and compares
// the answers with the two JSON blocks that follow the command.
func TestREADMEQuickStart(t *testing.T) {
	readme := readDoc(t, "README.md")
	var req string
	var want []string
	var block strings.Builder
	inJSON := false
	for _, l := range mdLines(readme) {
		text := strings.TrimSpace(l.text)
		switch {
		case req == "" && l.fenced && l.info == "sh" && strings.HasPrefix(text, "grpcurl ") && strings.Contains(text, " -d '"):
			_, rest, _ := strings.Cut(text, " -d '")
			req, _, _ = strings.Cut(rest, "'")
		case req == "" || len(want) == 2:
		case l.fenced && l.info == "json" && strings.HasPrefix(text, "```") && !inJSON:
			inJSON = true
		case inJSON && strings.HasPrefix(text, "```"):
			want = append(want, block.String())
			block.Reset()
			inJSON = false
		case inJSON:
			block.WriteString(l.text + "\n")
		}
	}
	if req == "" || len(want) != 2 {
		t.Fatalf("README.md: found request %q and %d JSON answers, want a grpcurl -d request and two answers after it", req, len(want))
	}
	var r rlsv3.RateLimitRequest
	if err := protojson.Unmarshal([]byte(req), &r); err != nil {
		t.Fatalf("the Quick start's request: %v", err)
	}
	again := proto.Clone(&r).(*rlsv3.RateLimitRequest)
	again.HitsAddend = 0
	var wants [2]rlsv3.RateLimitResponse
	for i, w := range want {
		if err := protojson.Unmarshal([]byte(w), &wants[i]); err != nil {
			t.Fatalf("the Quick start's answer %d: %v", i+1, err)
		}
	}
	// The second answer holds only while the bucket has not refilled a
	// token (200 ms): on a machine so busy that the two calls are further
	// apart, try again on a fresh sidecar, a few times at most.
	for attempt := 1; ; attempt++ {
		s := startSidecar(t, "--config", "../config/")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		first, err := s.rls.ShouldRateLimit(ctx, &r)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		second, err := s.rls.ShouldRateLimit(ctx, again)
		elapsed := time.Since(start)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if elapsed > 150*time.Millisecond && attempt < 3 {
			t.Logf("attempt %d: the two calls took %v, more than a token's 200 ms allows for; again", attempt, elapsed)
			continue
		}
		for i, got := range []*rlsv3.RateLimitResponse{first, second} {
			if !proto.Equal(got, &wants[i]) {
				t.Errorf("answer %d is\n%s\nthe Quick start shows\n%s", i+1, protojson.Format(got), want[i])
			}
		}
		return
	}
}

// TestDocsRuleExamples loads every yaml block of README.md and the docs
// that is a whole rule file (it has a top-level domain:), so that no
// example shows a rule the sidecar would refuse.
func TestDocsRuleExamples(t *testing.T) {
	n := 0
	for _, doc := range docFiles(t) {
		var block strings.Builder
		start := 0
		for _, l := range mdLines(readDoc(t, doc)) {
			switch {
			case !l.fenced || l.info != "yaml":
			case strings.HasPrefix(strings.TrimSpace(l.text), "```") && start == 0:
				start = l.n
			case strings.HasPrefix(strings.TrimSpace(l.text), "```"):
				if text := block.String(); strings.HasPrefix(text, "domain:") || strings.Contains(text, "\ndomain:") {
					n++
					path := filepath.Join(t.TempDir(), "rules.yaml")
					if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
						t.Fatal(err)
					}
					if _, err := config.Load(path, config.Options{}); err != nil {
						t.Errorf("%s:%d: the rule file shown does not load: %v", doc, start, err)
					}
				}
				block.Reset()
				start = 0
			default:
				block.WriteString(l.text + "\n")
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d rule files in yaml blocks; README.md and docs/rules.md show one each", n)
	}
}

// TestREADMECounterCommands runs the curl commands of README.md and
// docs/debugging.md that call /debug/counters against a sidecar on the
// default rules started with --admin-counter-reset, so that they stay
// true: each, the reset too, must answer 200 with JSON about the
// descriptor it names.
func TestREADMECounterCommands(t *testing.T) {
	var cmds []string
	for _, doc := range []string{"README.md", "docs/debugging.md"} {
		found := curlCommands(t, doc, "/debug/counters")
		if len(found) < 2 {
			t.Fatalf("%s: %d curl commands for /debug/counters, want a read and a reset", doc, len(found))
		}
		cmds = append(cmds, found...)
	}
	s := startSidecar(t, "--config", "../config/", "--admin-counter-reset")
	_, err := s.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{{
		Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "42"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range cmds {
		req, err := curlRequest(cmd, s.adminAddr)
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		var v struct {
			Domain      string
			Descriptors []struct{ Descriptor string }
		}
		if r.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || v.Domain != "edge" || len(v.Descriptors) == 0 || v.Descriptors[0].Descriptor != "tenant=acme,user=42" {
			t.Errorf("%q: %d %s", cmd, r.StatusCode, b)
		}
	}
}

// curlCommands returns the curl commands in doc's sh blocks whose URL
// holds path, each joined onto one line.
func curlCommands(t *testing.T, doc, path string) []string {
	t.Helper()
	var out []string
	inSh := false
	cmd := ""
	for line := range strings.SplitSeq(readDoc(t, doc), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inSh = line == "```sh"
		case !inSh:
		case cmd != "" || strings.HasPrefix(line, "curl "):
			cmd += strings.TrimSuffix(strings.TrimSpace(line), "\\")
			if strings.HasSuffix(line, "\\") {
				continue
			}
			if strings.Contains(cmd, path) {
				out = append(out, cmd)
			}
			cmd = ""
		}
	}
	return out
}

// curlRequest turns the curl command cmd, of the options the docs use
// (-s, -G, -d, --data-urlencode, single quotes), into a request to addr.
func curlRequest(cmd, addr string) (*http.Request, error) {
	var args []string
	for _, f := range strings.Fields(cmd) {
		args = append(args, strings.Trim(f, "'"))
	}
	var target string
	get := false
	var data []string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; a {
		case "-s":
		case "-G":
			get = true
		case "-d", "--data-urlencode":
			if i+1 == len(args) {
				return nil, fmt.Errorf("%s without a value", a)
			}
			i++
			v := args[i]
			if a == "--data-urlencode" {
				name, value, _ := strings.Cut(v, "=")
				v = name + "=" + url.QueryEscape(value)
			}
			data = append(data, v)
		default:
			if strings.HasPrefix(a, "-") || target != "" {
				return nil, fmt.Errorf("unexpected argument %q", a)
			}
			host, p, ok := strings.Cut(a, "/")
			if !ok || !strings.Contains(host, ":") {
				return nil, fmt.Errorf("URL %q is not host:port/path", a)
			}
			target = "http://" + addr + "/" + p
		}
	}
	body := strings.Join(data, "&")
	if get {
		return http.NewRequest(http.MethodGet, target+"?"+body, nil)
	}
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req, err
}
