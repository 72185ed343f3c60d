package store_test

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// BenchmarkLeases measures a check answered from a lease, on a clock
// that stands still, with a limit so high that the lease never runs dry
// for long: almost every batch is answered locally, the rest top the
// lease up from a memory store.
func BenchmarkLeases(b *testing.B) {
	clk := storetest.NewClock(storetest.Epoch)
	l := leased(b, limits.FixedWindow, 1_000_000_000, 1000, limits.UnitHour)
	ls := store.NewLeases(memory.New(memory.Options{Now: clk.Now}), store.LeasesOptions{Now: clk.Now})
	batch := &limits.Batch{}
	b.ReportAllocs()
	for b.Loop() {
		batch.Reset()
		batch.Checks = append(batch.Checks, limits.Check{Key: "k", Limit: l, Hits: 1})
		if err := ls.Apply(context.Background(), batch); err != nil || !batch.Admitted {
			b.Fatal(err)
		}
	}
}
