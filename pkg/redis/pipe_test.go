package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestPipeline covers the batching of concurrent requests into pipelines
// (Options.MaxInflight) on a standalone Redis.
func TestPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	t.Run("batches", func(t *testing.T) { testPipelineBatches(t, srv.Addr, rc) })
	t.Run("script_flush", func(t *testing.T) { testPipelineScriptFlush(t, srv.Addr, rc) })
	t.Run("deadline", func(t *testing.T) { testPipelineDeadline(t, srv.Addr, rc) })
	t.Run("store_timeout", func(t *testing.T) { testPipelineStoreTimeout(t, srv.Addr, rc) })
}

// testPipelineBatches runs 400 goroutines of three-tier requests, more
// than one pipeline takes. With one round trip in flight at a time, the
// store must batch them, in pipelines of at most 128, over at most two
// connections, and still decide each request exactly, with one EVALSHA
// each. Without batching, the same load opens many connections.
func testPipelineBatches(t *testing.T, addr string, rc goredis.UniversalClient) {
	for _, tt := range []struct {
		inflight  int
		wantConns func(int64) bool
		want      string
		batched   bool
	}{
		// go-redis keeps pipelines in a pool of their own: one
		// connection there, and one for the calls that go alone.
		{inflight: 1, wantConns: func(n int64) bool { return n <= 2 }, want: "at most 2", batched: true},
		{inflight: 512, wantConns: func(n int64) bool { return n > 2 }, want: "more than 2"},
	} {
		t.Run(fmt.Sprint("inflight", tt.inflight), func(t *testing.T) {
			connsBefore := connectionsReceived(t, rc)
			s := newStore(t, redis.Options{URL: urlOf(addr), MaxInflight: tt.inflight, Timeout: 5 * time.Second})
			var pipelines pipelineSizes
			redis.AddHook(s, &pipelines)
			global := mustLimit(t, limits.FixedWindow, 100000, limits.UnitHour, 1, 0)
			tenant := mustLimit(t, limits.SlidingWindow, 300, limits.UnitHour, 1, 0)
			user := mustLimit(t, limits.TokenBucket, 40, limits.UnitHour, 1, 0)
			callsBefore := commandCalls(t, rc)
			const goroutines, each = 400, 5
			admitted := applyConcurrently(t, s, goroutines, each, func(g, i int) []limits.Check {
				return []limits.Check{check("global", global, 1), check("tenant", tenant, 1), check(fmt.Sprint("user", (g+i)%10), user, 1)}
			})
			// 10 users × 40 = 400 > 300: the tenant tier decides.
			if admitted != 300 {
				t.Errorf("admitted %d, want exactly the tenant limit 300", admitted)
			}
			b := apply(t, s, check("global", global, 0))
			if got, want := b.Outcomes[0].Remaining, uint64(100000-admitted); got != want {
				t.Errorf("global remaining %d, want %d", got, want)
			}
			callsAfter := commandCalls(t, rc)
			evalsha := callsAfter["evalsha"] - callsBefore["evalsha"]
			calls, requests, most := pipelines.calls()
			t.Logf("%d pipelines; %d EVALSHA for %d requests, at most %d in one", len(pipelines.sizes), evalsha, requests, most)
			if calls != int(evalsha) {
				t.Errorf("the hook saw %d apply.lua calls, Redis %d EVALSHA", calls, evalsha)
			}
			if requests != goroutines*each+1 {
				t.Errorf("apply.lua calls decided %d requests, want %d: each exactly once", requests, goroutines*each+1)
			}
			// Requests that wait together share one script call, and so
			// on standalone Redis one pipeline each.
			if tt.batched && (most < 2 || most > 128 || pipelines.largest() != 1) {
				t.Errorf("at most %d requests in one apply.lua call and %d calls in one pipeline, want 2 to 128 and 1", most, pipelines.largest())
			}
			if !tt.batched && (most != 1 || len(pipelines.sizes) > 0) {
				t.Errorf("%d pipelines and up to %d requests per call with %d in flight allowed, want none and 1", len(pipelines.sizes), most, tt.inflight)
			}
			got := connectionsReceived(t, rc) - connsBefore
			t.Logf("%d connections", got)
			if !tt.wantConns(got) {
				t.Errorf("the store opened %d connections, want %s", got, tt.want)
			}
		})
	}
}

// testPipelineScriptFlush flushes the script cache twice while 16
// goroutines make requests that queue for pipelines: the NOSCRIPT that a
// pipeline gets back must be recovered, with no failed request.
func testPipelineScriptFlush(t *testing.T, addr string, rc goredis.UniversalClient) {
	s := newStore(t, redis.Options{URL: urlOf(addr), MaxInflight: 1, Timeout: 5 * time.Second})
	l := mustLimit(t, limits.FixedWindow, 1000000, limits.UnitHour, 1, 0)
	before := commandCalls(t, rc)
	const goroutines, each = 16, 50
	var done atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				b := &limits.Batch{Checks: []limits.Check{check(fmt.Sprint("flush", g), l, 1), check("flush", l, 1)}}
				if err := s.Apply(context.Background(), b); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if !b.Admitted {
					t.Error("not admitted")
					return
				}
				done.Add(1)
			}
		})
	}
	for _, at := range []int64{goroutines * each / 4, goroutines * each / 2} {
		for done.Load() < at && !t.Failed() {
			time.Sleep(time.Millisecond)
		}
		if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	b := apply(t, s, check("flush", l, 0))
	if got, want := b.Outcomes[0].Remaining, uint64(1000000-goroutines*each); got != want {
		t.Errorf("remaining %d, want %d: a request was lost or counted twice", got, want)
	}
	after := commandCalls(t, rc)
	if after["eval"]+after["script|load"] == before["eval"]+before["script|load"] {
		t.Error("no EVAL or SCRIPT LOAD: the script cache was never found flushed")
	}
}

