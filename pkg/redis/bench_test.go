package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/refbench"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// BenchmarkApply decides requests on a standalone Redis, on Redis's clock,
// as in production: one descriptor (a fixed window), and the three tiers
// (a fixed-window global, a sliding-window tenant and a token-bucket
// user). Limits are high enough that every request is admitted and
// writes. It reports script calls, i.e. round trips, per decision.
func BenchmarkApply(b *testing.B) {
	srv := redistest.StartServer(b)
	benchmarkApply(b, redis.Options{URL: urlOf(srv.Addr)}, srv.Client(b))
}

// BenchmarkClusterApply is BenchmarkApply on a three-master cluster,
// where the three tiers are three slot groups.
func BenchmarkClusterApply(b *testing.B) {
	c := redistest.StartCluster(b)
	benchmarkApply(b, redis.Options{ClusterAddrs: c.Addrs}, c.Client(b))
}

func benchmarkApply(b *testing.B, opts redis.Options, rc goredis.UniversalClient) {
	s := newStore(b, opts)
	g, tn, users := benchTiers(b)
	gu := g
	gu.Usage = true
	cal, err := limits.NewCalendarLimit(1<<30, limits.UnitMonth, &limits.Calendar{})
	if err != nil {
		b.Fatal(err)
	}
	gc := check("global_month", cal, 1)
	tests := []struct {
		name   string
		checks func(i int) []limits.Check
	}{
		{name: "one_descriptor", checks: func(int) []limits.Check {
			return []limits.Check{g}
		}},
		{name: "three_tiers", checks: func(i int) []limits.Check {
			return []limits.Check{g, tn, users[i%len(users)]}
		}},
		// The same through apply.lua's checks rather than fast.lua's (a
		// usage charge is never decided per key): what every check pays
		// there.
		{name: "three_tiers_full_script", checks: func(i int) []limits.Check {
			return []limits.Check{gu, tn, users[i%len(users)]}
		}},
		// A calendar month as the global tier: decided by apply.lua.
		{name: "three_tiers_calendar", checks: func(i int) []limits.Check {
			return []limits.Check{gc, tn, users[i%len(users)]}
		}},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			ctx := context.Background()
			var batch limits.Batch
			before := commandStats(b, rc)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				batch.Reset()
				batch.Checks = append(batch.Checks, tt.checks(i)...)
				if err := s.Apply(ctx, &batch); err != nil {
					b.Fatal(err)
				}
				if !batch.Admitted {
					b.Fatal("not admitted")
				}
				i++
			}
			after := commandStats(b, rc)
			calls := after["evalsha"].Calls + after["eval"].Calls - before["evalsha"].Calls - before["eval"].Calls
			usec := after["evalsha"].Usec + after["eval"].Usec - before["evalsha"].Usec - before["eval"].Usec
			b.ReportMetric(float64(calls)/float64(i), "roundtrips/op")
			b.ReportMetric(float64(usec)/float64(i), "redis-µs/op")
		})
	}
}

// BenchmarkApplyParallel decides the three tiers from 64 goroutines at
// once on a standalone Redis, as a busy sidecar does, and reports the CPU
// each decision costs this process (client-cpu-µs/op) and Redis
// (redis-cpu-µs/op, from INFO cpu) besides wall time. The 64 users'
// buckets spread the writes.
func BenchmarkApplyParallel(b *testing.B) {
	srv := redistest.StartServer(b)
	benchmarkApplyParallel(b, redis.Options{URL: urlOf(srv.Addr)}, srv.Client(b))
}

// BenchmarkClusterApplyParallel is BenchmarkApplyParallel on a
// three-master cluster, where the three tiers are three slot groups and
// Redis CPU is the sum over the masters.
func BenchmarkClusterApplyParallel(b *testing.B) {
	c := redistest.StartCluster(b)
	benchmarkApplyParallel(b, redis.Options{ClusterAddrs: c.Addrs}, c.Client(b))
}

func benchmarkApplyParallel(b *testing.B, opts redis.Options, rc goredis.UniversalClient) {
	for _, inflight := range []int{1, 2, 4, 64} {
		b.Run(fmt.Sprint("inflight", inflight), func(b *testing.B) {
			opts.MaxInflight, opts.Timeout = inflight, time.Second
			s := newStore(b, opts)
			g, tn, users := benchTiers(b)
			var next atomic.Int64
			redisBefore, clientBefore := redisCPU(b, rc), processCPU(b)
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				u := users[next.Add(1)%int64(len(users))]
				var batch limits.Batch
				for pb.Next() {
					batch.Reset()
					batch.Checks = append(batch.Checks, g, tn, u)
					if err := s.Apply(context.Background(), &batch); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((redisCPU(b, rc)-redisBefore).Microseconds())/float64(b.N), "redis-cpu-µs/op")
			b.ReportMetric(float64((processCPU(b)-clientBefore).Microseconds())/float64(b.N), "client-cpu-µs/op")
		})
	}
}

// benchTiers returns the checks of the benchmarks' three tiers: a
// fixed-window global, a sliding-window tenant and 64 token-bucket users.
// Limits are high enough that every request is admitted and writes. Keys
// are built once: building them is the engine's work, measured in
// pkg/limits.
func benchTiers(b *testing.B) (global, tenant limits.Check, users [64]limits.Check) {
	global = check("global", mustLimit(b, limits.FixedWindow, 1<<40, limits.UnitSecond, 1, 0), 1)
	tenant = check("tenant", mustLimit(b, limits.SlidingWindow, 1<<40, limits.UnitMinute, 1, 0), 1)
	user := mustLimit(b, limits.TokenBucket, 1<<30, limits.UnitSecond, 1, 0)
	for i := range users {
		users[i] = check(fmt.Sprint("user", i), user, 1)
	}
	return global, tenant, users
}

// redisCPU returns the CPU time Redis has used, from INFO cpu: on a
// cluster, the sum over its masters.
func redisCPU(t testing.TB, c goredis.UniversalClient) time.Duration {
	t.Helper()
	if cc, ok := c.(*goredis.ClusterClient); ok {
		var mu sync.Mutex
		var total time.Duration
		err := cc.ForEachMaster(context.Background(), func(_ context.Context, n *goredis.Client) error {
			d := redisCPU(t, n)
			mu.Lock()
			total += d
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return total
	}
	d, err := refbench.RedisCPU(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// processCPU returns the CPU time this process has used.
func processCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
