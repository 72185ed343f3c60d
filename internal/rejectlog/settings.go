package rejectlog

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Settings are the --log-rejections flags as the command line gives
// them: the flag table writes into them, Check checks them and New
// builds the log they ask for.
type Settings struct {
	Level  string  // off, debug or info
	Rate   float64 // lines per second
	Values string  // hash or plain
}

// Check reports the first flag that does not hold a value it may.
func (s Settings) Check() error {
	switch s.Level {
	case "off", "debug", "info":
	default:
		return fmt.Errorf("--log-rejections: want off, debug or info, got %q", s.Level)
	}
	if !(s.Rate > 0) || s.Rate > MaxRate {
		return fmt.Errorf("--log-rejections-rate: want lines per second above 0 and at most %d, got %v", MaxRate, s.Rate)
	}
	if _, err := ParseValues(s.Values); err != nil {
		return fmt.Errorf("--log-rejections-values: %w", err)
	}
	return nil
}

// New returns the rejection log that s asks for, writing through log,
// or nil for --log-rejections off. store names the backend; now nil is
// time.Now. s must have passed Check.
func (s Settings) New(log *zap.Logger, store string, now func() time.Time) *Log {
	if s.Level == "off" {
		return nil
	}
	level := zapcore.DebugLevel
	if s.Level == "info" {
		level = zapcore.InfoLevel
	}
	values, _ := ParseValues(s.Values) // checked by Check
	return New(log, Options{Level: level, Rate: s.Rate, Values: values, Store: store, Now: now})
}
