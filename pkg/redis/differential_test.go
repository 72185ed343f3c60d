package redis_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/redis"
)

func TestStandaloneDifferential(t *testing.T) {
	srv := redistest.StartServer(t)
	testDifferential(t, redis.Options{URL: urlOf(srv.Addr)}, false)
	// Several requests in one apply.lua call, as the pipe sends requests
	// that arrive together, decide as the memory store does one by one.
	t.Run("together", func(t *testing.T) { testDifferential(t, redis.Options{URL: urlOf(srv.Addr)}, true) })
}

// TestFastDifferential: batches that fast.lua may decide per key (any
// algorithm but the sliding log, hits, no lease, quota or usage) decide as the
// memory store does one request at a time, whether the batch fits (one
// evaluation per key) or not (apply.lua's, in the same call). Both must
// happen, or the test does not test them.
func TestFastDifferential(t *testing.T) {
	srv := redistest.StartServer(t)
	opts := redis.Options{URL: urlOf(srv.Addr)}
	fits, misses := testDifferentialOf(t, opts, true, true)
	t.Logf("batches decided per key %d, by apply.lua after not fitting %d", fits, misses)
	if fits < 100 || misses < 100 {
		t.Errorf("%d batches fit and %d did not: want at least 100 each, so both paths are compared", fits, misses)
	}
}

// testDifferential sends the same random requests to a Redis store and to
// the memory store, which is the reference, and requires the same answer
// to every one: same algorithms, same keys repeated within a batch, shadow
// limits, quota groups, zero and large hits, leases, and a clock that jumps across
// windows. together sends 1 to 6 requests at a time as the pipes send
// requests that arrive together: one script call on standalone Redis, one
// per master on a Cluster, where each request's checks then share a name
// (and so a slot) and a call holds requests of several slots.
func testDifferential(t *testing.T, opts redis.Options, together bool) {
	testDifferentialOf(t, opts, together, false)
}

