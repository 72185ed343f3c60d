package main

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rejectlog"
)

// rejectionSettings are the --log-rejections flags.
type rejectionSettings struct {
	level  string  // off, debug or info
	rate   float64 // lines per second
	values string  // hash or plain
}

// check validates the flags.
func (r *rejectionSettings) check() error {
	switch r.level {
	case "off", "debug", "info":
	default:
		return fmt.Errorf("--log-rejections: want off, debug or info, got %q", r.level)
	}
	if !(r.rate > 0) || r.rate > rejectlog.MaxRate {
		return fmt.Errorf("--log-rejections-rate: want lines per second above 0 and at most %d, got %v", rejectlog.MaxRate, r.rate)
	}
	if _, err := rejectlog.ParseValues(r.values); err != nil {
		return fmt.Errorf("--log-rejections-values: %w", err)
	}
	return nil
}

// newRejectionLog returns the rejection log that c asks for, writing
// through log, or nil for --log-rejections off. store names the backend.
func newRejectionLog(log *zap.Logger, c rejectionSettings, store string, now func() time.Time) *rejectlog.Log {
	if c.level == "off" {
		return nil
	}
	level := zapcore.DebugLevel
	if c.level == "info" {
		level = zapcore.InfoLevel
	}
	values, _ := rejectlog.ParseValues(c.values) // checked with the flags
	return rejectlog.New(log, rejectlog.Options{Level: level, Rate: c.rate, Values: values, Store: store, Now: now})
}
