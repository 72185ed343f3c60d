package redis_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// failoverLoad is what a paced load saw across a failover.
type failoverLoad struct {
	admitted, rejected, failed int
	// afterSwitch counts the requests decided once the sentinel named the
	// new master.
	afterSwitch int
	other       error // an error that is not an outage
	errs        map[string]int
	// switching counts the failures that said the store was switching
	// masters, breakerOpen those the circuit breaker answered, and
	// opened how often it opened.
	switching, breakerOpen, opened int
}

// TestSentinelGracefulFailoverAdmitsWithinLimit runs a paced load against
// one limit across a SENTINEL FAILOVER, until the limit is used up on the
// new master, and requires the store to have admitted no more than the
// limit. For about a second after the replica's promotion the old master
// still takes writes; writes that go there are lost, and each one lost
// is a request admitted twice over.
func TestSentinelGracefulFailoverAdmitsWithinLimit(t *testing.T) {
	sn := redistest.StartSentinel(t)
	failoverWithin(t, sn, sn.SentinelAddrs)
}

// TestSentinelGracefulFailoverLeaderLast is
// TestSentinelGracefulFailoverAdmitsWithinLimit with three sentinels, the
// store being given the one that leads the failover last: the others
// learn of the promotion only from its hello messages, up to 2 s after
// the switch.
func TestSentinelGracefulFailoverLeaderLast(t *testing.T) {
	sn := redistest.StartSentinels(t, 3)
	addrs := append(slices.Clone(sn.SentinelAddrs[1:]), sn.SentinelAddrs[0])
	failoverWithin(t, sn, addrs)
}

// failoverWithin runs the load of
// TestSentinelGracefulFailoverAdmitsWithinLimit against a store given
// the sentinels at addrs, across a failover that sn's first sentinel
// leads. The store is behind a circuit breaker with the sidecar's
// options, as the sidecar has it: the breaker must let the failover's
// refusals (limits.ErrStoreSwitching) through uncounted, or it fails
// every request until its next probe, half a second after.
func failoverWithin(t *testing.T, sn *redistest.Sentinel, addrs []string) {
	rs := newStore(t, redis.Options{
		SentinelMaster: sn.MasterName,
		SentinelAddrs:  addrs,
		Timeout:        200 * time.Millisecond,
	})
	var (
		mu       sync.Mutex
		switched bool
		load     failoverLoad
	)
	s := store.NewBreaker(rs, rs.Probe, store.BreakerOptions{OnChange: func(open bool, _ error) {
		if open {
			mu.Lock()
			load.opened++
			mu.Unlock()
		}
	}})
	t.Cleanup(s.Close)
	const (
		limit = 600
		pre   = limit / 4
		// pace keeps the load well below what uses the rest of the limit
		// up before the failover ends (some 1.3 s): 450 requests take
		// 2.25 s.
		pace = 5 * time.Millisecond
		// maxRequests bounds the load: 25 s at pace.
		maxRequests = 5000
		// rejections in a row after the switch end the load: the limit
		// is used up on the new master.
		rejections = 20
	)
	l := mustLimit(t, limits.FixedWindow, limit, limits.UnitYear, 1, 0)
	c := check("k", l, 1)
	for range pre {
		if !apply(t, s, c).Admitted {
			t.Fatal("rejected before the failover")
		}
	}
	ctx := context.Background()
	if err := sn.Master.Client(t).Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(pace)
		defer tick.Stop()
		inRow := 0
		for range maxRequests {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			b := &limits.Batch{Checks: []limits.Check{c}}
			err := s.Apply(ctx, b)
			mu.Lock()
			if switched {
				load.afterSwitch++
			}
			switch {
			case err != nil:
				load.failed++
				if load.errs == nil {
					load.errs = map[string]int{}
				}
				load.errs[err.Error()]++
				if errors.Is(err, store.ErrBreakerOpen) {
					load.breakerOpen++
				} else if errors.Is(err, limits.ErrStoreSwitching) {
					load.switching++
				}
				if !errors.Is(err, limits.ErrStoreUnavailable) && load.other == nil {
					load.other = err
				}
				inRow = 0
			case b.Admitted:
				load.admitted++
				inRow = 0
			default:
				load.rejected++
				inRow++
			}
			done := switched && inRow >= rejections
			mu.Unlock()
			if done {
				return
			}
		}
	})
	// Should the failover fail the test, the load stops with it.
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	start := time.Now()
	sn.Failover(t)
	took := time.Since(start)
	mu.Lock()
	switched = true
	mu.Unlock()
	wg.Wait()
	halt()

	total := pre + load.admitted
	t.Logf("failover named the new master %v after SENTINEL FAILOVER; the load then: %d admitted, %d rejected, %d failed (%d after the switch); %d admitted in all, limit %d",
		took.Round(time.Millisecond), load.admitted, load.rejected, load.failed, load.afterSwitch, total, limit)
	t.Logf("failed: %d while switching masters, %d by the open circuit breaker (opened %d times)", load.switching, load.breakerOpen, load.opened)
	for msg, n := range load.errs {
		t.Logf("%d× %s", n, msg)
	}
	key := redis.FullKey(rs, c)
	t.Logf("the old master counts %d hits, the new one %d", windowCount(t, sn.Master, key), windowCount(t, sn.Replica, key))
	if load.other != nil {
		t.Errorf("during failover: %v, want errors that wrap ErrStoreUnavailable", load.other)
	}
	if load.afterSwitch == 0 || load.rejected < rejections {
		t.Fatalf("the load ended before using the limit up on the new master: nothing was tested")
	}
	if total > limit {
		t.Errorf("admitted %d requests in all, %d over the limit of %d: writes to the old master after the promotion were lost", total, total-limit, limit)
	}
}

