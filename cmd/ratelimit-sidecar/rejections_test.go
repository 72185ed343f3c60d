package main

import (
	"io"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
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
