package rlqs_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/rlqstest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestLowLoadRedisCommands counts every command Redis runs for three
// sidecars (INFO commandstats: scripts, the commands inside them, PINGs)
// while their Envoys send 200 requests a second in all into a minute's
// limit far above it, reporting every second, over two minutes from the
// middle of a window: a grant per Envoy at its subscription and at each
// window's start, and nothing else: 1.07 commands per 1,000 requests
// over the run, and over one whole window after the subscriptions (its
// start's grants included, the next window's not) 0.71: the cost of a
// stream that has been open a while, at most 1 per 1,000 (0.95 with the
// TIME that a grant runs off the test's clock). It was 3.06
// over the run (27 EVALSHA for 9): a grant taken in the window's last
// second and given back at once (two scripts for nothing), and the grant
// it replaced given back to a window that had ended.
func TestLowLoadRedisCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	const rules = `
domain: rlqs
descriptors:
  - key: route
    value: api
    rate_limit: {unit: minute, requests_per_unit: 10000000, lease: 100000}
`
	o := redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "rlqs:" + t.Name() + ":"}
	clk := storetest.NewClock(storetest.Epoch.Add(30 * time.Second))
	var envoys []*rlqstest.Envoy
	var ms []*rlqstest.Metrics
	for range fleetEnvoys {
		addr, m := startSidecar(t, rules, o, clk)
		envoys = append(envoys, dialEnvoy(t, addr, "rlqs", clk.Now))
		ms = append(ms, m)
	}
	rc := srv.Client(t)
	before := redisCommands(t, rc)
	id := map[string]string{"route": "api"}
	requests := 0
	// One whole window, from just after its start's grants (30 s into
	// the run, pushed 50 ms into the window) to just before the next's.
	var steadyFrom map[string]int64
	var steadyRequests int
	var steadyCalls int64
	for i := range 1200 { // 120 s in steps of 100 ms
		switch i {
		case 301:
			steadyFrom, steadyRequests = redisCommands(t, rc), requests
		case 901:
			steadyCalls, steadyRequests = commandsSince(redisCommands(t, rc), steadyFrom), requests-steadyRequests
		}
		for _, e := range envoys {
			for range 7 {
				if _, err := e.Request(id); err != nil {
					t.Fatal(err)
				}
				requests++
			}
		}
		clk.Advance(100 * time.Millisecond)
		for j, e := range envoys {
			if err := e.Sync(ms[j].Pushes()); err != nil {
				t.Fatal(err)
			}
			if i%10 == 9 {
				if err := e.Report(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	after := redisCommands(t, rc)
	calls := commandsSince(after, before)
	per := 1000 * float64(calls) / float64(requests)
	t.Logf("%d Redis commands for %d requests: %.2f per 1,000 (EVALSHA %d)", calls, requests, per, after["evalsha"]-before["evalsha"])
	if per > 1.5 {
		t.Errorf("%.2f Redis commands per 1,000 requests, want at most 1.5", per)
	}
	steady := 1000 * float64(steadyCalls) / float64(steadyRequests)
	t.Logf("one whole window: %d Redis commands for %d requests: %.2f per 1,000", steadyCalls, steadyRequests, steady)
	if steady > 1 {
		t.Errorf("%.2f Redis commands per 1,000 requests over one whole window, want at most 1", steady)
	}
}

// commandsSince is how many commands Redis ran between the counts before
// and after (redisCommands), the test's own INFO left out.
func commandsSince(after, before map[string]int64) int64 {
	var calls int64
	for name, n := range after {
		if name != "info" {
			calls += n - before[name]
		}
	}
	return calls
}

// redisCommands returns the calls of each command Redis has run, by its
// lower-case name, from INFO commandstats.
func redisCommands(t *testing.T, rc *goredis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	calls, err := redistest.CommandCalls(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}
