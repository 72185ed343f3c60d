package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestBreakerFloodOfShortDeadlines: callers whose deadlines expire in the
// middle of their Redis calls, thousands of them, cannot open the breaker
// in front of a healthy Redis, and a caller that waits meanwhile is
// decided exactly: its limit of 100 admits 100 of its 120 requests, with
// no error. Before the breaker ignored callers that gave up, the flood
// opened it and the waiting caller got ErrBreakerOpen.
func TestBreakerFloodOfShortDeadlines(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := storetest.NewClock(storetest.Epoch)
	// The store's own timeout is far above what a busy machine makes a
	// call take: the waiting caller's requests must be decided, and one
	// that timed out (a 100 ms timeout did, under make test) may or may
	// not have counted. The flood's calls end by their callers' deadlines.
	rs, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "flood:", Timeout: 5 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var opened atomic.Int64
	b := store.NewBreaker(rs, rs.Probe, store.BreakerOptions{
		OnChange: func(open bool, _ error) {
			if open {
				opened.Add(1)
			}
		},
	})
	defer b.Close()
	l, _ := limits.NewLimit(limits.FixedWindow, 100, limits.UnitHour, 1, 0)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var flooded, expired atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// 20 µs to 1 ms: most expire on the way to Redis or back.
				cctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+r.IntN(980))*time.Microsecond)
				err := b.Apply(cctx, &limits.Batch{Checks: []limits.Check{{Key: "{f" + strconv.Itoa(r.IntN(1000)) + "}", Limit: l, Hits: 1}}})
				cancel()
				flooded.Add(1)
				if errors.Is(err, limits.ErrStoreUnavailable) {
					expired.Add(1)
				}
			}
		})
	}

	admitted, over := 0, 0
	for i := range 120 {
		batch := &limits.Batch{Checks: []limits.Check{{Key: "{exact}", Limit: l, Hits: 1}}}
		if err := b.Apply(context.Background(), batch); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("request %d of the waiting caller: %v (breaker opened %d times)", i, err, opened.Load())
		}
		if batch.Admitted {
			admitted++
		} else {
			over++
		}
		time.Sleep(5 * time.Millisecond) // spread over the flood
	}
	close(stop)
	wg.Wait()
	t.Logf("%d flood calls, %d failed with their callers' deadlines", flooded.Load(), expired.Load())
	if expired.Load() < 5 {
		t.Fatalf("only %d flood calls failed: the flood did not test the breaker", expired.Load())
	}
	if n := opened.Load(); n != 0 {
		t.Errorf("the breaker opened %d times in front of a healthy Redis", n)
	}
	if admitted != 100 || over != 20 {
		t.Errorf("waiting caller: %d admitted, %d over; want 100 and 20", admitted, over)
	}
}
