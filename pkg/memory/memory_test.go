package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func newMemory(t *testing.T, clk *storetest.Clock) limits.Store {
	return memory.New(memory.Options{Now: clk.Now})
}

func TestStoreCases(t *testing.T) {
	storetest.Run(t, newMemory)
}

func TestOverrideKeys(t *testing.T) {
	storetest.RunOverrideKeys(t, newMemory)
}

func TestStoreGrants(t *testing.T) {
	storetest.RunGrants(t, newMemory)
}

func TestStoreExact(t *testing.T) {
	storetest.RunExact(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newMemory(t, clk)}
	}, 64, 10)
}

func TestStoreTiers(t *testing.T) {
	storetest.RunTiers(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
		return []limits.Store{newMemory(t, clk)}
	}, 64)
}

func TestStoreDropsExpiredState(t *testing.T) {
	clk := storetest.NewClock(storetest.Epoch)
	s := memory.New(memory.Options{Now: clk.Now})
	l, err := limits.NewLimit(limits.SlidingWindow, 10, limits.UnitSecond, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		key := storetest.Key(t.Name(), fmt.Sprint("user", i), l)
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 10_000 {
		t.Fatalf("Len = %d after 10000 users, want 10000", n)
	}
	// A sliding window's state lives two windows. Past that, touching
	// every shard once must sweep the rest away.
	clk.Advance(2*time.Second + time.Millisecond)
	for i := range 5_000 {
		key := storetest.Key(t.Name(), fmt.Sprint("later", i), l)
		b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 5_000 {
		t.Errorf("Len = %d, want 5000: expired state was kept", n)
	}
}
