package main

import (
	"io"
	"strings"
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

func TestRejectionFlagsInvalid(t *testing.T) {
	for _, tt := range []struct {
		give []string
		want string
	}{
		{[]string{"--log-rejections", "warn"}, "--log-rejections: want off, debug or info"},
		{[]string{"--log-rejections-rate", "0"}, "--log-rejections-rate: want lines per second above 0"},
		{[]string{"--log-rejections-rate", "NaN"}, "--log-rejections-rate: want lines per second above 0"},
		{[]string{"--log-rejections-rate", "1e7"}, "at most 1000000"},
		{[]string{"--log-rejections-values", "clear"}, `--log-rejections-values: want hash or plain, got "clear"`},
	} {
		_, err := parseFlags(tt.give, noEnv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error saying %q", tt.give, err, tt.want)
		}
	}
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rejectionSettings{level: "debug", rate: 10, values: "hash"}); c.rejections != want || c.counterReset {
		t.Errorf("defaults: %+v, reset %v; want %+v, reset off", c.rejections, c.counterReset, want)
	}
}
