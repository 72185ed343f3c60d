// Package storetest is test support: the one table of algorithm cases
// that every limits.Store must pass, so the memory and Redis stores cannot
// drift apart.
//
// A store's test calls Run with a Factory that returns a fresh, empty store
// deciding by the given Clock.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// IgnoreReceipts makes cmp skip limits.Outcome.GrantReceipt, an absolute
// time or tick that the cases do not spell out; the Redis store's
// differential test compares it with the memory store's.
var IgnoreReceipts = cmpopts.IgnoreFields(limits.Outcome{}, "GrantReceipt")

// Clock is a settable clock for stores under test. It is safe for
// concurrent use.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*clockTimer // guarded by mu
}

type clockTimer struct {
	at      time.Time
	f       func()
	stopped bool // guarded by Clock.mu
}

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock forward by d. The functions of AfterFunc that
// come due on the way run in the caller's goroutine, in the order they
// are due, each with the clock set to its time (and those they add that
// come due run too).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.t.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *clockTimer
		for _, tm := range c.timers {
			if !tm.stopped && !tm.at.After(end) && (next == nil || tm.at.Before(next.at)) {
				next = tm
			}
		}
		if next == nil {
			c.t = end
			c.timers = slices.DeleteFunc(c.timers, func(tm *clockTimer) bool { return tm.stopped })
			c.mu.Unlock()
			return
		}
		next.stopped = true
		if next.at.After(c.t) {
			c.t = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// AfterFunc runs f once the clock has been advanced by d or more (see
// Advance); stop keeps it from running and reports whether it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &clockTimer{at: c.t.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// Epoch is where every case starts: a multiple of every unit (second to
// 365-day year, and 7-day week), so each case starts at a window boundary.
var Epoch = time.Unix(15330*24*3600, 0).UTC() // 2011-12-22, 15330 = lcm(365, 30, 7) × 6

// Factory returns a fresh store that decides by clk. The store must not
// see keys written by another Factory call (use a key prefix per call).
type Factory func(t *testing.T, clk *Clock) limits.Store

// Check is one check of a step: a key name local to the case, a limit and
// hits.
type Check struct {
	Key   string
	Limit *limits.Limit
	Hits  uint64
	// Usage makes the check a usage charge (limits.Check.Usage).
	Usage bool
	// Refund makes the check give its hits back (limits.Check.Refund).
	Refund bool
	// Hold names the request (limits.Check.Hold).
	Hold string
}

// Step is one request at At after Epoch, and what it must return.
type Step struct {
	At     time.Duration
	Checks []Check
	// Extra, if set, is each check's limits.Check.Extra (see GrantCases).
	Extra []uint64
	// Groups, if set, is each check's limits.Check.Group, and
	// QuotaGroups the batch's (see QuotaCases).
	Groups      []int
	QuotaGroups int
	Admitted    bool
	Want        []limits.Outcome
}

// Case is a named sequence of requests.
type Case struct {
	Name  string
	Steps []Step
}

// All returns every case of Cases, QuotaCases, UsageCases, RefundCases,
// ConcurrencyCases, ReservationCases and CalendarCases.
func All() []Case {
	return slices.Concat(Cases(), QuotaCases(), UsageCases(), RefundCases(), ConcurrencyCases(), ReservationCases(), CalendarCases())
}

// Run runs every case of All against stores from newStore.
func Run(t *testing.T, newStore Factory) {
	run(t, All(), newStore)
}

// RunHoldingOneKey runs the cases of Run that hold as well in a store
// that keeps one key, evicting the rest to what it remembers of them
// (memory.Options.MaxKeys 1): all but the refunds of keys that another
// key evicted, which a store may lose to its eviction, and the usage
// charges on several keys, where a store may remember an evicted key as
// over (see docs/memory-store.md).
func RunHoldingOneKey(t *testing.T, newStore Factory) {
	cases := slices.DeleteFunc(All(), func(c Case) bool {
		// A ledger of reservations is a key of its own, which the
		// counter's eviction may lose (docs/memory-store.md).
		return strings.HasPrefix(c.Name, refundTwoKeys) || strings.HasPrefix(c.Name, usageManyKeys) || strings.HasPrefix(c.Name, "reservation/")
	})
	run(t, cases, newStore)
}

// RunGrants runs every case of GrantCases, for stores that lease.
func RunGrants(t *testing.T, newStore Factory) {
	run(t, slices.Concat(GrantCases(), CalendarGrantCases()), newStore)
}

func run(t *testing.T, cases []Case, newStore Factory) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			clk := NewClock(Epoch)
			s := newStore(t, clk)
			for i, step := range tt.Steps {
				clk.Set(Epoch.Add(step.At))
				b := step.Batch(tt.Name)
				if err := s.Apply(context.Background(), b); err != nil {
					t.Fatalf("step %d (at %v): Apply: %v", i, step.At, err)
				}
				if b.Admitted != step.Admitted {
					t.Errorf("step %d (at %v): admitted = %v, want %v", i, step.At, b.Admitted, step.Admitted)
				}
				if diff := cmp.Diff(step.Want, b.Outcomes, IgnoreReceipts); diff != "" {
					t.Errorf("step %d (at %v): outcomes (-want +got):\n%s", i, step.At, diff)
				}
				checkBounds(t, fmt.Sprintf("step %d (at %v)", i, step.At), b)
			}
		})
	}
}

