package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/latencyproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// slowCallers is the closed loop of BenchmarkSlowRedis: as many callers
// as rlsload's default concurrency.
const slowCallers = 64

// startSlow starts a proxy to srv that adds rtt, closed at cleanup.
func startSlow(t testing.TB, srv *redistest.Server, rtt time.Duration) *latencyproxy.Proxy {
	t.Helper()
	p, err := latencyproxy.Start(srv.Addr, rtt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// pinger sends PINGs to addr one after the other, on a connection of its
// own, until stop, and returns the median round-trip time. It measures
// the round-trip time that a command alone sees while a benchmark runs:
// on a loaded machine that is more than the proxy adds.
func pinger(t testing.TB, addr string) (stop func() time.Duration) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1})
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // connect
		t.Fatal(err)
	}
	done := make(chan struct{})
	var pings []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			start := time.Now()
			if c.Ping(ctx).Err() == nil {
				pings = append(pings, time.Since(start))
			}
		}
	})
	return func() time.Duration {
		close(done)
		wg.Wait()
		_ = c.Close()
		if len(pings) == 0 {
			t.Fatal("no PING answered")
		}
		slices.Sort(pings)
		return pings[len(pings)/2]
	}
}

// BenchmarkSlowRedis decides the three tiers (rlsload's tiered workload)
// from a closed loop of 64 callers on a standalone Redis behind a proxy
// that adds 0, 2, 5 and 10 ms of round-trip time, with the default
// store timeout of 15 ms. It reports the round-trip time of a PING
// through the proxy while the callers run (rtt-ms, the median: what the
// proxy adds, plus loopback, Redis and a busy machine's scheduling), the
// decisions' median and 99th percentile latency (p50-ms, p99-ms) and the
// median's ratio to the round-trip time (p50/rtt), the share of
// decisions that failed (errors/op, each one that the failure mode would
// answer), and Redis's CPU per decision. Use -benchtime with a count
// (e.g. 10000x) for runs of the same length; docs/slow-redis.md has
// figures.
func BenchmarkSlowRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	rc := srv.Client(b)
	for _, added := range []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt%dms", added/time.Millisecond), func(b *testing.B) {
			p := startSlow(b, srv, added)
			s := newStore(b, redis.Options{URL: urlOf(p.Addr), Timeout: redis.DefaultTimeout})
			g, tn, users := benchTiers(b)
			var next atomic.Int64
			var failed atomic.Int64
			var mu sync.Mutex
			var lats []time.Duration
			run := func(pb interface{ Next() bool }, record bool) {
				u := users[next.Add(1)%int64(len(users))]
				var batch limits.Batch
				var mine []time.Duration
				for pb.Next() {
					batch.Reset()
					batch.Checks = append(batch.Checks, g, tn, u)
					start := time.Now()
					err := s.Apply(context.Background(), &batch)
					mine = append(mine, time.Since(start))
					if err != nil {
						failed.Add(1)
					}
				}
				if record {
					mu.Lock()
					lats = append(lats, mine...)
					mu.Unlock()
				}
			}
			// Warm up: connections, and whatever the store learns of
			// the round-trip time.
			var wg sync.WaitGroup
			for range slowCallers {
				wg.Go(func() { run(&counter{n: 40}, false) })
			}
			wg.Wait()
			failed.Store(0)
			redisBefore := redisCPU(b, rc)
			stop := pinger(b, p.Addr)
			b.SetParallelism(slowCallers / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) { run(pb, true) })
			b.StopTimer()
			rtt := stop()
			slices.Sort(lats)
			pct := func(q float64) time.Duration { return lats[int(q*float64(len(lats)-1))] }
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(rtt), "rtt-ms")
			b.ReportMetric(ms(pct(0.5)), "p50-ms")
			b.ReportMetric(ms(pct(0.99)), "p99-ms")
			b.ReportMetric(float64(pct(0.5))/float64(rtt), "p50/rtt")
			b.ReportMetric(float64(failed.Load())/float64(len(lats)), "errors/op")
			b.ReportMetric(float64((redisCPU(b, rc)-redisBefore).Microseconds())/float64(len(lats)), "redis-cpu-µs/op")
		})
	}
}

// counter's Next reports true n times.
type counter struct{ n int }

func (c *counter) Next() bool {
	c.n--
	return c.n >= 0
}

// TestSlowRedis decides requests through a proxy that adds 10 ms of
// round-trip time, with the default store timeout of 15 ms: 32 callers
// at once, each five requests in a row. With one round trip at a time,
// a request waits for the one under way and then for its own, past the
// timeout; the store must add round trips, so that every request is
// decided, while still batching: some apply.lua call decides several.
// A noisy machine can stall requests past the timeout now and then, so
// the test fails only if each of three attempts has half its requests
// failed.
func TestSlowRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	p := startSlow(t, srv, 10*time.Millisecond)
	s := newStore(t, redis.Options{URL: urlOf(p.Addr), Timeout: redis.DefaultTimeout})
	var calls pipelineSizes
	redis.AddHook(s, &calls)
	l := mustLimit(t, limits.FixedWindow, 1<<40, limits.UnitHour, 1, 0)
	const callers, each = 32, 5
	var errs []error
	for attempt := range 3 {
		var mu sync.Mutex
		var failed []error
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for range each {
					b := &limits.Batch{Checks: []limits.Check{check("global", l, 1), check(fmt.Sprint("user", g), l, 1)}}
					if err := s.Apply(context.Background(), b); err != nil {
						mu.Lock()
						failed = append(failed, err)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		// A stall of the test machine longer than the 5 ms the timeout
		// leaves fails every request in flight: on a machine with two busy
		// loops beside the test, a fifth to a third of an attempt's
		// requests, with the pipe as before and after the change of its
		// PINGs alike. Before the pipe adapted, every request failed, so
		// an attempt with fewer than half failed tells the two apart.
		if len(failed) < callers*each/2 {
			errs = nil
			break
		}
		t.Logf("attempt %d: %d of %d requests failed, the first with %v", attempt+1, len(failed), callers*each, failed[0])
		errs = failed
	}
	if len(errs) > 0 {
		t.Errorf("half the requests or more failed in each of three attempts, %d of %d in the last: %v", len(errs), callers*each, errs[0])
	}
	if _, requests, most := calls.calls(); most < 2 {
		t.Errorf("%d requests, at most %d in one apply.lua call: want some batched", requests, most)
	}
}
