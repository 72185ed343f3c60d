package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// clusterFollowBound is how long after a replica's promotion the store
// may take to decide the promoted master's keys again. go-redis reloads
// its slot map on its own once a minute; before the store reloaded it on
// failures, its keys stayed in the failure mode that long.
const clusterFollowBound = 10 * time.Second

// TestClusterFollowsFailover kills a Cluster master that has a replica
// while a key of it and a key of another master are in use: once the
// replica is promoted, the store decides the first key again within
// clusterFollowBound, and the other key's count is exact throughout.
func TestClusterFollowsFailover(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t)
	ctx := context.Background()
	prefix := newPrefix(t)
	s := newStore(t, redis.Options{ClusterAddrs: c.Addrs, KeyPrefix: prefix, Timeout: 250 * time.Millisecond})
	l := mustLimit(t, limits.FixedWindow, 1_000_000, limits.UnitHour, 1, 0)
	ranges, err := c.Client(t).ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	dead, live := keyOn(t, prefix, ranges, l, c.Addrs[0]), keyOn(t, prefix, ranges, l, c.Addrs[1])
	admitted := 0
	use := func(ch limits.Check) error {
		b := &limits.Batch{Checks: []limits.Check{ch}}
		if err := s.Apply(ctx, b); err != nil {
			return err
		}
		if !b.Admitted {
			return fmt.Errorf("%s not admitted", ch.Key)
		}
		if ch.Key == live.Key {
			admitted++
			if got, want := b.Outcomes[0].Remaining, l.Requests-uint64(admitted); got != want {
				t.Errorf("the other master's key: %d remaining after %d admitted, want %d", got, admitted, want)
			}
		}
		return nil
	}
	for _, ch := range []limits.Check{dead, live, dead, live} {
		if err := use(ch); err != nil {
			t.Fatal(err)
		}
	}

	promoted := c.FailOver(t, 0)
	start := time.Now()
	for {
		// Keys of the other masters are decided all along.
		if err := use(live); err != nil {
			t.Fatalf("the other master's key: %v", err)
		}
		err := use(dead)
		if err == nil {
			break
		}
		if time.Since(start) > clusterFollowBound {
			t.Fatalf("the failed master's key not decided %v after its replica's promotion: %v", clusterFollowBound, err)
		}
		time.Sleep(20 * time.Millisecond) // a bounded poll, not a timed assertion
	}
	t.Logf("replica promoted %v after the kill; its keys decided again %v after that", promoted, time.Since(start))
}

// keyOn returns a check of l on a key whose slot master addr serves.
func keyOn(t *testing.T, prefix string, ranges []goredis.ClusterSlot, l *limits.Limit, addr string) limits.Check {
	t.Helper()
	for i := range 10_000 {
		ch := check(fmt.Sprintf("k%d", i), l, 1)
		slot := int(redis.SlotWithPrefix(prefix, ch.Key))
		for _, r := range ranges {
			if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 && r.Nodes[0].Addr == addr {
				return ch
			}
		}
	}
	t.Fatalf("no key found on master %s", addr)
	return limits.Check{}
}
