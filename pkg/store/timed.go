package store

import (
	"context"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// CallObserver is told how long each call of a store took and how it
// ended. ObserveCall must be fast and safe for concurrent use.
type CallObserver interface {
	ObserveCall(took time.Duration, err error)
}

// Timed returns a store that calls s and reports each call to o.
func Timed(s limits.Store, o CallObserver) limits.Store {
	return &timed{s: s, o: o}
}

type timed struct {
	s limits.Store
	o CallObserver
}

func (t *timed) Apply(ctx context.Context, b *limits.Batch) error {
	start := time.Now()
	err := t.s.Apply(ctx, b)
	t.o.ObserveCall(time.Since(start), err)
	return err
}
