package redis_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestOneEvalshaPerRequest counts, with INFO commandstats, what a request
// costs on standalone Redis: exactly one EVALSHA, whatever the number of
// limits, and nothing else.
func TestOneEvalshaPerRequest(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	global := mustLimit(t, limits.FixedWindow, 1000, limits.UnitSecond, 1, 0)
	tenant := mustLimit(t, limits.SlidingWindow, 60, limits.UnitMinute, 1, 0)
	user := mustLimit(t, limits.TokenBucket, 5, limits.UnitHour, 1, 5)
	log := mustLimit(t, limits.SlidingLog, 3, limits.UnitHour, 1, 0)
	before := commandCalls(t, rc)
	start := time.Now()
	const n = 50
	rejected := 0
	for i := range n {
		b := apply(t, s, check("global", global, 1), check("tenant", tenant, 1), check(fmt.Sprint("user", i%3), user, 1), check("log", log, 1))
		if !b.Admitted {
			rejected++
		}
		apply(t, s, check("single", global, 1))
	}
	elapsed := time.Since(start)
	after := commandCalls(t, rc)
	if rejected == 0 {
		t.Fatal("no request was rejected: the test must cover both paths")
	}
	if got := after["evalsha"] - before["evalsha"]; got != 2*n {
		t.Errorf("%d EVALSHA for %d requests, want one each", got, 2*n)
	}
	// Commands that scripts call count too: each run reads Redis's clock
	// once.
	if got := after["time"] - before["time"]; got != 2*n {
		t.Errorf("%d TIME calls in %d script runs, want one each", got, 2*n)
	}
	for _, cmd := range []string{"eval", "script|load", "script|exists"} {
		if d := after[cmd] - before[cmd]; d != 0 {
			t.Errorf("%d calls of %s during the requests, want none", d, cmd)
		}
	}
	// A pipe with traffic measures the RTT with one PING per probe
	// interval, however many requests it carries; a loaded machine can
	// make the loop outlast a few intervals.
	if d, most := after["ping"]-before["ping"], int64(elapsed/redis.ProbeEvery)+1; d > most {
		t.Errorf("%d PINGs in %v of requests, want at most %d (one per %v)", d, elapsed.Round(time.Millisecond), most, redis.ProbeEvery)
	}
}

// TestNoPingsWithoutWaiting: a pipe whose calls never wait for a round
// trip (one call at a time, each more than a probe interval after the
// last, as RLQS grants and light loads are) sends Redis nothing but its
// scripts. It sent a PING after every such call: with a fleet of
// sidecars, Redis's busiest command while it had little else to do.
func TestNoPingsWithoutWaiting(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	l := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	apply(t, s, check("warm", l, 1)) // the store's own start-up PINGs
	// Near, whatever the seed measured on a busy machine: a far pipe
	// measures the RTT with traffic, by design.
	redis.SetNear(s)
	before := commandCalls(t, rc)
	const n = 10
	last := time.Now()
	for range n {
		// Spacing, not waiting for an event: each call must come a probe
		// interval after the previous one, when the old pipe PINGed.
		time.Sleep(redis.ProbeEvery - time.Since(last) + time.Millisecond)
		last = time.Now()
		apply(t, s, check("light", l, 1))
	}
	after := commandCalls(t, rc)
	if got := after["evalsha"] - before["evalsha"]; got != n {
		t.Errorf("%d EVALSHA for %d calls, want one each", got, n)
	}
	if d := after["ping"] - before["ping"]; d != 0 {
		t.Errorf("%d PINGs for %d calls that never waited, want none", d, n)
	}
}

