package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/store"
)

// TestLocalFallbackKeepsKnownOverDenied: with failure mode local, a key
// the sidecar knows to be over its limit (its deny cache holds it) stays
// denied through a Redis outage, while a key it does not know to be over
// is decided by the memory store, which admits at most its local share of
// the limit on top of what Redis counted: the bound the README gives.
func TestLocalFallbackKeepsKnownOverDenied(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := redis.New(ctx, redis.Options{URL: "redis://" + srv.Addr, KeyPrefix: "outage:", Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	breaker := store.NewBreaker(rs, rs.Probe, store.BreakerOptions{Failures: 1})
	defer breaker.Close()
	deny := store.NewDenyCache(breaker, store.DenyCacheOptions{})
	rules, err := config.Parse([]config.File{{Name: "rules.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 6}
`)}}, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const divisor = 2
	e := limits.NewEngine(rules, deny, limits.EngineOptions{
		FailureMode: limits.FailLocal, Local: memory.New(memory.Options{}), LocalDivisor: divisor,
	})
	decide := func(user string, n int) (admitted, fallbacks int) {
		t.Helper()
		for range n {
			var d limits.Decision
			req := &limits.Request{Domain: "edge", Descriptors: []limits.Descriptor{{Entries: []limits.Entry{{Key: "user", Value: user}}}}}
			if err := e.Decide(context.Background(), req, &d); err != nil {
				t.Fatalf("%s: %v", user, err)
			}
			if d.Code == limits.OK {
				admitted++
			}
			if d.StoreErr != nil {
				fallbacks++
			}
		}
		return admitted, fallbacks
	}
	if got, _ := decide("over", 8); got != 6 {
		t.Fatalf("before the outage, user over: %d admitted, want 6", got)
	}
	if got, _ := decide("under", 2); got != 2 {
		t.Fatalf("before the outage, user under: %d admitted, want 2", got)
	}

	srv.Kill()
	got, fellBack := decide("over", 20)
	if got != 0 {
		t.Errorf("during the outage, the user known over: %d of 20 admitted, want 0", got)
	}
	if fellBack != 0 {
		t.Errorf("during the outage, the user known over: %d requests reached the failure mode, want 0 (the deny cache answers)", fellBack)
	}
	got, fellBack = decide("under", 20)
	if want := 6 / divisor; got != want || fellBack != 20 {
		t.Errorf("during the outage, the user not known over: %d of 20 admitted by the failure mode (%d fell back), want %d of 20", got, fellBack, want)
	}
	if !breaker.Open() {
		t.Error("breaker closed during the outage")
	}
}
