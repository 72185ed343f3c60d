package store_test

import (
	"context"
	"errors"
	"fmt"
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
	b := store.NewBreaker(backend, backend.Ping, store.BreakerOptions{Failures: 3})
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
