package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout is the store timeout in tests that do not test timeouts:
// generous, so the race detector on a small machine cannot trip it.
const testTimeout = 5 * time.Second

var prefixSeq atomic.Int64

// newPrefix returns a key prefix no other store in this test binary uses.
func newPrefix(t testing.TB) string {
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("t%d:%s:", prefixSeq.Add(1), name)
}

// clocked returns o deciding by now instead of Redis's clock.
func clocked(o redis.Options, now func() time.Time) redis.Options {
	o.Now = now
	return o
}

// newStore returns a store for o with a fresh key prefix (unless o has
// one) and the test timeout (unless o has one), closed at cleanup.
func newStore(t testing.TB, o redis.Options) *redis.Store {
	t.Helper()
	if o.KeyPrefix == "" {
		o.KeyPrefix = newPrefix(t)
	}
	if o.Timeout == 0 {
		o.Timeout = testTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.New(ctx, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// urlOf returns the redis:// URL of addr.
func urlOf(addr string) string { return "redis://" + addr }

// commandCalls returns the calls of each command from INFO commandstats.
func commandCalls(t testing.TB, c goredis.UniversalClient) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for name, st := range commandStats(t, c) {
		calls[name] = st.calls
	}
	return calls
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64 // total time Redis spent in the command
}

// commandStats returns INFO commandstats, summed over the masters of a
// cluster.
func commandStats(t testing.TB, c goredis.UniversalClient) map[string]cmdStat {
	t.Helper()
	stats := map[string]cmdStat{}
	add := func(info string) {
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			st := stats[strings.TrimPrefix(name, "cmdstat_")]
			for field := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(field, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats %q: %v", line, err)
				}
				if k == "calls" {
					st.calls += n
				} else {
					st.usec += n
				}
			}
			stats[strings.TrimPrefix(name, "cmdstat_")] = st
		}
	}
	ctx := context.Background()
	if cc, ok := c.(*goredis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			info, err := n.Info(ctx, "commandstats").Result()
			mu.Lock()
			defer mu.Unlock()
			add(info)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return stats
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	add(info)
	return stats
}

// mustLimit compiles a limit or fails the test.
func mustLimit(t testing.TB, alg limits.Algorithm, requests uint64, unit limits.Unit, mult, burst uint64) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, mult, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// check returns a check of limit l on the case-local key name.
func check(name string, l *limits.Limit, hits uint64) limits.Check {
	key := storetest.Key("redis", name, l)
	return limits.Check{Key: key, Limit: l, Hits: hits}
}

// apply applies checks with s and fails the test on an error.
func apply(t testing.TB, s limits.Store, checks ...limits.Check) *limits.Batch {
	t.Helper()
	return applyBatch(t, s, &limits.Batch{Checks: checks})
}

// applyBatch applies b to s and returns it.
func applyBatch(t testing.TB, s limits.Store, b *limits.Batch) *limits.Batch {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return b
}

// verdict is what a store answers for a batch.
type verdict struct {
	Admitted bool
	Outcomes []limits.Outcome
}

// diffBatch compares the answers in two batches.
func diffBatch(want, got *limits.Batch) string {
	return cmp.Diff(verdict{want.Admitted, want.Outcomes}, verdict{got.Admitted, got.Outcomes})
}
