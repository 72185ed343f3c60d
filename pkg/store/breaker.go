// Package store holds limits.Store middleware: stores that wrap another
// store and add a behaviour to it, whatever its backend. Breaker stops
// calling a failing store, DenyCache answers requests it knows are over
// their limit without the store, and Timed reports every call's duration
// and error.
//
// Everything here is safe for concurrent use. Only Breaker starts a
// goroutine, while it is open, and Close stops it.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// ErrBreakerOpen is returned, wrapping ErrStoreUnavailable, while a
// Breaker is open and requests are not sent to the store.
var ErrBreakerOpen = fmt.Errorf("circuit breaker open: %w", limits.ErrStoreUnavailable)

// BreakerOptions tunes a Breaker. Zero fields take the defaults.
type BreakerOptions struct {
	// Failures is how many consecutive unavailable errors open the
	// breaker. Default 5.
	Failures int
	// Cooldown is how long the breaker waits between background probes
	// while open. Default 500ms.
	Cooldown time.Duration
	// ProbeTimeout bounds one probe. Default 250ms: after an outage a
	// probe opens a connection first, a few round trips to a Redis that
	// may be milliseconds away.
	ProbeTimeout time.Duration
	// MinWait is the least time a caller must have left the store for
	// its call's failure to count when the caller's own deadline ended
	// it. Default 5ms.
	MinWait time.Duration
	// OnChange, if set, is called with true when the breaker opens and
	// false when it closes, from the goroutine that changed it.
	OnChange func(open bool, cause error)
}

// Breaker is a limits.Store that stops calling a failing store. After
// BreakerOptions.Failures consecutive failures of the store it opens:
// every Apply fails at once with ErrBreakerOpen, so an outage does not
// add the store's timeout to every request, and a goroutine probes the
// store every Cooldown until a probe succeeds, which closes it again.
//
// Only the store's own failures count, so that callers cannot open the
// breaker on a healthy store:
//   - an error counts only if it wraps limits.ErrStoreUnavailable (an
//     unreachable or refusing store, or the store's own timeout), and not
//     limits.ErrPartUnavailable (one part of the store failing, which
//     the store cuts off itself) nor limits.ErrStoreSwitching (a store
//     refusing at once while it moves to a new backend, a Sentinel
//     failover: open, the breaker would fail calls until its next probe,
//     long after the switch);
//   - a call whose caller cancelled it counts for nothing, and so does
//     one whose deadline passed if that deadline left the store less than
//     BreakerOptions.MinWait when the call started: a deadline shorter
//     than a store's answer is the caller's problem. A caller that gave
//     the store MinWait or more and got nothing saw the store fail, even
//     if its deadline came before the store's own timeout (an Envoy
//     timeout below --redis-timeout);
//   - calls that were in flight together count once: a call counts only
//     if no failure was counted since it started. A stall of the store (or
//     of this process) that fails every call in flight is one failure,
//     not one per call; the breaker opens when Failures waves of calls in
//     a row, each started after the last counted failure, fail.
//
// Any success resets the count.
//
// Breaker is safe for concurrent use. Close stops the probe and waits for
// it.
type Breaker struct {
	store limits.Store
	probe func(context.Context) error
	opts  BreakerOptions

	fails atomic.Int64
	// counted is how many failures were ever counted: a call that sees
	// it move while it is in flight was caught in the same stall.
	counted atomic.Uint64
	open    atomic.Bool

	mu     sync.Mutex
	closed bool          // guarded by mu: Close was called
	stop   chan struct{} // closed by Close
	wg     sync.WaitGroup
}

// NewBreaker wraps store; probe checks whether the store is back (for
// Redis, a small write that fails where Redis refuses writes: see redis.Store.Probe).
func NewBreaker(store limits.Store, probe func(context.Context) error, opts BreakerOptions) *Breaker {
	if opts.Failures <= 0 {
		opts.Failures = 5
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = 500 * time.Millisecond
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 250 * time.Millisecond
	}
	if opts.MinWait <= 0 {
		opts.MinWait = 5 * time.Millisecond
	}
	return &Breaker{store: store, probe: probe, opts: opts, stop: make(chan struct{})}
}

// Open reports whether the breaker is open.
func (b *Breaker) Open() bool { return b.open.Load() }

// Apply implements limits.Store.
func (b *Breaker) Apply(ctx context.Context, batch *limits.Batch) error {
	if b.open.Load() {
		return ErrBreakerOpen
	}
	seen := b.counted.Load()
	short := false
	if d, ok := ctx.Deadline(); ok {
		short = time.Until(d) < b.opts.MinWait
	}
	err := b.store.Apply(ctx, batch)
	switch {
	case err == nil:
		b.fails.Store(0)
	case errors.Is(err, limits.ErrStoreUnavailable) && !errors.Is(err, limits.ErrPartUnavailable) &&
		!errors.Is(err, limits.ErrStoreSwitching) &&
		!limits.CallerGaveUp(ctx, short) && b.counted.CompareAndSwap(seen, seen+1):
		if b.fails.Add(1) >= int64(b.opts.Failures) {
			b.trip(err)
		}
	}
	return err
}

// trip opens the breaker and starts the probe, once.
func (b *Breaker) trip(cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !b.open.CompareAndSwap(false, true) {
		return
	}
	if b.opts.OnChange != nil {
		b.opts.OnChange(true, cause)
	}
	b.wg.Go(b.probeUntilUp)
}

func (b *Breaker) probeUntilUp() {
	t := time.NewTicker(b.opts.Cooldown)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.ProbeTimeout)
		err := b.probe(ctx)
		cancel()
		if err == nil {
			b.fails.Store(0)
			b.open.Store(false)
			if b.opts.OnChange != nil {
				b.opts.OnChange(false, nil)
			}
			return
		}
	}
}

// Close stops the probe, if one runs, and waits for it. It does not close
// the wrapped store.
func (b *Breaker) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
}
