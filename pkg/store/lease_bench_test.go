package store_test

import (
	"context"
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// BenchmarkLeases measures Leases.Apply on a memory store, with a clock
// that stands still: a batch answered from a lease (refilled by about one
// request in 750), a lease beside checks that need the store, a request
// that another limit rejects (the lease takes its hits back), and a
// batch with no leased limit, which Leases passes on.
func BenchmarkLeases(b *testing.B) {
	clk := storetest.NewClock(storetest.Epoch)
	hot := leased(b, limits.FixedWindow, 1_000_000_000_000, 1000, limits.UnitHour)
	plain := leased(b, limits.FixedWindow, 1_000_000_000_000, 0, limits.UnitHour)
	ban := leased(b, limits.FixedWindow, 0, 0, limits.UnitHour)
	check := func(name string, l *limits.Limit) limits.Check {
		return limits.Check{Key: storetest.Key("lease-bench", name, l), Limit: l, Hits: 1}
	}
	run := func(b *testing.B, checks ...limits.Check) {
		l := store.NewLeases(memory.New(memory.Options{Now: clk.Now}), store.LeasesOptions{Now: clk.Now})
		batch := &limits.Batch{Checks: checks}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Apply(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("local/1_check", func(b *testing.B) { run(b, check("hot", hot)) })
	// As the engine sends it: a batch emptied and filled again each time.
	b.Run("local/1_check_refilled_batch", func(b *testing.B) {
		ls := store.NewLeases(memory.New(memory.Options{Now: clk.Now}), store.LeasesOptions{Now: clk.Now})
		batch := &limits.Batch{}
		b.ReportAllocs()
		for b.Loop() {
			batch.Reset()
			batch.Checks = append(batch.Checks, limits.Check{Key: "k", Limit: hot, Hits: 1})
			if err := ls.Apply(context.Background(), batch); err != nil || !batch.Admitted {
				b.Fatal(err)
			}
		}
	})
	b.Run("local_and_store/3_checks", func(b *testing.B) {
		run(b, check("hot", hot), check("tenant", plain), check("user", plain))
	})
	b.Run("rejected/2_checks", func(b *testing.B) { run(b, check("hot", hot), check("banned", ban)) })
	b.Run("no_lease/3_checks", func(b *testing.B) {
		run(b, check("global", plain), check("tenant", plain), check("user", plain))
	})
	b.Run("local/parallel", func(b *testing.B) {
		l := store.NewLeases(memory.New(memory.Options{Now: clk.Now}), store.LeasesOptions{Now: clk.Now})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			batch := &limits.Batch{Checks: []limits.Check{check("hot", hot)}}
			for pb.Next() {
				if err := l.Apply(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
