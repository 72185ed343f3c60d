// Package redislog is what the sidecar logs of Redis beside its
// breaker's open and close: Redis refusing its configuration
// (ConfigError), once as it starts, changes or ends, and go-redis's own
// messages (Logger). go-redis writes one for every failed attempt (a dial
// refused, say), which through an outage is one or two a second; Logger
// logs each kind once per outage, at Warn, and counts every one.
package redislog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// maxKinds bounds the kinds of message remembered in one outage: past
// it, a new kind is counted and not logged.
const maxKinds = 64

// Logger is a go-redis logger (redis.SetLogger). A kind of message is its
// format, which go-redis keeps constant and fills with the address and
// the error. It is safe for concurrent use.
type Logger struct {
	log      *zap.Logger
	messages atomic.Uint64

	mu   sync.Mutex
	seen map[string]uint64 // messages of each kind since the outage began
}

// New returns a Logger writing to log.
func New(log *zap.Logger) *Logger {
	return &Logger{log: log, seen: map[string]uint64{}}
}

// Printf logs the message if it is the first of its kind since the
// outage began (or since New), and counts it.
func (l *Logger) Printf(_ context.Context, format string, v ...any) {
	l.messages.Add(1)
	l.mu.Lock()
	n, ok := l.seen[format]
	first := !ok && len(l.seen) < maxKinds
	if ok || first {
		l.seen[format] = n + 1
	}
	l.mu.Unlock()
	if !first {
		return
	}
	l.log.Warn("go-redis", zap.String("message", fmt.Sprintf(format, v...)),
		zap.String("repeats", "not logged until Redis answers again; counted in ratelimit_sidecar_redis_client_messages_total"))
}

// Recovered ends an outage: the next message of each kind is logged
// again. How many were not is logged at Info.
func (l *Logger) Recovered() {
	l.mu.Lock()
	seen := l.seen
	l.seen = map[string]uint64{}
	l.mu.Unlock()
	var quiet uint64
	for _, n := range seen {
		quiet += n - 1
	}
	if quiet > 0 {
		l.log.Info("go-redis messages not logged during the outage", zap.Uint64("messages", quiet))
	}
}

// Messages returns how many messages go-redis has written.
func (l *Logger) Messages() uint64 { return l.messages.Load() }
