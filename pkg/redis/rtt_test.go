package redis_test

import (
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestNoPingsAtLowLoad: a store on a nearby Redis measures the round
// trip from the calls it makes anyway, so a request every 60 ms, more
// than the probe interval apart, costs its EVALSHA and nothing else: no
// PING per request (the store PINGed once per request before), and none
// while idle. A fleet of idle or lightly loaded sidecars so sends Redis
// nothing in the background.
func TestNoPingsAtLowLoad(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitMinute, 1, 0)
	apply(t, s, check("warm", l, 1)) // the first call may PING while connecting
	before := commandCalls(t, rc)
	const n = 30
	tick := time.NewTicker(redis.ProbeEvery + 10*time.Millisecond)
	defer tick.Stop()
	for range n {
		<-tick.C // a low load: each request after the probe interval
		apply(t, s, check("low", l, 1))
	}
	after := commandCalls(t, rc)
	if got := after["evalsha"] - before["evalsha"]; got != n {
		t.Errorf("%d EVALSHA for %d requests, want one each", got, n)
	}
	if d := after["ping"] - before["ping"]; d > 1 {
		t.Errorf("%d PINGs for %d requests on a nearby Redis, want none (the round trips tell the RTT)", d, n)
	}
}
