package store_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestSharedReady: a shared store is ready while its breaker is closed
// and its ping answers; open, it is not, without a ping; a refusal of its
// configuration is reported before either.
func TestSharedReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		backend := &storetest.Down{Up: memory.New(memory.Options{})}
		var refused error
		closed := 0
		s := store.NewShared(backend, backend, store.SharedOptions{
			Ping:             backend.Ping,
			Refused:          func() error { return refused },
			DenyCacheEntries: 10,
			Close:            func() error { closed++; return nil },
		})
		ctx := context.Background()
		if err := s.Ready(ctx); err != nil {
			t.Fatalf("Ready with the store up: %v", err)
		}
		refused = errors.New("WRONGPASS")
		if err := s.Ready(ctx); err != refused {
			t.Errorf("Ready with a refusal: %v, want it", err)
		}
		refused = nil
		backend.Down.Store(true)
		if err := s.Ready(ctx); !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, store.ErrBreakerOpen) {
			t.Errorf("Ready with the store down: %v, want the ping's error", err)
		}
		l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitSecond, 1, 0)
		for range 5 { // BreakerOptions.Failures' default
			_ = s.Apply(ctx, &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}})
		}
		if !s.Breaker.Open() {
			t.Fatal("breaker closed after 5 failures through the stack")
		}
		pings := backend.Calls.Load()
		if err := s.Ready(ctx); !errors.Is(err, store.ErrBreakerOpen) {
			t.Errorf("Ready with the breaker open: %v, want ErrBreakerOpen", err)
		}
		if backend.Calls.Load() != pings {
			t.Error("Ready called the store while the breaker is open")
		}
		if err := s.Close(); err != nil || closed != 1 {
			t.Errorf("Close: %v, the store closed %d times; want once", err, closed)
		}
	})
}

// TestSharedStack: requests go to the leases, then the deny cache, then
// the breaker; without deny cache entries there is no deny cache, and no
// refunds to follow.
func TestSharedStack(t *testing.T) {
	backend := memory.New(memory.Options{})
	ping := func(context.Context) error { return nil }
	s := store.NewShared(backend, backend, store.SharedOptions{Ping: ping, DenyCacheEntries: 10})
	defer s.Close()
	if s.Store != limits.Store(s.Leases) || s.Deny == nil {
		t.Errorf("with a deny cache: top %T, deny %v; want the leases over a deny cache", s.Store, s.Deny)
	}
	if s.FollowRefunds() != nil {
		t.Error("FollowRefunds of a store that sends no refund notices: want nil")
	}
	l, _ := limits.NewLimit(limits.FixedWindow, 1, limits.UnitHour, 1, 0)
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		b := &limits.Batch{Checks: []limits.Check{{Key: "{k}x", Limit: l, Hits: 1}}}
		if err := s.Apply(ctx, b); err != nil || b.Admitted != want {
			t.Fatalf("hit %d: admitted %v, %v; want %v", i+1, b.Admitted, err, want)
		}
	}
	if n := s.Deny.Len(); n != 1 {
		t.Errorf("deny cache entries after a hit over the limit: %d, want 1", n)
	}
	plain := store.NewShared(backend, backend, store.SharedOptions{Ping: ping})
	defer plain.Close()
	if plain.Deny != nil || plain.FollowRefunds() != nil {
		t.Errorf("without deny cache entries: deny %v; want none, and no refunds to follow", plain.Deny)
	}
}