// windowCount returns the count of a fixed window's key on srv: the
// second of the two little-endian doubles apply.lua keeps; -1 if the key
// is not there.
func windowCount(t *testing.T, srv *redistest.Server, key string) int {
	t.Helper()
	v, err := srv.Client(t).Get(context.Background(), key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return -1
	}
	if err != nil || len(v) != 16 {
		t.Fatalf("GET %s on %s: %q, %v", key, srv.Addr, v, err)
	}
	return int(math.Float64frombits(binary.LittleEndian.Uint64(v[8:])))
}

// TestSentinelUnannouncedSwitch moves the master without any failover
// event the store could hear: the nodes swap roles by REPLICAOF, and the
// sentinel is made to monitor the new master afresh. The old master then
// refuses writes (READONLY), and the store must ask the sentinels again
// and decide on the new master, counting on from what it replicated.
func TestSentinelUnannouncedSwitch(t *testing.T) {
	sn := redistest.StartSentinel(t)
	s := newStore(t, redis.Options{
		SentinelMaster: sn.MasterName,
		SentinelAddrs:  sn.SentinelAddrs,
		Timeout:        200 * time.Millisecond,
	})
	const limit = 100
	l := mustLimit(t, limits.FixedWindow, limit, limits.UnitYear, 1, 0)
	c := check("k", l, 1)
	for range 10 {
		apply(t, s, c)
	}
	ctx := context.Background()
	old, next := sn.Master.Client(t), sn.Replica.Client(t)
	if err := old.Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(sn.Replica.Addr, ":")
	for _, cmd := range [][]any{
		{next, "REPLICAOF", "NO", "ONE"},
		{old, "REPLICAOF", host, port},
	} {
		if err := cmd[0].(*goredis.Client).Do(ctx, cmd[1:]...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd[1:], err)
		}
	}
	sc := goredis.NewClient(&goredis.Options{Addr: sn.SentinelAddrs[0]})
	defer sc.Close()
	for _, cmd := range [][]any{
		{"SENTINEL", "REMOVE", sn.MasterName},
		{"SENTINEL", "MONITOR", sn.MasterName, host, port, 1},
	} {
		if err := sc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}

	failed := 0
	var b *limits.Batch
	for {
		b = &limits.Batch{Checks: []limits.Check{c}}
		err := s.Apply(ctx, b)
		if err == nil {
			break
		}
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Fatalf("after the switch: %v, want ErrStoreUnavailable", err)
		}
		if failed++; failed == 100 {
			t.Fatalf("still failing after %d requests: %v", failed, err)
		}
		time.Sleep(10 * time.Millisecond) // a bounded retry, not a timed assertion
	}
	t.Logf("decided on the new master after %d failed requests", failed)
	if got, want := b.Outcomes[0].Remaining, uint64(limit-11); !b.Admitted || got != want {
		t.Errorf("first decision after the switch: admitted %v, remaining %d, want %d", b.Admitted, got, want)
	}
	if n := windowCount(t, sn.Replica, redis.FullKey(s, c)); n != 11 {
		t.Errorf("the new master counts %d hits, want 11", n)
	}
}
