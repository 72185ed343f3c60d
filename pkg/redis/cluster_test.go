package redis_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

// TestCluster runs everything that needs a Redis Cluster against one
// three-master cluster, which takes seconds to form. Every subtest has its
// own key prefix.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	opts := redis.Options{ClusterAddrs: c.Addrs}

	t.Run("cases", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T, clk *storetest.Clock) limits.Store {
			return newStore(t, clocked(opts, clk.Now))
		})
	})
	t.Run("grants", func(t *testing.T) {
		storetest.RunGrants(t, func(t *testing.T, clk *storetest.Clock) limits.Store {
			return newStore(t, clocked(opts, clk.Now))
		})
	})
	t.Run("overrides", func(t *testing.T) {
		storetest.RunOverrideAlgorithms(t, func(t *testing.T, clk *storetest.Clock) limits.Store {
			return newStore(t, clocked(opts, clk.Now))
		})
	})
	t.Run("exact", func(t *testing.T) {
		storetest.RunExact(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
			return sharedStores(t, opts, 3, clk)
		}, 3*64, 3)
	})
	t.Run("tiers", func(t *testing.T) {
		storetest.RunTiersSettling(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
			return sharedStores(t, opts, 3, clk)
		}, 3*64)
	})
	t.Run("in_flight", func(t *testing.T) {
		storetest.RunInFlight(t, func(t *testing.T, clk *storetest.Clock) []limits.Store {
			return sharedStores(t, opts, 3, clk)
		}, 64, 10)
	})
	t.Run("slot", func(t *testing.T) { testSlot(t, c) })
	t.Run("cross_slot_refund", func(t *testing.T) { testCrossSlotRefund(t, opts) })
	t.Run("report_fails", func(t *testing.T) { testReportFails(t, opts) })
	t.Run("tiers_real_clock", func(t *testing.T) { testTiersRealClock(t, opts) })
	t.Run("differential", func(t *testing.T) { testDifferential(t, opts, false) })
	t.Run("differential_together", func(t *testing.T) { testDifferential(t, opts, true) })
	t.Run("round_trips", func(t *testing.T) { testClusterRoundTrips(t, opts, c.Client(t)) })
	t.Run("tenant_tiers_share_a_slot", func(t *testing.T) { testTenantTiers(t, opts, c.Client(t)) })
	t.Run("under_admission", func(t *testing.T) { testUnderAdmission(t, opts) })
	t.Run("pipeline", func(t *testing.T) { testClusterPipeline(t, opts) })
	t.Run("redirect", func(t *testing.T) { testRedirect(t, opts, c.Client(t)) })
	t.Run("migration", func(t *testing.T) { testMigration(t, opts, c.Client(t)) })
	t.Run("migration_split", func(t *testing.T) { testMigrationSplit(t, opts, c.Client(t)) })
	t.Run("script_flush", func(t *testing.T) {
		cc := c.Client(t)
		testScriptFlush(t, opts, func() {
			err := cc.ForEachShard(context.Background(), func(ctx context.Context, n *goredis.Client) error {
				return n.ScriptFlush(ctx).Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}

// testSlot checks the store's slot function against CLUSTER KEYSLOT,
// through the grouping it drives: keys in one group must share a slot.
func testSlot(t *testing.T, c *redistest.Cluster) {
	cc := c.Client(t)
	ctx := context.Background()
	keys := []string{
		"", "a", "{a}", "{a}b", "x{a}y", "{}", "{}a", "a{}b{c}", "{{a}}", "{a}}", "a{b", "a}b{c}",
		"rls:{6:domain3:key5:value}18:sliding_window/60", "ключ{значение}", "\x00{\xff}",
	}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("rls:{%d:user%d}x", i, i*7919))
	}
	for _, k := range keys {
		want, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if got := redis.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, want %d (CLUSTER KEYSLOT)", k, got, want)
		}
		// Split anywhere before the first brace, as a prefix would be.
		for i := 0; i <= len(k) && !strings.ContainsRune(k[:i], '{'); i++ {
			if got := redis.SlotWithPrefix(k[:i], k[i:]); int64(got) != want {
				t.Errorf("SlotWithPrefix(%q, %q) = %d, want %d (CLUSTER KEYSLOT)", k[:i], k[i:], got, want)
			}
		}
	}
}

// testCrossSlotRefund: a request that one slot group rejects leaves the
// limits in the other groups exactly as they were, whatever their
// algorithm, and reports what the memory store reports.
func testCrossSlotRefund(t *testing.T, opts redis.Options) {
	clk := storetest.NewClock(storetest.Epoch.Add(1234567 * time.Microsecond))
	s := newStore(t, clocked(opts, clk.Now))
	mem := memory.New(memory.Options{Now: clk.Now})
	ban := mustLimit(t, limits.FixedWindow, 0, limits.UnitMinute, 1, 0)
	others := map[string]*limits.Limit{}
	for _, alg := range limits.Algorithms {
		others[alg.String()] = mustLimit(t, alg, 10, limits.UnitMinute, 1, 0)
	}
	// A calendar month: refund.lua finds its window from the record's
	// edges (calendar.go).
	cal, err := limits.NewCalendarLimit(10, limits.UnitMonth, &limits.Calendar{Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	others["calendar_month"] = cal
	for _, name := range slices.Sorted(maps.Keys(others)) {
		other := others[name]
		t.Run(name, func(t *testing.T) {
			user := check(name+"/user", ban, 1)
			tenant := check(name+"/tenant", other, 2)
			global := check(name+"/global", other, 1)
			for _, c := range []limits.Check{tenant, global} {
				if redis.Slot(c.Key) == redis.Slot(user.Key) {
					t.Fatalf("keys %q and %q share a slot: the test needs two", c.Key, user.Key)
				}
			}
			both := func(checks ...limits.Check) *limits.Batch {
				t.Helper()
				b := apply(t, s, checks...)
				want := apply(t, mem, checks...)
				if diff := diffBatch(want, b); diff != "" {
					t.Errorf("batch differs from the memory store's (-memory +redis):\n%s", diff)
				}
				return b
			}
			// Some history first, so refunds act on state, not on fresh keys.
			both(tenant, global)
			clk.Advance(10 * time.Millisecond)
			before := both(probe(tenant), probe(global)).Outcomes

			if b := both(tenant, user, global, tenant); b.Admitted {
				t.Fatal("request with a banned user was admitted")
			}
			after := both(probe(tenant), probe(global)).Outcomes
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("state changed by a rejected request (-before +after):\n%s", diff)
			}
		})
	}
}

// probe returns c with zero hits: it reports without consuming.
func probe(c limits.Check) limits.Check {
	c.Hits = 0
	return c
}

// testTiersRealClock runs the three tiers on Redis's clock from several
// stores, and checks that no tier over-admits and that rejected requests
// refund the tiers they reserved: the global tier counts exactly the
// admitted requests.
func testTiersRealClock(t *testing.T, opts redis.Options) {
	opts.KeyPrefix = newPrefix(t)
	var stores []*redis.Store
	for range 3 {
		stores = append(stores, newStore(t, opts))
	}
	// A minute-long global window that cannot turn over during the test.
	global := mustLimit(t, limits.FixedWindow, 100000, limits.UnitYear, 1, 0)
	tenant := mustLimit(t, limits.SlidingLog, 60, limits.UnitHour, 1, 0)
	user := mustLimit(t, limits.TokenBucket, 5, limits.UnitHour, 1, 5)
	var (
		mu       sync.Mutex
		admitted int
		perUser  = map[int]int{}
		wg       sync.WaitGroup
	)
	for g := range 48 {
		s := stores[g%len(stores)]
		wg.Go(func() {
			for i := range 10 {
				u := (g*10 + i) % 20
				b := &limits.Batch{Checks: []limits.Check{
					check("global", global, 1), check("tenant", tenant, 1), check(fmt.Sprint("user", u), user, 1),
				}}
				if err := s.Apply(context.Background(), b); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if b.Admitted {
					mu.Lock()
					admitted++
					perUser[u]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted > 60 {
		t.Errorf("admitted %d, more than the tenant limit 60", admitted)
	}
	for u, n := range perUser {
		if n > 5 {
			t.Errorf("user %d admitted %d, more than its limit 5", u, n)
		}
	}
	b := apply(t, stores[0], check("global", global, 0), check("tenant", tenant, 0))
	if got, want := b.Outcomes[0].Remaining, uint64(100000-admitted); got != want {
		t.Errorf("global remaining = %d, want %d: a rejected request kept its reservation", got, want)
	}
	if got, want := b.Outcomes[1].Remaining, uint64(60-admitted); got != want {
		t.Errorf("tenant remaining = %d, want %d: a rejected request kept its reservation", got, want)
	}
	t.Logf("admitted %d of 480 (tenant limit 60, 20 users × 5)", admitted)
}

// testClusterRoundTrips counts script calls on a cluster: one per slot
// group, plus, per group that reserved for a rejected request, its refund
// and the call that reports its checks as rejected.
func testClusterRoundTrips(t *testing.T, opts redis.Options, cc goredis.UniversalClient) {
	s := newStore(t, opts)
	global := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	user := mustLimit(t, limits.TokenBucket, 1, limits.UnitHour, 1, 0)
	// All limits of one descriptor share a slot: one call.
	one := []limits.Check{check("d", global, 1), check("d", user, 1)}
	if redis.Slot(one[0].Key) != redis.Slot(one[1].Key) {
		t.Fatal("limits of one descriptor in different slots")
	}
	three := []limits.Check{check("global", global, 1), check("tenant", global, 1), check("user", user, 1)}
	tests := []struct {
		name     string
		give     []limits.Check
		admitted bool
		want     int64
	}{
		{name: "one_descriptor", give: one, admitted: true, want: 1},
		{name: "three_slots_admitted", give: three, admitted: true, want: 3},
		// The user tier rejects; the other two reserved and are refunded.
		{name: "three_slots_rejected", give: three, admitted: false, want: 7},
	}
	for _, tt := range tests {
		before := commandCalls(t, cc)
		b := apply(t, s, tt.give...)
		after := commandCalls(t, cc)
		if b.Admitted != tt.admitted {
			t.Fatalf("%s: admitted %v, want %v", tt.name, b.Admitted, tt.admitted)
		}
		got := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
		if got != tt.want {
			t.Errorf("%s: %d script calls, want %d", tt.name, got, tt.want)
		}
	}
}

// testTenantTiers sends the mission's tiered request through the engine:
// the descriptors that share their first entry ([tenant=t] and
// [tenant=t, user=u]) share a slot, so a request is two scripts, one for
// the tenant's tiers and one for the global tier, not three.
func testTenantTiers(t *testing.T, opts redis.Options, cc goredis.UniversalClient) {
	rs := parseRules(t, `
domain: bench
descriptors:
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_window}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`)
	e := limits.NewEngine(rs, newStore(t, opts), limits.EngineOptions{})
	desc := func(kv ...string) limits.Descriptor {
		var d limits.Descriptor
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, limits.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return d
	}
	const n = 20
	before := commandCalls(t, cc)
	for i := range n {
		tenant := fmt.Sprint("t", i)
		req := &limits.Request{Domain: "bench", Descriptors: []limits.Descriptor{
			desc("generic_key", "global"), desc("tenant", tenant), desc("tenant", tenant, "user", fmt.Sprint("u", i)),
		}}
		var d limits.Decision
		if err := e.Decide(context.Background(), req, &d); err != nil {
			t.Fatal(err)
		}
		checks := d.Checks()
		if len(checks) != 3 || d.Code != limits.OK {
			t.Fatalf("request %d: %d checks, %v; want 3 checks, OK", i, len(checks), d.Code)
		}
		if redis.Slot(checks[1].Key) != redis.Slot(checks[2].Key) {
			t.Fatalf("tenant keys %q and %q in different slots", checks[1].Key, checks[2].Key)
		}
		if redis.Slot(checks[0].Key) == redis.Slot(checks[1].Key) {
			t.Fatalf("the test needs the global key %q in another slot than %q", checks[0].Key, checks[1].Key)
		}
	}
	after := commandCalls(t, cc)
	if got := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]; got != 2*n {
		t.Errorf("%d tiered requests ran %d scripts, want %d: two each", n, got, 2*n)
	}
}

// testUnderAdmission measures how often a cross-slot request is rejected
// only because of other requests' reservations, which are refunded a
// moment later. The global tier's limit is above what the users can ever
// take together, so exact all-or-nothing would never let it reject: every
// request it rejects is such a momentary under-admission. The share grows
// with the number of requests in flight that another tier rejects,
// relative to the global budget. Over-admission is an error.
func testUnderAdmission(t *testing.T, opts redis.Options) {
	for _, goroutines := range []int{8, 3 * 64} {
		t.Run(fmt.Sprint(goroutines), func(t *testing.T) {
			clk := storetest.NewClock(storetest.Epoch.Add(time.Second))
			stores := sharedStores(t, opts, 3, clk)
			const users, perUser, globalLimit = 20, 2, 50 // users take at most 40 < 50
			global := mustLimit(t, limits.FixedWindow, globalLimit, limits.UnitHour, 1, 0)
			user := mustLimit(t, limits.TokenBucket, perUser, limits.UnitHour, 1, 0)
			perGoroutine := 1920 / goroutines
			var (
				mu                          sync.Mutex
				admitted, globalOver, total int
				wg                          sync.WaitGroup
			)
			for g := range goroutines {
				s := stores[g%len(stores)]
				wg.Go(func() {
					for i := range perGoroutine {
						u := (g*perGoroutine + i) % users
						b := &limits.Batch{Checks: []limits.Check{check("global", global, 1), check(fmt.Sprint("user", u), user, 1)}}
						if err := s.Apply(context.Background(), b); err != nil {
							t.Errorf("Apply: %v", err)
							return
						}
						mu.Lock()
						total++
						if b.Admitted {
							admitted++
						}
						if b.Outcomes[0].Over {
							globalOver++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if admitted > users*perUser {
				t.Errorf("admitted %d, more than the users' %d", admitted, users*perUser)
			}
			b := apply(t, stores[0], check("global", global, 0))
			if got, want := b.Outcomes[0].Remaining, uint64(globalLimit-admitted); got != want {
				t.Errorf("global remaining %d, want %d", got, want)
			}
			t.Logf("%d in flight: %d requests, %d admitted (exact: %d), %d (%.1f%%) rejected by the global tier (limit %d) only for reservations refunded later",
				goroutines, total, admitted, users*perUser, globalOver, 100*float64(globalOver)/float64(total), globalLimit)
		})
	}
}

// testClusterPipeline: with one round trip per node allowed, 128
// goroutines on one key are batched on the key's node, into one apply.lua
// call per round trip since they share a slot, and still admitted
// exactly.
func testClusterPipeline(t *testing.T, opts redis.Options) {
	opts.MaxInflight = 1
	s := newStore(t, opts)
	var pipelines pipelineSizes
	redis.AddNodeHook(s, &pipelines)
	l := mustLimit(t, limits.FixedWindow, 300, limits.UnitHour, 1, 0)
	admitted := applyConcurrently(t, s, 128, 5, func(int, int) []limits.Check {
		return []limits.Check{check("pipelined", l, 1)}
	})
	if admitted != 300 {
		t.Errorf("admitted %d of 640, want exactly 300", admitted)
	}
	calls, requests, most := pipelines.calls()
	t.Logf("%d pipelines; %d apply.lua calls for %d requests, at most %d in one", len(pipelines.sizes), calls, requests, most)
	if requests != 128*5 || most < 2 || most > 128 || pipelines.largest() > 1 {
		t.Errorf("%d requests in apply.lua calls of at most %d, in pipelines of at most %d: want 640, 2 to 128, and 1",
			requests, most, pipelines.largest())
	}
}

// testRedirect sends requests through a pipe to a master that does not
// serve their key, as after a resharding: the node answers MOVED, before
// running anything, and each request must go again through the cluster
// client, lone and pipelined alike, and be decided exactly.
func testRedirect(t *testing.T, opts redis.Options, cc *goredis.ClusterClient) {
	s := newStore(t, opts)
	l := mustLimit(t, limits.FixedWindow, 100, limits.UnitHour, 1, 0)
	c := check("redirected", l, 1)
	ctx := context.Background()
	owner, err := cc.MasterForKey(ctx, redis.FullKey(s, c))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex // ForEachMaster calls in parallel
		wrong *goredis.Client
	)
	err = cc.ForEachMaster(ctx, func(_ context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if n.Options().Addr != owner.Options().Addr {
			wrong = n
		}
		return nil
	})
	if err != nil || wrong == nil {
		t.Fatalf("no master other than the key's: %v", err)
	}
	// A key that the pipe's node does serve: requests for both keys that
	// wait together are one script call, which the node refuses whole
	// ("non local key") before running anything, and each then goes on
	// its own.
	var local limits.Check
	for i := 0; local.Key == ""; i++ {
		cand := check(fmt.Sprint("local", i), l, 1)
		n, err := cc.MasterForKey(ctx, redis.FullKey(s, cand))
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr == wrong.Options().Addr {
			local = cand
		}
	}
	p := redis.NewNodePipe(s, wrong, 1)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 10 {
				b := &limits.Batch{Checks: []limits.Check{c}}
				if (g+i)%2 == 1 {
					b.Checks[0] = local
				}
				if err := redis.ApplyVia(ctx, s, p, b); err != nil {
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
	if got := admitted.Load(); got != 160 {
		t.Errorf("admitted %d of 160, want all: 80 of each key's 100", got)
	}
	for _, k := range []limits.Check{c, local} {
		probe := k
		probe.Hits = 0
		if got := apply(t, s, probe).Outcomes[0].Remaining; got != 20 {
			t.Errorf("%s: remaining %d, want 20: 80 requests counted once each", k.Key, got)
		}
	}
}

// testMigration moves a slot from one master to another, as redis-cli
// --cluster reshard does, while the store decides requests on it: ASK
// while the slot is migrating (for a key not yet on the source, and for
// one already moved), MOVED once it has. Every request must succeed, lone
// or pipelined, and be counted once.
func testMigration(t *testing.T, opts redis.Options, cc *goredis.ClusterClient) {
	ctx := context.Background()
	s := newStore(t, opts)
	fixed := mustLimit(t, limits.FixedWindow, 1000, limits.UnitHour, 1, 0)
	sliding := mustLimit(t, limits.SlidingWindow, 1000, limits.UnitHour, 1, 0)
	bucket := mustLimit(t, limits.TokenBucket, 1000, limits.UnitHour, 1, 0)
	// One descriptor, so one hash tag and one slot, with three limits.
	old, fresh := check("migrating", fixed, 1), check("migrating", sliding, 1)
	stay := check("migrating", bucket, 1) // moved last
	oldKey, stayKey := redis.FullKey(s, old), redis.FullKey(s, stay)
	slot, err := cc.ClusterKeySlot(ctx, oldKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cc.ClusterKeySlot(ctx, redis.FullKey(s, fresh)).Result(); err != nil || got != slot {
		t.Fatalf("the two keys are in slots %d and %d (%v)", slot, got, err)
	}
	nodes := newMigrationNodes(t, ctx, cc, oldKey)
	src, dst, masters, srcID, dstID := nodes.src, nodes.dst, nodes.masters, nodes.srcID, nodes.dstID
	do := func(n *goredis.Client, args ...any) {
		t.Helper()
		if err := n.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, n.Options().Addr, err)
		}
	}
	want := map[string]uint64{}
	decide := func(phase string, c limits.Check, n int) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				b := &limits.Batch{Checks: []limits.Check{c}}
				if err := s.Apply(ctx, b); err != nil {
					t.Errorf("%s: Apply: %v", phase, err)
				} else if !b.Admitted {
					t.Errorf("%s: not admitted", phase)
				}
			})
		}
		wg.Wait()
		want[c.Limit.Algorithm.String()] += uint64(n)
	}

	decide("before", old, 10)
	decide("before", stay, 10)
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	decide("migrating, key still on the source", old, 10)
	decide("migrating, key new (ASK)", fresh, 20)
	dstHost, dstPort, _ := strings.Cut(dst.Options().Addr, ":")
	do(src, "MIGRATE", dstHost, dstPort, "", 0, 5000, "KEYS", oldKey)
	decide("migrating, key moved (ASK)", old, 20)
	// Requests that wait for one round trip are one script call, whose
	// keys are now on both sides of the migration: the source refuses it
	// whole (TRYAGAIN), and each request must then go on its own, where
	// its own key is.
	for range 5 {
		bs := []*limits.Batch{{Checks: []limits.Check{stay}}, {Checks: []limits.Check{old}}}
		if err := redis.ApplyTogether(ctx, s, bs); err != nil {
			t.Errorf("together, keys on both sides: %v", err)
		}
		for _, b := range bs {
			if !b.Admitted {
				t.Errorf("together, keys on both sides: %s not admitted", b.Checks[0].Key)
			}
		}
		want[bucket.Algorithm.String()]++
		want[fixed.Algorithm.String()]++
	}
	do(src, "MIGRATE", dstHost, dstPort, "", 0, 5000, "KEYS", stayKey)
	do(dst, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	for _, n := range masters {
		if n != dst {
			do(n, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
		}
	}
	decide("moved (MOVED)", old, 20)
	decide("moved (MOVED)", fresh, 20)

	b := apply(t, s, check("migrating", fixed, 0), check("migrating", sliding, 0), check("migrating", bucket, 0))
	for i, alg := range []string{fixed.Algorithm.String(), sliding.Algorithm.String(), bucket.Algorithm.String()} {
		if got := 1000 - b.Outcomes[i].Remaining; got != want[alg] {
			t.Errorf("%s counted %d, want %d", alg, got, want[alg])
		}
	}
	if n, err := dst.Exists(ctx, oldKey).Result(); err != nil || n != 1 {
		t.Errorf("the key is not on the new master: %d, %v", n, err)
	}
}

// migrationNodes is what a test that migrates key's slot by hand needs:
// the master that serves it (src), another master (dst), every master,
// and src's and dst's cluster ids.
type migrationNodes struct {
	src, dst     *goredis.Client
	masters      []*goredis.Client
	srcID, dstID string
}

func newMigrationNodes(t *testing.T, ctx context.Context, cc *goredis.ClusterClient, key string) migrationNodes {
	t.Helper()
	var m migrationNodes
	src, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m.src = src
	var mu sync.Mutex // ForEachMaster calls in parallel
	err = cc.ForEachMaster(ctx, func(_ context.Context, n *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		m.masters = append(m.masters, n)
		if n.Options().Addr != src.Options().Addr {
			m.dst = n
		}
		return nil
	})
	if err != nil || m.dst == nil {
		t.Fatalf("no second master: %v", err)
	}
	id := func(n *goredis.Client) string {
		v, err := n.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	m.srcID, m.dstID = id(m.src), id(m.dst)
	return m
}