// TestKeyTTLs: every key a request writes expires, no later than its
// algorithm needs it, so memory stays bounded, and no sooner than the
// state it holds is still needed: a key that expired early would let its
// hits count for nothing. The store decides 20 s into a minute by the
// test's clock, so the time the state is needed is known; Redis counts
// the TTL down in real time, so the lower bound allows for the real time
// the test took.
func TestKeyTTLs(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	prefix := newPrefix(t)
	clk := storetest.NewClock(storetest.Epoch.Add(20 * time.Second))
	s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr), KeyPrefix: prefix}, clk.Now))
	tests := []struct {
		give  *limits.Limit
		hits  uint64
		keys  int
		need  time.Duration // until the state is no longer needed
		bound time.Duration
	}{
		// To the end of the window.
		{give: mustLimit(t, limits.FixedWindow, 10, limits.UnitMinute, 1, 0), hits: 3, keys: 1, need: 40 * time.Second, bound: time.Minute},
		// The window's hits weigh in the next window too, to its end.
		{give: mustLimit(t, limits.SlidingWindow, 10, limits.UnitMinute, 1, 0), hits: 3, keys: 1, need: 100 * time.Second, bound: 2 * time.Minute},
		// A window after the newest entry, for the log and its sidecar.
		{give: mustLimit(t, limits.SlidingLog, 10, limits.UnitMinute, 1, 0), hits: 3, keys: 2, need: time.Minute, bound: time.Minute},
		// 3 hits at 10 per minute refill in 18 s; a bucket's key lives on
		// as long again.
		{give: mustLimit(t, limits.TokenBucket, 10, limits.UnitMinute, 1, 0), hits: 3, keys: 1, need: 18 * time.Second, bound: 36 * time.Second},
		{give: mustLimit(t, limits.LeakyBucket, 10, limits.UnitMinute, 1, 20), hits: 3, keys: 1, need: 18 * time.Second, bound: 36 * time.Second},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.give.Algorithm.String(), func(t *testing.T) {
			c := check(tt.give.Algorithm.String(), tt.give, tt.hits)
			written := time.Now()
			apply(t, s, c)
			// A rejected request writes nothing: no key, no TTL change.
			apply(t, s, c, check(tt.give.Algorithm.String()+"/banned", mustLimit(t, limits.FixedWindow, 0, limits.UnitMinute, 1, 0), 1))
			keys, err := rc.Keys(ctx, prefix+c.Key+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != tt.keys {
				t.Fatalf("keys %q, want %d", keys, tt.keys)
			}
			for _, k := range keys {
				ttl, err := rc.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= 0 || ttl > tt.bound {
					t.Errorf("key %q has TTL %v, want in (0, %v]", k, ttl, tt.bound)
				}
				// PTTL counts whole ms down from a TTL rounded up to them.
				if least := tt.need - time.Since(written) - time.Millisecond; ttl < least {
					t.Errorf("key %q has TTL %v, want at least %v: its state is needed for %v", k, ttl, least, tt.need)
				}
			}
		})
	}
	// Nothing under the prefix lives forever.
	iter := rc.Scan(ctx, 0, prefix+"*", 100).Iterator()
	n := 0
	for iter.Next(ctx) {
		n++
		if ttl := rc.PTTL(ctx, iter.Val()).Val(); ttl <= 0 {
			t.Errorf("key %q has no TTL (%v)", iter.Val(), ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Errorf("%d keys under the prefix, want 6", n)
	}
}

// TestRejectedRequestWritesNothing: a request that is rejected, whether
// by another check or by its own, and a check that takes no hits, leave
// every key as it was: no key appears, each keeps its value byte for
// byte, and none gets a later expiry. The test first shortens each key's
// TTL, so that a script that set an expiry again would show.
func TestRejectedRequestWritesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	prefix := newPrefix(t)
	clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr), KeyPrefix: prefix}, clk.Now))
	ban := mustLimit(t, limits.FixedWindow, 0, limits.UnitMinute, 1, 0)
	ctx := context.Background()
	for _, l := range []*limits.Limit{
		mustLimit(t, limits.FixedWindow, 10, limits.UnitMinute, 1, 0),
		mustLimit(t, limits.SlidingWindow, 10, limits.UnitMinute, 1, 0),
		mustLimit(t, limits.SlidingLog, 10, limits.UnitMinute, 1, 0),
		mustLimit(t, limits.TokenBucket, 10, limits.UnitMinute, 1, 0),
		mustLimit(t, limits.LeakyBucket, 10, limits.UnitMinute, 1, 0),
	} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			name := l.Algorithm.String()
			c := check(name, l, 3)
			if b := apply(t, s, c); !b.Admitted {
				t.Fatalf("the first request was rejected: %+v", b.Outcomes)
			}
			keys, err := rc.Keys(ctx, prefix+c.Key+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if err := rc.PExpire(ctx, k, 5*time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			hits := func(n uint64) limits.Check {
				c := c
				c.Hits = n
				return c
			}
			banned := check(name+"/banned", ban, 1)
			tests := []struct {
				name         string
				give         []limits.Check
				wantAdmitted bool
			}{
				{name: "another_check_rejects", give: []limits.Check{hits(1), banned}},
				{name: "over_its_own_limit", give: []limits.Check{hits(8)}},
				{name: "a_later_check_on_the_key_is_over", give: []limits.Check{hits(1), hits(7)}},
				{name: "zero_hits", give: []limits.Check{hits(0)}, wantAdmitted: true},
			}
			for _, tt := range tests {
				dumps, ttls := map[string]string{}, map[string]time.Duration{}
				for _, k := range keys {
					dumps[k] = rc.Dump(ctx, k).Val()
					ttls[k] = rc.PTTL(ctx, k).Val()
				}
				if b := apply(t, s, tt.give...); b.Admitted != tt.wantAdmitted {
					t.Fatalf("%s: admitted %v, want %v", tt.name, b.Admitted, tt.wantAdmitted)
				}
				after, err := rc.Keys(ctx, prefix+c.Key+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(after)
				if !slices.Equal(after, keys) {
					t.Errorf("%s: keys %q, want %q", tt.name, after, keys)
				}
				if n := rc.Exists(ctx, prefix+banned.Key).Val(); n != 0 {
					t.Errorf("%s: the banned check's key was written", tt.name)
				}
				for _, k := range keys {
					if d := rc.Dump(ctx, k).Val(); d != dumps[k] {
						t.Errorf("%s: key %q changed: %q, was %q", tt.name, k, d, dumps[k])
					}
					if ttl := rc.PTTL(ctx, k).Val(); ttl <= 0 || ttl > ttls[k] {
						t.Errorf("%s: key %q has TTL %v, was %v", tt.name, k, ttl, ttls[k])
					}
				}
			}
		})
	}
}

