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
			if rec["level"] == "error" && strings.Contains(rec["error"].(string), `unknown unit "fortnight"`) {
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
