// Package logtest gives tests a zap logger that writes JSON lines, as the
// sidecar's does, to a buffer they can read back.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Buffer is a log destination that goroutines may share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns the JSON log lines in s whose message is msg.
func (s *Buffer) Lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// JSON returns a logger at level writing JSON lines, without times, to a
// new buffer.
func JSON(level zapcore.Level) (*zap.Logger, *Buffer) {
	buf := &Buffer{}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = ""
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(buf), level)), buf
}