// TestMemoryPerKey logs MEMORY USAGE of the state of one key per
// algorithm, for the README, and keeps it from growing unnoticed.
func TestMemoryPerKey(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	prefix := newPrefix(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr), KeyPrefix: prefix})
	tests := []struct {
		name  string
		give  *limits.Limit
		reqs  int
		bound int64
	}{
		{name: "fixed_window", give: mustLimit(t, limits.FixedWindow, 1000, limits.UnitMinute, 1, 0), reqs: 1, bound: 1024},
		{name: "sliding_window", give: mustLimit(t, limits.SlidingWindow, 1000, limits.UnitMinute, 1, 0), reqs: 1, bound: 1024},
		{name: "sliding_log_1", give: mustLimit(t, limits.SlidingLog, 1000, limits.UnitMinute, 1, 0), reqs: 1, bound: 1024},
		{name: "sliding_log_100", give: mustLimit(t, limits.SlidingLog, 1000, limits.UnitMinute, 1, 0), reqs: 100, bound: 16 << 10},
		{name: "sliding_log_1000", give: mustLimit(t, limits.SlidingLog, 1000, limits.UnitMinute, 1, 0), reqs: 1000, bound: 160 << 10},
		{name: "token_bucket", give: mustLimit(t, limits.TokenBucket, 1000, limits.UnitMinute, 1, 0), reqs: 1, bound: 1024},
		{name: "leaky_bucket", give: mustLimit(t, limits.LeakyBucket, 1000, limits.UnitMinute, 1, 0), reqs: 1, bound: 1024},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A realistic key: domain, two descriptor entries.
			key, _ := limits.AppendKey(nil, "edge", []limits.Entry{{Key: "tenant", Value: "acme-" + tt.name}, {Key: "user", Value: "user-4711"}}, tt.give)
			c := limits.Check{Key: string(key), Limit: tt.give, Hits: 1}
			for range tt.reqs {
				apply(t, s, c)
			}
			keys, err := rc.Keys(ctx, prefix+c.Key+"*").Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys %q, %v", keys, err)
			}
			var total int64
			for _, k := range keys {
				n, err := rc.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
			t.Logf("MEMORY USAGE %s: %d bytes in %d key(s) of %d bytes (%s)", tt.name, total, len(keys), len(keys[0]), encodings(t, rc, keys))
			if total <= 0 || total > tt.bound {
				t.Errorf("%d bytes, want in (0, %d]", total, tt.bound)
			}
		})
	}
}

// encodings returns the OBJECT ENCODING of keys.
func encodings(t *testing.T, rc *goredis.Client, keys []string) string {
	var out string
	for i, k := range keys {
		enc, err := rc.ObjectEncoding(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			out += ", "
		}
		out += enc
	}
	return out
}