// Batch returns the step's request in case caseName, its keys built by
// Key.
func (s Step) Batch(caseName string) *limits.Batch {
	b := &limits.Batch{QuotaGroups: s.QuotaGroups}
	for j, c := range s.Checks {
		key := Key(caseName, c.Key, c.Limit)
		b.Checks = append(b.Checks, limits.Check{Key: key, Limit: c.Limit, Hits: c.Hits, Usage: c.Usage, Refund: c.Refund, Hold: c.Hold})
		if j < len(s.Extra) {
			b.Checks[j].Extra = s.Extra[j]
		}
		if j < len(s.Groups) {
			b.Checks[j].Group = s.Groups[j]
		}
	}
	return b
}

// checkBounds checks what holds of every outcome, whatever the state:
// no more remains than the limit holds (its burst, for a bucket), and no
// reset is negative.
func checkBounds(t *testing.T, where string, b *limits.Batch) {
	t.Helper()
	for j, o := range b.Outcomes {
		l := b.Checks[j].Limit
		most := l.Requests
		if l.Algorithm.Bucketed() {
			most = l.Burst
		}
		if o.Remaining > most {
			t.Errorf("%s: check %d: remaining %d, more than the limit holds (%d)", where, j, o.Remaining, most)
		}
		if o.Reset < 0 || o.GrantFor < 0 {
			t.Errorf("%s: check %d: negative reset %v or grant time %v", where, j, o.Reset, o.GrantFor)
		}
	}
}

// Key builds a real store key for a case-local key name, so every case has
// its own counters and keys of different names land in different slots.
func Key(caseName, name string, l *limits.Limit) string {
	b, _ := limits.AppendKey(nil, "storetest", []limits.Entry{{Key: caseName, Value: name}}, l)
	return string(b)
}

// MultiFactory returns stores that share one backend (several engines
// against one Redis, say), all deciding by clk.
type MultiFactory func(t *testing.T, clk *Clock) []limits.Store

// RunExact checks that concurrent requests never over-admit: goroutines
// spread over the stores hammer one key with limit 100 per minute, for
// every algorithm, and exactly 100 requests may pass. The clock stands
// still, so no window turns over during the test.
func RunExact(t *testing.T, newStores MultiFactory, goroutines, perGoroutine int) {
	for _, alg := range limits.Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			stores := newStores(t, NewClock(Epoch.Add(time.Second)))
			l := mustLimit(alg, 100, limits.UnitMinute, 1, 0)
			key := Key("exact-"+t.Name(), "hot", l)
			var admitted, over atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				s := stores[g%len(stores)]
				wg.Go(func() {
					for range perGoroutine {
						b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: l, Hits: 1}}}
						if err := s.Apply(context.Background(), b); err != nil {
							errs <- err
							return
						}
						if b.Admitted {
							admitted.Add(1)
						} else {
							over.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("Apply: %v", err)
			}
			if got := admitted.Load(); got != 100 {
				t.Errorf("admitted %d of %d requests, want exactly 100", got, admitted.Load()+over.Load())
			}
		})
	}
}

