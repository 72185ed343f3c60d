package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestFatalStartErrorLogged: an error that stops the server at start is
// a log line in the configured format: with --log-format json every line
// on stderr is JSON, the error among them at level error; with console
// the plain line follows the log's. It was a plain line after JSON ones.
func TestFatalStartErrorLogged(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
	start := func(t *testing.T, format string) string {
		t.Helper()
		var stderr bytes.Buffer
		err := run(context.Background(), []string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--log-format", format}, io.Discard, &stderr)
		if err == nil {
			t.Fatal("run succeeded with an invalid config")
		}
		reportFatal(err, &stderr)
		return stderr.String()
	}
	t.Run("json", func(t *testing.T) {
		out := start(t, "json")
		var found bool
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("a line on stderr is not JSON: %q", line)
				continue
			}
			problem, _ := rec["problem"].(string)
			if rec["level"] == "error" && strings.Contains(problem, `unknown unit "fortnight"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no JSON line at level error holds the start error:\n%s", out)
		}
	})
	t.Run("console", func(t *testing.T) {
		out := start(t, "console")
		if !strings.Contains(out, "\terror\t") || !strings.Contains(out, "\nratelimit-sidecar: invalid config") {
			t.Errorf("want a console log line at error and the plain line ratelimit-sidecar: invalid config ...:\n%s", out)
		}
	})
}

// TestBadRulesAtStartReadable: rules with several problems stop the server
// with a log line for each problem, in both formats, and no line holds
// another's text behind a \n escape. All of them were one JSON line.
func TestBadRulesAtStartReadable(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n  - key: j\n    rate_limit:\n      requests_per_unt: 1\n      unit: second\n")
	problems := []string{
		filepath.Join(dir, "a.yaml") + `:5: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
		filepath.Join(dir, "a.yaml") + `:9: descriptors[1].rate_limit.requests_per_unt: unknown field; did you mean requests_per_unit?`,
	}
	start := func(t *testing.T, format string) string {
		t.Helper()
		var stderr bytes.Buffer
		err := run(context.Background(), []string{"--config", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--log-format", format}, io.Discard, &stderr)
		if err == nil {
			t.Fatal("run succeeded with an invalid config")
		}
		reportFatal(err, &stderr)
		out := stderr.String()
		if strings.Contains(out, `\n`) {
			t.Errorf("a line holds a \\n escape:\n%s", out)
		}
		return out
	}
	t.Run("json", func(t *testing.T) {
		out := start(t, "json")
		var got []string
		var summary string
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("a line on stderr is not JSON: %q", line)
			}
			if rec["level"] == "error" && rec["msg"] == "invalid rules" {
				got = append(got, rec["problem"].(string))
				if rec["file"] != filepath.Join(dir, "a.yaml") || rec["line"] == nil {
					t.Errorf("problem line without its file and line: %s", line)
				}
			}
			if rec["msg"] == "ratelimit-sidecar stopped on an error" {
				summary, _ = rec["error"].(string)
			}
		}
		if strings.Join(got, "\n") != strings.Join(problems, "\n") {
			t.Errorf("problems logged:\n%s\nwant, a line each:\n%s\nlog:\n%s", strings.Join(got, "\n"), strings.Join(problems, "\n"), out)
		}
		if summary != "invalid config: 2 problems, each logged above" {
			t.Errorf("last line's error %q, want the count", summary)
		}
	})
	t.Run("console", func(t *testing.T) {
		out := start(t, "console")
		for _, p := range problems {
			quoted, _ := json.Marshal(p)
			if n := strings.Count(out, "\terror\tinvalid rules\t{\"problem\": "+string(quoted)); n != 1 {
				t.Errorf("%d console log lines with problem %s, want 1:\n%s", n, p, out)
			}
			if !strings.Contains(out, "\n"+p+"\n") {
				t.Errorf("the plain lines after the log lack %s on a line of its own:\n%s", p, out)
			}
		}
	})
}
