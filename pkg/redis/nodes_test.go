package redis_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestClusterMasterDownCutOffAlone: when one Cluster master dies, only
// the requests with a key on it fail; after a few failures they fail at
// once (ErrNodeDown) instead of each reaching the dead master; the
// requests on the other masters are decided throughout; and the breaker
// in front of the whole store stays closed. Before each master had a
// breaker of its own, the dead master's failures opened the one breaker
// and every request failed.
func TestClusterMasterDownCutOffAlone(t *testing.T) {
	// Without full coverage, the live masters keep serving their slots
	// once the cluster sees the dead one as failed.
	c := redistest.StartCluster(t, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	s := newStore(t, redis.Options{ClusterAddrs: c.Addrs, Timeout: 200 * time.Millisecond})
	var opened atomic.Int64
	// One failure blamed on the whole store opens it.
	b := store.NewBreaker(s, s.ProbeAny, store.BreakerOptions{
		Failures: 1,
		OnChange: func(open bool, _ error) {
			if open {
				opened.Add(1)
			}
		},
	})
	defer b.Close()
	l := mustLimit(t, limits.FixedWindow, 1_000_000, limits.UnitHour, 1, 0)

	cc := c.Client(t)
	victim := c.Addrs[0]
	var keys []string
	onVictim := map[string]bool{}
	for i := range 60 {
		key := "{t" + strconv.Itoa(i) + "}"
		node, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		onVictim[key] = node.Options().Addr == victim
	}
	apply := func(key string) error {
		return b.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}})
	}
	for _, k := range keys {
		if err := apply(k); err != nil {
			t.Fatalf("before the kill: %v", err)
		}
	}

	// rounds applies every key n times, and counts what happened.
	var liveErrs, deadOK, cutOff, dead int
	rounds := func(n int) {
		liveErrs, deadOK, cutOff, dead = 0, 0, 0, 0
		for range n {
			for _, k := range keys {
				err := apply(k)
				switch {
				case !onVictim[k] && err != nil:
					liveErrs++
					if liveErrs == 1 {
						t.Errorf("key %s on a live master: %v", k, err)
					}
				case onVictim[k] && err == nil:
					deadOK++
				case onVictim[k]:
					dead++
					if errors.Is(err, redis.ErrNodeDown) {
						cutOff++
					}
					if !errors.Is(err, limits.ErrStoreUnavailable) {
						t.Errorf("key %s on the failed master: %v, want ErrStoreUnavailable", k, err)
					}
				}
			}
		}
	}
	waitUp := func() {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for len(s.NodesDown()) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if down := s.NodesDown(); len(down) > 0 {
			t.Fatalf("masters still cut off 15 s after they came back: %v", down)
		}
	}

	// A stalled master: its calls run into the store's own timeout.
	proc, err := os.FindProcess(c.Nodes[0].PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rounds(3)
	stalledDown := s.NodesDown()
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("stalled master: %d requests failed, %d of them cut off at once; live masters: %d errors", dead, cutOff, liveErrs)
	if liveErrs > 0 || deadOK > 0 || cutOff == 0 {
		t.Errorf("stalled master: %d errors on live masters (want 0), %d requests on it succeeded (want 0), %d cut off (want some)", liveErrs, deadOK, cutOff)
	}
	if len(stalledDown) != 1 || stalledDown[0] != victim {
		t.Errorf("masters cut off while one stalled: %v, want [%s]", stalledDown, victim)
	}
	if n := opened.Load(); n != 0 {
		t.Fatalf("a stalled master opened the whole store's breaker %d times", n)
	}
	waitUp()

	// A dead master: its calls are refused at once.
	c.Nodes[0].Kill()
	rounds(10)
	t.Logf("dead master: %d requests failed, %d of them cut off at once; live masters: %d errors", dead, cutOff, liveErrs)
	if liveErrs > 0 {
		t.Errorf("%d requests on live masters failed", liveErrs)
	}
	if deadOK > 0 {
		t.Errorf("%d requests on the dead master succeeded", deadOK)
	}
	if cutOff < dead/2 {
		t.Errorf("only %d of %d requests on the dead master were cut off at once", cutOff, dead)
	}
	if n := opened.Load(); n != 0 {
		t.Errorf("the whole store's breaker opened %d times", n)
	}
	if down := s.NodesDown(); len(down) != 1 || down[0] != victim {
		t.Fatalf("masters cut off: %v, want [%s]", down, victim)
	}
	// The whole store's breaker, were it to open, closes on the live
	// masters: readiness still wants them all.
	if err := s.ProbeAny(context.Background()); err != nil {
		t.Errorf("ProbeAny with two of three masters alive: %v", err)
	}
	if err := s.Probe(context.Background()); err == nil {
		t.Error("Probe passed with a master dead")
	}

	// Back: the probe lets its keys through again.
	c.Nodes[0].Restart(t)
	waitUp()
	for k, on := range onVictim {
		if on {
			if err := apply(k); err != nil {
				t.Errorf("key %s after the master came back: %v", k, err)
			}
		}
	}
}
