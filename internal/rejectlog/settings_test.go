package rejectlog_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
)

// TestSettingsCheck: each flag's values out of range are refused, naming
// the flag, what it wants and what it got.
func TestSettingsCheck(t *testing.T) {
	good := rejectlog.Settings{Level: "debug", Rate: 10, Values: "hash"}
	if err := good.Check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	tests := []struct {
		give func(*rejectlog.Settings)
		want string
	}{
		{func(s *rejectlog.Settings) { s.Level = "warn" }, `--log-rejections: want off, debug or info, got "warn"`},
		{func(s *rejectlog.Settings) { s.Rate = 0 }, "--log-rejections-rate: want lines per second above 0 and at most 1000000, got 0"},
		{func(s *rejectlog.Settings) { s.Rate = math.NaN() }, "--log-rejections-rate: want lines per second above 0"},
		{func(s *rejectlog.Settings) { s.Rate = 1e7 }, "at most 1000000, got 1e+07"},
		{func(s *rejectlog.Settings) { s.Values = "clear" }, `--log-rejections-values: want hash or plain, got "clear"`},
	}
	for _, tt := range tests {
		s := good
		tt.give(&s)
		t.Run(tt.want, func(t *testing.T) {
			if err := s.Check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%+v) = %v, want an error with %q", s, err, tt.want)
			}
		})
	}
}

// TestSettingsOff: --log-rejections off builds no log; the other levels
// build one.
func TestSettingsOff(t *testing.T) {
	s := rejectlog.Settings{Level: "off", Rate: 10, Values: "hash"}
	if s.New(zap.NewNop(), "memory", time.Now) != nil {
		t.Error("--log-rejections off: a log")
	}
	s.Level = "info"
	if s.New(zap.NewNop(), "memory", time.Now) == nil {
		t.Error("--log-rejections info: no log")
	}
}
