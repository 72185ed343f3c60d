package storetest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Down is a limits.Store whose backend is unreachable while Down is set:
// it fails every call as an unreachable Redis would, and otherwise passes
// calls to Up. It stands for a Redis outage in tests of what sits in front
// of a store (the engine's failure modes, the circuit breaker); the Redis
// store's own tests kill a real redis-server.
type Down struct {
	Up    limits.Store
	Down  atomic.Bool
	Calls atomic.Int64 // calls of Apply
}

// Apply implements limits.Store.
func (s *Down) Apply(ctx context.Context, b *limits.Batch) error {
	s.Calls.Add(1)
	if s.Down.Load() {
		return fmt.Errorf("dial 127.0.0.1:1: connection refused: %w", limits.ErrStoreUnavailable)
	}
	return s.Up.Apply(ctx, b)
}

// Ping fails while Down is set, as a probe of the backend would.
func (s *Down) Ping(context.Context) error {
	if s.Down.Load() {
		return limits.ErrStoreUnavailable
	}
	return nil
}
