package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
)

// TestRejectionLinesAreNotSampled: the sidecar's log samples repeated
// messages, but the rejection lines, which the rejection log bounds and
// counts itself, all get through.
func TestRejectionLinesAreNotSampled(t *testing.T) {
	buf := &logtest.Buffer{}
	log, err := newLogger(logOptions{level: "info", format: "json"}, buf)
	if err != nil {
		t.Fatal(err)
	}
	rl := log.Named(rejectlog.LoggerName)
	for range 100 {
		rl.Info(rejectlog.Message)
		log.Info("other")
	}
	if n := len(buf.Lines(t, rejectlog.Message)); n != 100 {
		t.Errorf("%d of 100 rejection lines written", n)
	}
	if n := len(buf.Lines(t, "other")); n >= 100 {
		t.Errorf("%d of 100 other lines written: the log is not sampled", n)
	}
}

var _ io.Writer = (*logtest.Buffer)(nil)

// TestRejectionFlagsDefault: the rejection log is at debug, 10 lines a
// second, values hashed, and counter resets are off.
func TestRejectionFlagsDefault(t *testing.T) {
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rejectlog.Settings{Level: "debug", Rate: 10, Values: "hash"}); c.rejections != want || c.counters.AllowReset {
		t.Errorf("defaults: %+v, reset %v; want %+v, reset off", c.rejections, c.counters.AllowReset, want)
	}
}

// TestRejectionLogInSidecar: with --log-rejections info, the sidecar logs
// its rejections, within --log-rejections-rate, and counts the rest.
func TestRejectionLogInSidecar(t *testing.T) {
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "rules.yaml"), counterRules(t))
	logs := &logtest.Buffer{}
	// A Redis call past the default 15 ms on a busy machine would be
	// admitted by the failure mode, and not counted as a rejection.
	s := startSidecar(t, sidecarOpts{log: logs, args: []string{"--config", dir, "--redis-url", "redis://" + srv.Addr, "--redis-timeout", "5s", "--failure-mode", "error",
		"--log-rejections", "info", "--log-rejections-rate", "2", "--log-rejections-values", "plain"}})
	for range 3 {
		s.send(t, 1, "user", "alice")
	}
	start := time.Now()
	for range 50 {
		s.send(t, 1, "user", "alice")
	}
	// A burst of 2, and one more per half second the requests took.
	most := 2 + int(time.Since(start)/(500*time.Millisecond)) + 1
	lines := logs.Lines(t, rejectlog.Message)
	if len(lines) < 2 || len(lines) > most {
		t.Fatalf("%d rejection lines for 50 rejections, want 2 to %d:\n%s", len(lines), most, logs)
	}
	if lines[0]["decided_by"] != "redis" || lines[1]["decided_by"] != "deny_cache" {
		t.Errorf("decided_by: %v then %v, want redis then deny_cache", lines[0]["decided_by"], lines[1]["decided_by"])
	}
	if d := lines[0]["descriptors"].([]any); len(d) != 1 || d[0] != "user=alice" {
		t.Errorf("descriptors: %v", d)
	}
	metrics := s.getBody(t, "/metrics")
	want := fmt.Sprintf("ratelimit_sidecar_rejection_logs_suppressed_total %d\n", 50-len(lines))
	if !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
