package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

func TestStandaloneScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	testScriptFlush(t, redis.Options{URL: urlOf(srv.Addr)}, func() {
		if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// testScriptFlush runs three-tier requests (over three slots on a
// cluster) and flushes Redis's script cache twice along the way: no
// request may fail, and every answer must be the memory store's.
func testScriptFlush(t *testing.T, opts redis.Options, flush func()) {
	clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
	s := newStore(t, clocked(opts, clk.Now))
	mem := memory.New(memory.Options{Now: clk.Now})
	global := mustLimit(t, limits.FixedWindow, 1000, limits.UnitMinute, 1, 0)
	tenant := mustLimit(t, limits.SlidingWindow, 30, limits.UnitMinute, 1, 0)
	user := mustLimit(t, limits.TokenBucket, 10, limits.UnitMinute, 1, 0)
	admitted := 0
	for i := range 60 {
		if i == 10 || i == 35 {
			flush()
		}
		clk.Advance(10 * time.Millisecond)
		checks := []limits.Check{check("global", global, 1), check("tenant", tenant, 1), check("user"+string(rune('a'+i%4)), user, 1)}
		b := &limits.Batch{Checks: checks}
		if err := s.Apply(context.Background(), b); err != nil {
			t.Fatalf("request %d: Apply: %v", i, err)
		}
		want := apply(t, mem, checks...)
		if b.Admitted != want.Admitted || len(b.Outcomes) != len(want.Outcomes) {
			t.Fatalf("request %d: admitted %v, want %v", i, b.Admitted, want.Admitted)
		}
		for j := range b.Outcomes {
			if b.Outcomes[j] != want.Outcomes[j] {
				t.Errorf("request %d, check %d: %+v, want %+v", i, j, b.Outcomes[j], want.Outcomes[j])
			}
		}
		if b.Admitted {
			admitted++
		}
	}
	if admitted != 30 {
		t.Errorf("admitted %d, want the tenant limit 30", admitted)
	}
}

// TestStandaloneRestart kills Redis in the middle of a run: requests fail
// fast with ErrStoreUnavailable while it is down, and succeed again once it
// is back, with the lost script cache reloaded transparently.
func TestStandaloneRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	const timeout = 200 * time.Millisecond
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr), Timeout: timeout})
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	c := check("k", l, 1)
	for range 5 {
		if b := apply(t, s, c); !b.Admitted {
			t.Fatal("not admitted")
		}
	}

	srv.Kill()
	for i := range 20 {
		start := time.Now()
		err := s.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{c}})
		took := time.Since(start)
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Fatalf("request %d with Redis down: err = %v, want one wrapping ErrStoreUnavailable", i, err)
		}
		// The deadline plus scheduling slack for the race detector on a
		// busy machine: what this catches is a request that waits on a
		// dead Redis past the timeout, for good.
		if took > timeout+time.Second {
			t.Errorf("request %d with Redis down took %v, more than the timeout %v", i, took, timeout)
		}
		if i == 0 {
			t.Logf("first error with Redis down, after %v: %v", took, err)
		}
	}
	if err := s.Ping(context.Background()); !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("Ping with Redis down: %v, want ErrStoreUnavailable", err)
	}

	srv.Restart(t)
	restarted := time.Now()
	deadline := restarted.Add(10 * time.Second)
	failed := 0
	for {
		err := s.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{probe(c)}})
		if err == nil {
			break
		}
		if !errors.Is(err, limits.ErrStoreUnavailable) {
			t.Fatalf("after restart: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no success within 10 s of the restart: %v", err)
		}
		failed++
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("first success %v after the restart, %d requests failed in between", time.Since(restarted), failed)
	// Redis kept no data, so the window starts over; every request must
	// now succeed.
	for i := range 20 {
		b := apply(t, s, c)
		if !b.Admitted || b.Outcomes[0].Remaining != uint64(1000-1-i) {
			t.Fatalf("request %d after restart: admitted %v, remaining %d, want %d", i, b.Admitted, b.Outcomes[0].Remaining, 1000-1-i)
		}
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping after restart: %v", err)
	}
}

// TestTimeout: a Redis that does not answer costs a request no more than
// the smaller of Options.Timeout and the request's deadline.
func TestTimeout(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	c := check("k", l, 1)
	tests := []struct {
		name     string
		timeout  time.Duration
		deadline time.Duration // of the request's context; 0 for none
		want     time.Duration
	}{
		{name: "store_timeout", timeout: 50 * time.Millisecond, want: 50 * time.Millisecond},
		{name: "request_deadline", timeout: 5 * time.Second, deadline: 30 * time.Millisecond, want: 30 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, redis.Options{URL: urlOf(srv.Addr), Timeout: tt.timeout})
			apply(t, s, c) // connect first
			// EVALSHA is a write: CLIENT PAUSE WRITE holds it, far longer
			// than the slack below, so a bound not kept shows.
			if err := rc.Do(context.Background(), "CLIENT", "PAUSE", 5000, "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			start := time.Now()
			err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{c}})
			took := time.Since(start)
			// The store's own timeout is the store failing (Unavailable to
			// Envoy); the request's deadline is the caller's.
			if !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) != (tt.deadline > 0) {
				t.Errorf("err = %v, want ErrStoreUnavailable, and DeadlineExceeded only for the request's deadline", err)
			}
			// Which bound ended the call is the error's to say (above);
			// this is that it ended then, with slack for a busy machine.
			if took < tt.want || took > tt.want+time.Second {
				t.Errorf("took %v, want %v", took, tt.want)
			}
		})
	}
}

func TestNewUnreachable(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := redis.New(ctx, redis.Options{URL: urlOf(srv.Addr)})
	if err == nil {
		_ = s.Close()
		t.Fatal("New with Redis down succeeded")
	}
	if !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Errorf("New with Redis down: %v, want ErrStoreUnavailable", err)
	}
}

// TestSlidingLogRepairsLostSum: the running sum of a sliding log lives
// in a second key. If only that key is lost, the log is recounted instead
// of read as empty, and new entries do not collide with old ones.
func TestSlidingLogRepairsLostSum(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	clk := storetest.NewClock(storetest.Epoch)
	prefix := newPrefix(t)
	s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr), KeyPrefix: prefix}, clk.Now))
	mem := memory.New(memory.Options{Now: clk.Now})
	l := mustLimit(t, limits.SlidingLog, 20, limits.UnitSecond, 10, 0)
	c := check("k", l, 1)
	for i := range 8 {
		clk.Advance(time.Second)
		if i == 3 || i == 6 {
			if err := rc.Del(context.Background(), prefix+c.Key+":h").Err(); err != nil {
				t.Fatal(err)
			}
		}
		c.Hits = uint64(1 + i%2)
		want, got := apply(t, mem, c), apply(t, s, c)
		if diff := diffBatch(want, got); diff != "" {
			t.Fatalf("request %d (-memory +redis):\n%s", i, diff)
		}
	}
	n, err := rc.ZCard(context.Background(), prefix+c.Key).Result()
	if err != nil || n != 8 {
		t.Errorf("log holds %d entries (%v), want 8: entries collided", n, err)
	}
}
