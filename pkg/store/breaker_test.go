package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		backend := &storetest.Down{Up: memory.New(memory.Options{})}
		var changes []bool
		b := store.NewBreaker(backend, backend.Ping, store.BreakerOptions{
			Failures: 3, Cooldown: 500 * time.Millisecond,
			OnChange: func(open bool, _ error) { changes = append(changes, open) },
		})
		defer b.Close()
		l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
		apply := func() error {
			return b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}})
		}

		backend.Down.Store(true)
		for i := range 3 {
			if err := apply(); !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, store.ErrBreakerOpen) {
				t.Fatalf("failure %d: err = %v, want the store's own error", i, err)
			}
		}
		if !b.Open() {
			t.Fatal("breaker closed after 3 consecutive failures")
		}
		calls := backend.Calls.Load()
		for range 100 {
			if err := apply(); !errors.Is(err, store.ErrBreakerOpen) {
				t.Fatalf("err = %v while open, want ErrBreakerOpen", err)
			}
		}
		if n := backend.Calls.Load() - calls; n != 0 {
			t.Errorf("open breaker sent %d requests to the store, want 0", n)
		}

		// Probes keep failing while the store is down...
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !b.Open() {
			t.Fatal("breaker closed while the store is still down")
		}
		// ...and the first probe after it comes back closes the breaker.
		backend.Down.Store(false)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if b.Open() {
			t.Fatal("breaker still open one cooldown after the store came back")
		}
		if err := apply(); err != nil {
			t.Errorf("after recovery: %v", err)
		}
		if fmt.Sprint(changes) != "[true false]" {
			t.Errorf("OnChange calls = %v, want [true false]", changes)
		}
	})
}

func TestBreakerSuccessResetsCount(t *testing.T) {
	backend := &storetest.Down{Up: memory.New(memory.Options{})}
	b := store.NewBreaker(backend, backend.Ping, store.BreakerOptions{Failures: 3, MinWait: 5 * time.Millisecond})
	defer b.Close()
	l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
	for range 5 {
		for _, down := range []bool{true, true, false} {
			backend.Down.Store(down)
			b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
		}
	}
	if b.Open() {
		t.Error("breaker opened on failures that were never 3 in a row")
	}
}

// stalled is a store whose calls all wait for release, then fail as an
// unreachable store's would: a stall longer than the store's timeout.
type stalled struct {
	release chan struct{}
	calls   atomic.Int64
}

func (s *stalled) Apply(ctx context.Context, _ *limits.Batch) error {
	s.calls.Add(1)
	<-s.release
	return fmt.Errorf("i/o timeout: %w", limits.ErrStoreUnavailable)
}

// TestBreakerCountsAStallOnce: the calls in flight during one stall are
// one failure, not one each; stalls that follow one another still open
// the breaker.
func TestBreakerCountsAStallOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &stalled{}
		b := store.NewBreaker(s, func(context.Context) error { return limits.ErrStoreUnavailable }, store.BreakerOptions{Failures: 3, MinWait: 5 * time.Millisecond})
		defer b.Close()
		l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
		stall := func(calls int) {
			s.release = make(chan struct{})
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() {
					b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
				})
			}
			synctest.Wait() // every call is in the store
			close(s.release)
			wg.Wait()
		}
		stall(200)
		if b.Open() {
			t.Fatal("one stall of 200 calls in flight opened a breaker of 3 failures")
		}
		stall(200)
		if b.Open() {
			t.Fatal("two stalls opened a breaker of 3 failures")
		}
		stall(1)
		if !b.Open() {
			t.Fatal("three stalls in a row left a breaker of 3 failures closed")
		}
	})
}

// TestBreakerIgnoresCallersThatGaveUp: failures of calls whose context
// was cancelled or past its deadline count for nothing.
func TestBreakerIgnoresCallersThatGaveUp(t *testing.T) {
	backend := &storetest.Down{Up: memory.New(memory.Options{})}
	b := store.NewBreaker(backend, backend.Ping, store.BreakerOptions{Failures: 2})
	defer b.Close()
	l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
	backend.Down.Store(true)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	for range 50 {
		for _, ctx := range []context.Context{cancelled, expired} {
			b.Apply(ctx, &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
		}
	}
	if b.Open() {
		t.Fatal("failures of callers that gave up opened the breaker")
	}
	for range 2 {
		b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
	}
	if !b.Open() {
		t.Fatal("2 failures of callers that waited left a breaker of 2 closed")
	}
}

// blackhole is a store that never answers: each call fails when its
// context ends, as a call to an unreachable Redis does.
type blackhole struct{}

func (blackhole) Apply(ctx context.Context, _ *limits.Batch) error {
	<-ctx.Done()
	return fmt.Errorf("i/o timeout: %w: %w", limits.ErrStoreUnavailable, ctx.Err())
}

// TestBreakerOpensOnCallersThatWaited: when callers' deadlines come
// before the store's own timeout, a store that never answers still opens
// the breaker, as long as the callers left it MinWait or more; callers
// that left it less do not.
func TestBreakerOpensOnCallersThatWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := store.NewBreaker(blackhole{}, func(context.Context) error { return limits.ErrStoreUnavailable }, store.BreakerOptions{Failures: 3, MinWait: 5 * time.Millisecond})
		defer b.Close()
		l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
		call := func(deadline time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			b.Apply(ctx, &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}) //nolint:errcheck // only the breaker's state matters
		}
		for range 50 {
			call(time.Millisecond)
		}
		if b.Open() {
			t.Fatal("callers with 1 ms deadlines opened the breaker")
		}
		for range 3 {
			call(10 * time.Millisecond)
		}
		if !b.Open() {
			t.Fatal("3 callers that each waited 10 ms for a store that never answers left a breaker of 3 closed")
		}
	})
}

// refusing is a store whose every call fails with err.
type refusing struct{ err error }

func (r refusing) Apply(context.Context, *limits.Batch) error { return r.err }

// TestBreakerLetsASwitchThrough: a store that refuses calls while it
// moves to a new backend (a Sentinel failover: limits.ErrStoreSwitching)
// does not open the breaker, however many calls it refuses, so the first
// call after the switch reaches the new backend; the same refusals
// without ErrStoreSwitching open it. An open breaker failed every call of
// a graceful failover for half a second, its probe's cooldown.
func TestBreakerLetsASwitchThrough(t *testing.T) {
	tests := []struct {
		name     string
		give     error
		wantOpen bool
	}{
		{"switching", fmt.Errorf("redis apply: %w: %w", limits.ErrStoreUnavailable, limits.ErrStoreSwitching), false},
		{"down", fmt.Errorf("redis apply: %w: connection refused", limits.ErrStoreUnavailable), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := store.NewBreaker(refusing{tt.give}, func(context.Context) error { return nil }, store.BreakerOptions{Failures: 3})
			defer b.Close()
			for range 20 {
				if err := b.Apply(context.Background(), &limits.Batch{}); !errors.Is(err, tt.give) && !errors.Is(err, store.ErrBreakerOpen) {
					t.Fatalf("err = %v, want the store's or the breaker's", err)
				}
			}
			if b.Open() != tt.wantOpen {
				t.Errorf("after 20 refusals: open %v, want %v", b.Open(), tt.wantOpen)
			}
		})
	}
}
