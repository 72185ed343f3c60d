package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ErrNotConnected is returned, wrapping limits.ErrStoreUnavailable, by a
// Lazy store that has not reached Redis yet.
var ErrNotConnected = fmt.Errorf("redis not connected yet: %w", limits.ErrStoreUnavailable)

// LazyOptions tunes Connect. The zero value is ready to use.
type LazyOptions struct {
	// Wait bounds the first attempt to connect. Default 2s.
	Wait time.Duration
	// Retry is the pause between later attempts. Default 1s.
	Retry time.Duration
	// OnConnect, if set, is called once a later attempt connects, from
	// the goroutine that made it.
	OnConnect func()
}

// Lazy is a limits.Store that is a Store once Redis has been reached.
// Until then its calls fail with ErrNotConnected, so that a sidecar
// whose Redis is down at startup starts anyway and serves by its failure
// mode, while a goroutine keeps trying to connect. It is safe for
// concurrent use; Close stops the goroutine and closes the Store.
type Lazy struct {
	opts  Options
	lazy  LazyOptions
	store atomic.Pointer[Store]

	stop context.CancelFunc
	wg   sync.WaitGroup
}

var _ limits.Store = (*Lazy)(nil)

// Connect tries once to connect to the Redis that o describes, for at
// most lo.Wait, and returns a Lazy store either way: Connected tells
// which. It fails only for an invalid o, or when ctx ends.
func Connect(ctx context.Context, o Options, lo LazyOptions) (*Lazy, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	if lo.Wait <= 0 {
		lo.Wait = 2 * time.Second
	}
	if lo.Retry <= 0 {
		lo.Retry = time.Second
	}
	l := &Lazy{opts: o, lazy: lo}
	err := l.connect(ctx, lo.Wait)
	switch {
	case err == nil:
		return l, nil
	case !errors.Is(err, limits.ErrStoreUnavailable):
		return nil, err
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = cancel
	l.wg.Go(func() { l.retry(rctx) })
	return l, nil
}

// Connected reports whether the store has reached Redis.
func (l *Lazy) Connected() bool { return l.store.Load() != nil }

// Apply implements limits.Store.
func (l *Lazy) Apply(ctx context.Context, b *limits.Batch) error {
	s := l.store.Load()
	if s == nil {
		return ErrNotConnected
	}
	return s.Apply(ctx, b)
}

// Return is Store.Return once connected.
func (l *Lazy) Return(ctx context.Context, checks []limits.Check, receipts []int64) error {
	s := l.store.Load()
	if s == nil {
		return ErrNotConnected
	}
	return s.Return(ctx, checks, receipts)
}

// Ping is Store.Ping once connected.
func (l *Lazy) Ping(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return ErrNotConnected
	}
	return s.Ping(ctx)
}

// ProbeAny is Store.ProbeAny once connected.
func (l *Lazy) ProbeAny(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return ErrNotConnected
	}
	return s.ProbeAny(ctx)
}

// Probe is Store.Probe once connected.
func (l *Lazy) Probe(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return ErrNotConnected
	}
	return s.Probe(ctx)
}

// Close stops connecting, if that is still under way, and closes the
// connections to Redis.
func (l *Lazy) Close() error {
	if l.stop != nil {
		l.stop()
	}
	l.wg.Wait()
	if s := l.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}

// connect tries to connect once, for at most wait.
func (l *Lazy) connect(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	s, err := New(ctx, l.opts)
	if err != nil {
		return err
	}
	l.store.Store(s)
	return nil
}

// retry connects every lo.Retry until it succeeds or ctx ends.
func (l *Lazy) retry(ctx context.Context) {
	t := time.NewTicker(l.lazy.Retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.connect(ctx, l.lazy.Retry) == nil {
			if l.lazy.OnConnect != nil {
				l.lazy.OnConnect()
			}
			return
		}
	}
}