// testDifferentialOf is testDifferential, with windows: only requests
// that fast.lua may decide, 2 to 8 at a time, and every store's MODE_FAST
// tried on every batch. It returns how many batches fast.lua decided and
// how many it passed to apply.lua.
func testDifferentialOf(t *testing.T, opts redis.Options, together, windows bool) (fits, misses int64) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			clk := storetest.NewClock(storetest.Epoch.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
			s := newStore(t, clocked(opts, clk.Now))
			if windows {
				redis.AlwaysFast(s)
				defer func() {
					f, m := redis.FastCounts(s)
					fits, misses = fits+f, misses+m
				}()
			}
			mem := memory.New(memory.Options{Now: clk.Now})
			pool := []*limits.Limit{
				mustLimit(t, limits.FixedWindow, 5, limits.UnitSecond, 1, 0),
				mustLimit(t, limits.FixedWindow, 20, limits.UnitSecond, 10, 0),
				mustLimit(t, limits.SlidingWindow, 6, limits.UnitSecond, 2, 0),
				mustLimit(t, limits.SlidingWindow, 7, limits.UnitSecond, 1, 0),
				mustLimit(t, limits.SlidingLog, 5, limits.UnitSecond, 2, 0),
				mustLimit(t, limits.SlidingLog, 40, limits.UnitSecond, 1, 0),
				mustLimit(t, limits.TokenBucket, 3, limits.UnitSecond, 1, 6),
				mustLimit(t, limits.TokenBucket, 7, limits.UnitSecond, 3, 2),
				mustLimit(t, limits.LeakyBucket, 3, limits.UnitSecond, 1, 4),
				mustLimit(t, limits.LeakyBucket, 11, limits.UnitSecond, 2, 0),
				mustLimit(t, limits.Concurrency, 3, limits.UnitSecond, 2, 0),
				mustLimit(t, limits.FixedWindow, 0, limits.UnitSecond, 1, 0),
			}
			if windows {
				// Limits that a batch usually fits too, so that both
				// paths are taken.
				pool = slices.DeleteFunc(pool, func(l *limits.Limit) bool {
					return l.Algorithm == limits.SlidingLog || l.Algorithm == limits.Concurrency
				})
				pool = append(pool,
					mustLimit(t, limits.FixedWindow, 400, limits.UnitSecond, 1, 0),
					mustLimit(t, limits.SlidingWindow, 300, limits.UnitSecond, 10, 0),
					mustLimit(t, limits.TokenBucket, 300, limits.UnitSecond, 10, 400),
					mustLimit(t, limits.LeakyBucket, 200, limits.UnitSecond, 4, 300))
			}
			for _, l := range pool[:len(pool)-1] {
				sh := *l
				sh.Shadow = true
				pool = append(pool, &sh)
			}
			names := []string{"a", "b", "c", "d"}
			stepped := time.Now()
			for step := range 500 {
				// Redis expires keys in real time, the memory store in the
				// clock's: a key written a microsecond before its window ends
				// has a TTL of 1 ms, which real time may run out while the
				// clock stands still. So the clock moves at least as far as
				// real time did since the last step, and Redis never drops a
				// key that the clock still holds live.
				before, real := clk.Now(), time.Since(stepped)
				stepped = time.Now()
				switch r := rng.IntN(20); {
				case r < 8:
					clk.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				case r < 12:
					clk.Advance(time.Duration(rng.IntN(6)) * 50 * time.Millisecond)
				case r < 14:
					// To a window edge, or a microsecond either side.
					now := clk.Now()
					edge := now.Truncate(time.Second).Add(time.Second)
					clk.Set(edge.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond))
				case r < 19:
				default:
					clk.Advance(time.Duration(rng.Int64N(int64(25 * time.Second))))
				}
				if clk.Now().Sub(before) < real {
					clk.Set(before.Add(real))
				}
				requests := 1
				switch {
				case windows:
					requests = 2 + rng.IntN(7)
				case together:
					requests += rng.IntN(6)
				}
				var want, got []*limits.Batch
				// Holds of the step: a request in flight is named once a
				// call (a request that holds a slot and takes it again in
				// the same call is counted twice there, never less).
				holds := map[string]bool{}
				for range requests {
					var checks []limits.Check
					// A third of the requests have quota groups; each check is in
					// one of them or enforced.
					quotaGroups := 0
					if rng.IntN(3) == 0 && !windows {
						quotaGroups = 1 + rng.IntN(3)
					}
					name := names[rng.IntN(len(names))]
					for range 1 + rng.IntN(4) {
						l := pool[rng.IntN(len(pool))]
						hits := uint64(rng.IntN(3))
						if rng.IntN(10) == 0 {
							hits = uint64(rng.IntN(50))
						}
						if windows {
							hits = max(hits, 1)
						}
						var extra uint64
						if l.Algorithm != limits.SlidingLog && rng.IntN(8) == 0 && !windows {
							extra = uint64(1 + rng.IntN(5))
						}
						if !together || opts.ClusterAddrs == nil {
							name = names[rng.IntN(len(names))]
						}
						key := storetest.Key(t.Name(), name, l)
						if windows {
							// A key per limit, as limit IDs make them: fast.lua
							// requires one limit per key, and sends a batch
							// with two to apply.lua.
							key = storetest.Key(t.Name(), fmt.Sprint(name, l.Algorithm, l.Requests, l.Window()), l)
						}
						// A quarter of the checks with hits are usage
						// charges, which no store leases. Not after an
						// ordinary check on the same key: a Cluster
						// reports that one as the request's charges left it
						// (see storetest's usage cases).
						usage := hits > 0 && !windows && rng.IntN(4) == 0 && !slices.ContainsFunc(checks, func(c limits.Check) bool { return c.Key == key && !c.Usage })
						if usage {
							extra = 0
							if rng.IntN(3) == 0 {
								hits = uint64(rng.IntN(40))
							}
						}
						// A tenth of the others give hits back (Envoy's
						// is_negative_hits).
						refund := !usage && !windows && rng.IntN(10) == 0
						if refund {
							extra = 0
							if rng.IntN(3) == 0 {
								hits = uint64(rng.IntN(40))
							}
						}
						c := limits.Check{Key: key, Limit: l, Hits: hits, Extra: extra, Group: rng.IntN(quotaGroups + 1), Usage: usage, Refund: refund}
						if l.Algorithm == limits.Concurrency {
							c.Hold = fmt.Sprint("r", rng.IntN(8))
							for holds[c.Hold] {
								c.Hold += "+"
							}
							holds[c.Hold] = true
							c.Usage, c.Extra, c.Group = false, 0, 0
						}
						checks = append(checks, c)
					}
					got = append(got, &limits.Batch{Checks: checks, QuotaGroups: quotaGroups})
				}
				// A call gives back every refund of its requests first
				// (limits.Store): so does the memory store, before it
				// decides the requests one by one with their refunds
				// already given.
				var refunds []limits.Check
				for _, b := range got {
					for _, c := range b.Checks {
						if c.Refund && requests > 1 {
							refunds = append(refunds, c)
						}
					}
				}
				if len(refunds) > 0 {
					applyBatch(t, mem, &limits.Batch{Checks: refunds})
				}
				for _, b := range got {
					checks := slices.Clone(b.Checks)
					for j := range checks {
						if checks[j].Refund && len(refunds) > 0 {
							checks[j].Hits = 0
						}
					}
					w := applyBatch(t, mem, &limits.Batch{Checks: checks, QuotaGroups: b.QuotaGroups})
					w.Checks = b.Checks
					want = append(want, w)
				}
				if together {
					if err := redis.ApplyTogether(t.Context(), s, got); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				} else {
					got[0] = applyBatch(t, s, got[0])
				}
				for i := range want {
					if diff := diffBatch(want[i], got[i]); diff != "" {
						t.Fatalf("step %d at %v: request %d of %d, %s, differs from the memory store's (-memory +redis):\n%s",
							step, clk.Now().Sub(storetest.Epoch), i+1, requests, describeAll(want), diff)
					}
				}
			}
		})
	}
	return fits, misses
}

// describe lists checks for a failure message.
func describe(checks []limits.Check) string {
	var sb strings.Builder
	for _, c := range checks {
		l := c.Limit
		fmt.Fprintf(&sb, "\n  %s %d/%v burst %d shadow %v group %d hits %d usage %v refund %v hold %q", c.Key, l.Requests, l.Window(), l.Burst, l.Shadow, c.Group, c.Hits, c.Usage, c.Refund, c.Hold)
	}
	return sb.String()
}

// describeAll lists the requests of bs, with what the memory store said.
func describeAll(bs []*limits.Batch) string {
	var sb strings.Builder
	for i, b := range bs {
		fmt.Fprintf(&sb, "\n request %d, admitted %v, quota groups %d:%s", i+1, b.Admitted, b.QuotaGroups, describe(b.Checks))
	}
	return sb.String()
}
