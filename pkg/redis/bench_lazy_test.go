package redis_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// BenchmarkLazyApply decides one fixed-window descriptor through a Lazy
// store, as the sidecar does (its clients carry the hooks that watch for
// refusals), one request at a time and from 64 goroutines at once, whose
// requests go to Redis together.
func BenchmarkLazyApply(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := redis.Connect(ctx, redis.Options{URL: urlOf(srv.Addr), KeyPrefix: newPrefix(b), Timeout: testTimeout}, redis.LazyOptions{})
	if err != nil || !l.Connected() {
		b.Fatalf("Connect: %v, connected %v", err, err == nil && l.Connected())
	}
	defer l.Close()
	lim := mustLimit(b, limits.FixedWindow, 1<<40, limits.UnitHour, 1, 0)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var batch limits.Batch
		for b.Loop() {
			batch.Reset()
			batch.Checks = append(batch.Checks, check("k", lim, 1))
			if err := l.Apply(context.Background(), &batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel64", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			var batch limits.Batch
			for pb.Next() {
				batch.Reset()
				batch.Checks = append(batch.Checks, check("k", lim, 1))
				if err := l.Apply(context.Background(), &batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkProbe runs the readiness and breaker probe on a standalone
// Redis, and reports the time Redis spends in it.
func BenchmarkProbe(b *testing.B) {
	srv := redistest.StartServer(b)
	s := newStore(b, redis.Options{URL: urlOf(srv.Addr)})
	rc := srv.Client(b)
	ctx := context.Background()
	before := commandStats(b, rc)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := s.Probe(ctx); err != nil {
			b.Fatal(err)
		}
		n++
	}
	after := commandStats(b, rc)
	b.ReportMetric(float64(after["evalsha"].Usec-before["evalsha"].Usec)/float64(n), "redis-µs/op")
}
