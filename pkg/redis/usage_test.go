package redis_test

import (
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestUsageAfterOrdinaryInARejectedRequest: in a rejected request, an
// ordinary check and then a usage charge on one key leave the key
// charged with the usage hits alone. apply.lua's pass 2 charges a usage
// check from the state before the request's ordinary hits, which pass 1
// added on the same key and which a rejected request does not consume.
// (storetest's shared case puts the charge first: a Cluster reports the
// ordinary check otherwise.)
func TestUsageAfterOrdinaryInARejectedRequest(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
			var burst uint64
			if alg.Bucketed() {
				burst = 10
			}
			l := mustLimit(t, alg, 10, limits.UnitSecond, 1, burst)
			one := mustLimit(t, limits.FixedWindow, 1, limits.UnitMinute, 1, 0)
			k, a := storetest.Key(t.Name(), "k", l), storetest.Key(t.Name(), "a", one)
			if b := apply(t, s, limits.Check{Key: a, Limit: one, Hits: 1}); !b.Admitted {
				t.Fatal("first request rejected")
			}
			b := apply(t, s,
				limits.Check{Key: k, Limit: l, Hits: 2},
				limits.Check{Key: k, Limit: l, Hits: 3, Usage: true},
				limits.Check{Key: a, Limit: one, Hits: 1})
			if b.Admitted {
				t.Fatal("a request over its fixed window of 1 was admitted")
			}
			if got := b.Outcomes[1]; got.Over || got.Remaining != 7 {
				t.Errorf("the charge of 3 after 2 ordinary hits: %+v; want 7 left: the ordinary hits count for nothing in a rejected request", got)
			}
			if got := b.Outcomes[0]; got.Over || got.Remaining != 10 {
				t.Errorf("the ordinary check: %+v; want 10 left, the state it started from", got)
			}
			if got := apply(t, s, limits.Check{Key: k, Limit: l}).Outcomes[0]; got.Over || got.Remaining != 7 {
				t.Errorf("after the request: %+v; want 7 left: the charge of 3 alone", got)
			}
		})
	}
}
