package redis_test

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
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
	global := mustLimit(b, limits.FixedWindow, 1<<40, limits.UnitSecond, 1, 0)
	tenant := mustLimit(b, limits.SlidingWindow, 1<<40, limits.UnitMinute, 1, 0)
	user := mustLimit(b, limits.TokenBucket, 1<<30, limits.UnitSecond, 1, 0)
	// Keys are built once: building them is the engine's work, measured
	// in pkg/limits.
	g, tn := check("global", global, 1), check("tenant", tenant, 1)
	var users [64]limits.Check
	for i := range users {
		users[i] = check(fmt.Sprint("user", i), user, 1)
	}
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
			calls := after["evalsha"].calls + after["eval"].calls - before["evalsha"].calls - before["eval"].calls
			usec := after["evalsha"].usec + after["eval"].usec - before["evalsha"].usec - before["eval"].usec
			b.ReportMetric(float64(calls)/float64(i), "roundtrips/op")
			b.ReportMetric(float64(usec)/float64(i), "redis-µs/op")
		})
	}
}