// RunTiers checks all-or-nothing on a three-tier request (global, tenant,
// user) under concurrency: exactly the tenant limit is admitted, no user
// tier admits more than its limit, and requests rejected by the user tier
// leave the others untouched.
func RunTiers(t *testing.T, newStores MultiFactory, goroutines int) {
	runTiers(t, newStores, goroutines, true)
}

// RunTiersSettling is RunTiers for a store that decides a request in more
// than one step, like Redis Cluster across hash slots: a request may be
// rejected because of another request's reservation, which is refunded a
// moment later. Under concurrency such a store may admit fewer than the
// tenant limit, never more, and the capacity it left unused must still be
// there: once the race is over, requests made one at a time take the
// total to exactly the tenant limit.
func RunTiersSettling(t *testing.T, newStores MultiFactory, goroutines int) {
	runTiers(t, newStores, goroutines, false)
}

func runTiers(t *testing.T, newStores MultiFactory, goroutines int, exact bool) {
	stores := newStores(t, NewClock(Epoch.Add(time.Second)))
	global := mustLimit(limits.FixedWindow, 1000, limits.UnitMinute, 1, 0)
	tenant := mustLimit(limits.SlidingWindow, 60, limits.UnitMinute, 1, 0)
	user := mustLimit(limits.TokenBucket, 5, limits.UnitHour, 1, 5)
	gk := Key("tiers-"+t.Name(), "global", global)
	tk := Key("tiers-"+t.Name(), "tenant", tenant)
	const users = 20
	batch := func(u int) *limits.Batch {
		uk := Key("tiers-"+t.Name(), fmt.Sprint("user", u), user)
		return &limits.Batch{Checks: []limits.Check{
			{Key: gk, Limit: global, Hits: 1},
			{Key: tk, Limit: tenant, Hits: 1},
			{Key: uk, Limit: user, Hits: 1},
		}}
	}
	var admitted atomic.Int64
	perUser := make([]atomic.Int64, users)
	var wg sync.WaitGroup
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			for i := range 20 {
				u := (g*20 + i) % users
				b := batch(u)
				if err := s.Apply(context.Background(), b); err != nil {
					t.Errorf("Apply: %v", err)
					return
				}
				if b.Admitted {
					admitted.Add(1)
					perUser[u].Add(1)
				}
			}
		})
	}
	wg.Wait()
	raced := admitted.Load()
	if raced > 60 {
		t.Fatalf("admitted %d, more than the tenant limit 60", raced)
	}
	if !exact {
		// Take what the race left, one request at a time, until the
		// tenant tier rejects. A reservation that was never refunded
		// would show as a total below 60.
	topUp:
		for u := range users {
			for {
				b := batch(u)
				if err := stores[0].Apply(context.Background(), b); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if !b.Admitted {
					if b.Outcomes[1].Over {
						break topUp // the tenant tier is full
					}
					break // this user's tier is
				}
				admitted.Add(1)
				perUser[u].Add(1)
			}
		}
		t.Logf("the race admitted %d, requests one at a time after it %d", raced, admitted.Load()-raced)
	}
	if got := admitted.Load(); got != 60 {
		t.Errorf("admitted %d, want exactly the tenant limit 60 (20 users × 5 > 60)", got)
	}
	for u := range perUser {
		if n := perUser[u].Load(); n > 5 {
			t.Errorf("user %d admitted %d, more than its limit 5", u, n)
		}
	}
	// Nothing rejected consumed: the global tier counted only the admitted.
	b := &limits.Batch{Checks: []limits.Check{{Key: gk, Limit: global, Hits: 0}}}
	if err := stores[0].Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.Outcomes[0].Remaining, uint64(1000-admitted.Load()); got != want {
		t.Errorf("global remaining = %d, want %d: rejected requests consumed the global tier", got, want)
	}
}

func mustLimit(alg limits.Algorithm, requests uint64, unit limits.Unit, mult, burst uint64) *limits.Limit {
	l, err := limits.NewLimit(alg, requests, unit, mult, burst)
	if err != nil {
		panic(err)
	}
	return l
}

func shadow(l *limits.Limit) *limits.Limit {
	c := *l
	c.Shadow = true
	return &c
}
