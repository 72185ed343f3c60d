package main

import (
	"io"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/logtest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
)

// TestRejectionLinesAreNotSampled: the sidecar's log samples repeated
// messages, but the rejection lines, which the rejection log bounds and
// counts itself, all get through.
func TestRejectionLinesAreNotSampled(t *testing.T) {
	buf := &logtest.Buffer{}
	log, err := newLogger(&settings{logLevel: "info", logFormat: "json"}, buf)
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

// TestRejectionLogOff: --log-rejections off builds no log.
func TestRejectionLogOff(t *testing.T) {
	if newRejectionLog(zap.NewNop(), rejectionSettings{level: "off", rate: 10, values: "hash"}, "memory", time.Now) != nil {
		t.Error("--log-rejections off: a log")
	}
}

// TestRejectionFlagsDefault: the rejection log is at debug, 10 lines a
// second, values hashed, and counter resets are off.
func TestRejectionFlagsDefault(t *testing.T) {
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rejectionSettings{level: "debug", rate: 10, values: "hash"}); c.rejections != want || c.counterReset {
		t.Errorf("defaults: %+v, reset %v; want %+v, reset off", c.rejections, c.counterReset, want)
	}
}