// testPipelineDeadline holds Redis with CLIENT PAUSE. One request, with a
// 100 ms deadline, takes the only round trip allowed; four more, with
// deadlines of 1 to 4 s, queue and go together in a pipeline bounded by
// the latest. Every one must fail with ErrStoreUnavailable at its own
// deadline: neither later (a queued call waiting for the pipeline) nor
// earlier (a pipeline bounded by an earlier deadline). The deadlines are
// a second apart so that the slack a busy machine needs (half a second)
// still tells them apart.
func testPipelineDeadline(t *testing.T, addr string, rc goredis.UniversalClient) {
	s := newStore(t, redis.Options{URL: urlOf(addr), MaxInflight: 1, Timeout: 5 * time.Second})
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	apply(t, s, check("deadline", l, 1)) // connect first
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", 6000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
	const slack = 500 * time.Millisecond
	var wg sync.WaitGroup
	run := func(deadline time.Duration) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := s.Apply(ctx, &limits.Batch{Checks: []limits.Check{check("deadline", l, 1)}})
			took := time.Since(start)
			if !errors.Is(err, limits.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v deadline: err = %v, want ErrStoreUnavailable and DeadlineExceeded", deadline, err)
			}
			if took < deadline-10*time.Millisecond || took > deadline+slack {
				t.Errorf("took %v with a %v deadline", took, deadline)
			}
		})
	}
	run(100 * time.Millisecond)
	for redis.Inflight(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, d := range []time.Duration{1, 2, 3, 4} {
		run(d * time.Second)
	}
	wg.Wait()
}

// testPipelineStoreTimeout is testPipelineDeadline with requests whose
// contexts have no deadline, so Options.Timeout alone bounds them: the
// store bounds a request without a timer of its own, so a queued request
// must still end at its own start plus the timeout, not at the end of
// the pipeline it waits for, which the last request's timeout bounds.
func testPipelineStoreTimeout(t *testing.T, addr string, rc goredis.UniversalClient) {
	// Requests start 600 ms apart, so a queued one that waited for the
	// pipeline would end 600 ms or more past its own timeout: more than
	// the slack a busy machine needs.
	const timeout = time.Second
	s := newStore(t, redis.Options{URL: urlOf(addr), MaxInflight: 1, Timeout: timeout})
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	apply(t, s, check("store_timeout", l, 1)) // connect first
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", 6000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Do(context.Background(), "CLIENT", "UNPAUSE").Err() })
	const slack = 400 * time.Millisecond
	var wg sync.WaitGroup
	run := func() {
		wg.Go(func() {
			start := time.Now()
			err := s.Apply(context.Background(), &limits.Batch{Checks: []limits.Check{check("store_timeout", l, 1)}})
			took := time.Since(start)
			// The store's own timeout, not the caller's deadline.
			if !errors.Is(err, limits.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want ErrStoreUnavailable and not DeadlineExceeded", err)
			}
			if took < timeout-10*time.Millisecond || took > timeout+slack {
				t.Errorf("took %v with a %v timeout", took, timeout)
			}
		})
	}
	run()
	for redis.Inflight(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		run()
		time.Sleep(600 * time.Millisecond)
	}
	wg.Wait()
}

// pipelineSizes is a go-redis hook that records the length of every
// pipeline of scripts sent, and how many requests each apply.lua call
// decides (its ARGV past now and mode), sent alone or in a pipeline.
type pipelineSizes struct {
	mu       sync.Mutex
	sizes    []int
	requests []int
}

func (h *pipelineSizes) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *pipelineSizes) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.count(cmd)
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *pipelineSizes) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.mu.Lock()
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" { // not a connection's handshake
			h.sizes = append(h.sizes, len(cmds))
		}
		for _, cmd := range cmds {
			h.count(cmd)
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// count records the requests of cmd if it is an apply.lua call: an
// EVALSHA or EVAL whose mode, after the keys and now, is "0" to "3"
// (refund.lua's second argument is its checks).
func (h *pipelineSizes) count(cmd goredis.Cmder) {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 3 {
		return
	}
	keys, ok := args[2].(int)
	if !ok || len(args) < 3+keys+3 {
		return
	}
	mode := args[3+keys+1]
	if p, ok := mode.(*string); ok {
		mode = *p
	}
	switch m, _ := mode.(string); m {
	case "0", "1", "2":
		h.requests = append(h.requests, len(args)-3-keys-2)
	case "3": // MODE_FAST: the keys' records and their order come first
		h.requests = append(h.requests, len(args)-3-keys-4)
	}
}

func (h *pipelineSizes) largest() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sizes {
		n = max(n, s)
	}
	return n
}

// calls returns how many apply.lua calls were sent, how many requests
// they decided, and the most one decided.
func (h *pipelineSizes) calls() (calls, requests, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.requests {
		requests += n
		most = max(most, n)
	}
	return len(h.requests), requests, most
}

// applyConcurrently makes goroutines × each requests at once, the checks
// of request i of goroutine g being checks(g, i), and returns how many
// were admitted. An error fails t.
func applyConcurrently(t *testing.T, s limits.Store, goroutines, each int, checks func(g, i int) []limits.Check) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				b := &limits.Batch{Checks: checks(g, i)}
				if err := s.Apply(context.Background(), b); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if b.Admitted {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// connectionsReceived returns INFO stats total_connections_received.
func connectionsReceived(t *testing.T, rc goredis.UniversalClient) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO stats %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_connections_received")
	return 0
}