// TestEarlierLayout: the keys an earlier version left, a hash per key
// and a sliding log's sidecar hash, fail no request. Redis reads them as
// fresh keys (each counter starts again once) and the first admitted
// request overwrites them; a sliding log, whose entries kept their
// format, is recounted and goes on past their sequence numbers.
func TestEarlierLayout(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	clk := storetest.NewClock(storetest.Epoch.Add(10 * time.Second))
	s := newStore(t, clocked(redis.Options{URL: urlOf(srv.Addr)}, clk.Now))
	ctx := context.Background()
	now := clk.Now().UnixMicro()
	const minute = int64(60_000_000)
	tests := []struct {
		give *limits.Limit
		old  []any // the earlier version's hash: all used up
		want uint64
	}{
		{give: mustLimit(t, limits.FixedWindow, 10, limits.UnitMinute, 1, 0), old: []any{"s", now - now%minute, "c", 10}, want: 9},
		{give: mustLimit(t, limits.SlidingWindow, 10, limits.UnitMinute, 1, 0), old: []any{"s", now - now%minute, "c", 10, "p", 10}, want: 9},
		{give: mustLimit(t, limits.TokenBucket, 10, limits.UnitMinute, 1, 10), old: []any{"s", now, "c", 0, "e", now + minute}, want: 9},
		{give: mustLimit(t, limits.LeakyBucket, 10, limits.UnitMinute, 1, 10), old: []any{"s", now, "c", 10 * minute, "e", now + minute}, want: 9},
	}
	for _, tt := range tests {
		t.Run(tt.give.Algorithm.String(), func(t *testing.T) {
			c := check(tt.give.Algorithm.String(), tt.give, 1)
			key := redis.FullKey(s, c)
			if err := rc.HSet(ctx, key, tt.old...).Err(); err != nil {
				t.Fatal(err)
			}
			rc.PExpire(ctx, key, time.Minute)
			for i, want := range []uint64{tt.want, tt.want - 1} {
				b := apply(t, s, c)
				if !b.Admitted || b.Outcomes[0].Remaining != want {
					t.Fatalf("request %d: admitted %v, %+v; want admitted with %d remaining", i, b.Admitted, b.Outcomes[0], want)
				}
			}
			if typ := rc.Type(ctx, key).Val(); typ != "string" {
				t.Errorf("key is a %s after a request, want a string", typ)
			}
		})
	}
	t.Run("sliding_log", func(t *testing.T) {
		c := check("log", mustLimit(t, limits.SlidingLog, 10, limits.UnitMinute, 1, 0), 1)
		key := redis.FullKey(s, c)
		// Three hits a second ago, one of them long gone, and the
		// earlier version's sidecar hash.
		rc.ZAdd(ctx, key, goredis.Z{Score: float64(now - 1_000_000), Member: "7:3"}, goredis.Z{Score: float64(now - 2*minute), Member: "6:1"})
		rc.HSet(ctx, key+":h", "h", 4, "n", 7)
		rc.PExpire(ctx, key, time.Minute)
		rc.PExpire(ctx, key+":h", time.Minute)
		for i, want := range []uint64{6, 5} {
			b := apply(t, s, c)
			if !b.Admitted || b.Outcomes[0].Remaining != want {
				t.Fatalf("request %d: admitted %v, %+v; want admitted with %d remaining", i, b.Admitted, b.Outcomes[0], want)
			}
		}
		members, err := rc.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"7:3", "8:1", "9:1"}; !slices.Equal(members, want) {
			t.Errorf("log %q, want %q", members, want)
		}
		if typ := rc.Type(ctx, key+":h").Val(); typ != "string" {
			t.Errorf("sidecar is a %s after a request, want a string", typ)
		}
	})
}

// TestKeyTTLKept: a fixed or sliding window written again in the window
// it holds keeps the expiry its first write set (the script overwrites
// the value in place), so the key still expires with its window and never
// loses its TTL. So does a busy bucket: its key lives twice as long as
// the bucket takes to be full again, so the next hits, which keep it full
// again before that, keep the expiry too.
func TestKeyTTLKept(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := srv.Client(t)
	s := newStore(t, redis.Options{URL: urlOf(srv.Addr)})
	ctx := context.Background()
	tests := []struct {
		give  *limits.Limit
		first uint64 // hits of the first request; the others take 1
		bound time.Duration
	}{
		{give: mustLimit(t, limits.FixedWindow, 100, limits.UnitHour, 1, 0), first: 1, bound: time.Hour},
		{give: mustLimit(t, limits.SlidingWindow, 100, limits.UnitHour, 1, 0), first: 1, bound: 2 * time.Hour},
		// At 100 per 10 minutes, 10 hits refill in 60 s, so the key lives
		// 120 s (as long again, at most a minute more); after the next two
		// hits the bucket is full again in 66 s and 72 s.
		{give: mustLimit(t, limits.TokenBucket, 100, limits.UnitMinute, 10, 0), first: 10, bound: 2 * time.Minute},
		{give: mustLimit(t, limits.LeakyBucket, 100, limits.UnitMinute, 10, 0), first: 10, bound: 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.give.Algorithm.String(), func(t *testing.T) {
			c := check(tt.give.Algorithm.String(), tt.give, tt.first)
			key := redis.FullKey(s, c)
			var first time.Duration
			for i := range 3 {
				b := apply(t, s, c)
				c.Hits = 1
				if want := 100 - tt.first - uint64(i); !b.Admitted || b.Outcomes[0].Remaining != want {
					t.Fatalf("request %d: admitted %v, %+v; want admitted with %d remaining", i, b.Admitted, b.Outcomes[0], want)
				}
				ttl, err := rc.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= 0 || ttl > tt.bound {
					t.Fatalf("request %d: TTL %v, want in (0, %v]", i, ttl, tt.bound)
				}
				if i == 0 {
					first = ttl
				} else if ttl > first {
					t.Errorf("request %d: TTL %v grew past the first write's %v", i, ttl, first)
				}
			}
		})
	}
}
