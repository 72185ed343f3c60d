package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
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
	calls, err := redistest.CommandCalls(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// commandStats returns INFO commandstats, summed over the masters of a
// cluster.
func commandStats(t testing.TB, c goredis.UniversalClient) map[string]redistest.CommandStat {
	t.Helper()
	stats, err := redistest.CommandStats(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
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
