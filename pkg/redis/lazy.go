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
	// OnConfigError, if set, is called when a Redis node or a sentinel
	// starts refusing the store for its configuration (see ConfigError),
	// when its refusal changes, both with cleared false, and when the
	// refusal ends, with cleared true and e as it was. Calls are made one
	// at a time, in order, while the store's record of refusals is
	// locked: OnConfigError must return quickly and not call the store.
	OnConfigError func(e *ConfigError, cleared bool)
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
	watch *watch
	// notConnected is what calls return until connected: ErrNotConnected
	// with the last attempt's error.
	notConnected atomic.Pointer[notConnectedError]
	// connected is closed once store is set.
	connected chan struct{}

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
	l := &Lazy{opts: o, lazy: lo, watch: newWatch(lo.OnConfigError), connected: make(chan struct{})}
	l.opts.watch = l.watch
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

// LastError returns the error of the last attempt to connect, or nil once
// connected.
func (l *Lazy) LastError() error {
	if l.Connected() {
		return nil
	}
	if e := l.notConnected.Load(); e != nil {
		return e.last
	}
	return nil
}

// ConfigErrors returns the refusals for configuration (see ConfigError)
// that last now, by role and address; nil if there are none. Each lasts
// until the node or sentinel that refused shows it is over (see
// watch.go): the store keeps trying meanwhile, on its own while it is
// not connected, and as requests and probes use it once it is.
func (l *Lazy) ConfigErrors() []*ConfigError { return l.watch.list() }

// ConfigErrorsTotal returns how many refusals of kind started, or
// changed, since Connect: one per OnConfigError call with cleared false.
func (l *Lazy) ConfigErrorsTotal(kind string) uint64 {
	if i := kindIndex(kind); i >= 0 {
		return l.watch.total[i].Load()
	}
	return 0
}

// ConfigErrorActive reports whether a node or sentinel refuses the store
// with kind now.
func (l *Lazy) ConfigErrorActive(kind string) bool {
	if i := kindIndex(kind); i >= 0 {
		return l.watch.active[i].Load() > 0
	}
	return false
}

// Apply implements limits.Store.
func (l *Lazy) Apply(ctx context.Context, b *limits.Batch) error {
	s := l.store.Load()
	if s == nil {
		return l.notConnectedErr()
	}
	return s.Apply(ctx, b)
}

// Return is Store.Return once connected.
func (l *Lazy) Return(ctx context.Context, checks []limits.Check, receipts []int64) error {
	s := l.store.Load()
	if s == nil {
		return l.notConnectedErr()
	}
	return s.Return(ctx, checks, receipts)
}

// ProbeAny is Store.ProbeAny once connected.
func (l *Lazy) ProbeAny(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return l.notConnectedErr()
	}
	return s.ProbeAny(ctx)
}

// Probe is Store.Probe once connected. On a Cluster, a probe that every
// master took also ends the refusals of nodes that are not masters (any
// more): they decide nothing.
func (l *Lazy) Probe(ctx context.Context) error {
	s := l.store.Load()
	if s == nil {
		return l.notConnectedErr()
	}
	err := s.Probe(ctx)
	if err == nil && s.cc != nil {
		l.watch.clearRole(RoleNode)
	}
	return err
}

// Close stops connecting, if that is still under way, and closes the
// connections to Redis.
func (l *Lazy) Close() error {
	if l.stop != nil {
		l.stop()
	}
	l.wg.Wait()
	defer l.watch.close()
	if s := l.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}

// connect tries to connect once, for at most wait. If refusals last
// once it is connected, it probes, so that those the connection shows
// over end now rather than at the next probe.
func (l *Lazy) connect(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	s, err := New(ctx, l.opts)
	if err != nil {
		l.notConnected.Store(&notConnectedError{last: err})
		return err
	}
	l.store.Store(s)
	close(l.connected)
	if l.watch.n.Load() != 0 {
		_ = s.Probe(ctx)
	}
	return nil
}

// notConnectedErr returns what calls return until connected.
func (l *Lazy) notConnectedErr() error {
	if e := l.notConnected.Load(); e != nil {
		return e
	}
	return ErrNotConnected
}

// notConnectedError is ErrNotConnected with the error of the last
// attempt to connect, which it shows but does not wrap: that attempt's
// deadline is not the caller's.
type notConnectedError struct{ last error }

func (e *notConnectedError) Error() string {
	return ErrNotConnected.Error() + " (last attempt: " + e.last.Error() + ")"
}

func (e *notConnectedError) Unwrap() error { return ErrNotConnected }

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
