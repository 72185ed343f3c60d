package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestSentinelFailover decides through Sentinel, kills the master, and
// requires decisions to resume on the promoted replica within a bound,
// with counts that never exceed the limit.
func TestSentinelFailover(t *testing.T) {
	sn := redistest.StartSentinel(t)
	s := newStore(t, redis.Options{
		SentinelMaster: sn.MasterName,
		SentinelAddrs:  sn.SentinelAddrs,
		Timeout:        200 * time.Millisecond,
	})
	const limit = 100
	l := mustLimit(t, limits.FixedWindow, limit, limits.UnitYear, 1, 0)
	c := check("k", l, 1)
	for i := range 10 {
		b := apply(t, s, c)
		if !b.Admitted || b.Outcomes[0].Remaining != uint64(limit-1-i) {
			t.Fatalf("request %d: admitted %v, remaining %d", i, b.Admitted, b.Outcomes[0].Remaining)
		}
	}
	// Let the replica catch up, as it normally has within milliseconds;
	// what a lagging replica loses is counted below.
	if err := sn.Master.Client(t).Do(context.Background(), "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}

	sn.Master.Kill()
	killed := time.Now()
	const bound = 30 * time.Second
	failed := 0
	var b *limits.Batch
	for {
		b = &limits.Batch{Checks: []limits.Check{probe(c)}}
		err := s.Apply(context.Background(), b)
		if err == nil {
			break
		}
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Fatalf("during failover: %v, want ErrStoreUnavailable", err)
		}
		if time.Since(killed) > bound {
			t.Fatalf("no decision within %v of killing the master: %v", bound, err)
		}
		failed++
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(killed)
	remaining := b.Outcomes[0].Remaining
	t.Logf("decisions resumed %v after the master died (%d requests failed meanwhile); remaining %d after failover, %d before", took, failed, remaining, limit-10)
	if remaining < limit-10 {
		t.Errorf("remaining %d after failover, less than the %d before", remaining, limit-10)
	}
	if remaining != limit-10 {
		t.Logf("the replica had not replicated %d hits: they were forgotten", remaining-(limit-10))
	}
	// From here on the new master counts exactly.
	admitted := 0
	for range remaining + 10 {
		if apply(t, s, c).Admitted {
			admitted++
		}
	}
	if uint64(admitted) != remaining {
		t.Errorf("admitted %d after failover, want the remaining %d", admitted, remaining)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping after failover: %v", err)
	}
}
