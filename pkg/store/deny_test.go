package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

func mustLimit(t testing.TB, alg limits.Algorithm, requests uint64, unit limits.Unit, burst uint64) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, 1, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func shadowOf(l *limits.Limit) *limits.Limit {
	c := *l
	c.Shadow = true
	return &c
}

func ok(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Remaining: rem, Reset: reset}
}

func over(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Over: true, Remaining: rem, Reset: reset}
}

// spy is the store behind the cache in unit tests: it counts calls, and
// once its store has answered it moves the clock on by latency, like a
// store that takes that long to reply.
type spy struct {
	next    limits.Store
	clk     *storetest.Clock
	latency time.Duration
	calls   atomic.Int64
	during  func() // if set, called during each Apply
	err     error  // if set, returned instead of calling next
}

func (s *spy) Apply(ctx context.Context, b *limits.Batch) error {
	s.calls.Add(1)
	if s.during != nil {
		s.during()
	}
	if s.err != nil {
		return s.err
	}
	err := s.next.Apply(ctx, b)
	s.clk.Advance(s.latency)
	return err
}

// newCache returns a cache on a memory store, both on one fake clock at
// storetest.Epoch, and the spy between them.
func newCache(opts DenyCacheOptions, latency time.Duration) (*DenyCache, *spy, *storetest.Clock) {
	clk := storetest.NewClock(storetest.Epoch)
	sp := &spy{next: memory.New(memory.Options{Now: clk.Now}), clk: clk, latency: latency}
	opts.Now = clk.Now
	return NewDenyCache(sp, opts), sp, clk
}

type chk struct {
	key  string
	l    *limits.Limit
	hits uint64
}

func batchOf(cs ...chk) *limits.Batch {
	b := &limits.Batch{}
	for _, c := range cs {
		key := storetest.Key("deny", c.key, c.l)
		b.Checks = append(b.Checks, limits.Check{Key: key, Limit: c.l, Hits: c.hits})
	}
	return b
}

// step is one request at at after storetest.Epoch. wantLocal says the
// cache answered it without calling the store; want, if not nil, is the
// outcomes.
type step struct {
	at           time.Duration
	give         []chk
	wantAdmitted bool
	wantLocal    bool
	want         []limits.Outcome
}

// runSteps applies steps in order and checks each, and Answered at the end.
func runSteps(t *testing.T, c *DenyCache, sp *spy, clk *storetest.Clock, steps []step) {
	t.Helper()
	local := 0
	for i, st := range steps {
		clk.Set(storetest.Epoch.Add(st.at))
		calls := sp.calls.Load()
		b := batchOf(st.give...)
		if err := c.Apply(context.Background(), b); err != nil {
			t.Fatalf("step %d (at %v): Apply: %v", i, st.at, err)
		}
		if b.Admitted != st.wantAdmitted {
			t.Errorf("step %d (at %v): admitted = %v, want %v", i, st.at, b.Admitted, st.wantAdmitted)
		}
		if gotLocal := sp.calls.Load() == calls; gotLocal != st.wantLocal {
			t.Errorf("step %d (at %v): answered locally = %v, want %v", i, st.at, gotLocal, st.wantLocal)
		}
		if st.wantLocal {
			local++
		}
		if st.want != nil {
			if diff := cmp.Diff(st.want, b.Outcomes); diff != "" {
				t.Errorf("step %d (at %v): outcomes (-want +got):\n%s", i, st.at, diff)
			}
		}
	}
	if got := c.Answered(); got != uint64(local) {
		t.Errorf("Answered() = %d, want %d", got, local)
	}
}

func TestDenyCacheSteps(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	fw1sAgain := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0) // an override: same numbers, new pointer
	fw2s := mustLimit(t, limits.FixedWindow, 2, limits.UnitSecond, 0)
	fw4m := mustLimit(t, limits.FixedWindow, 4, limits.UnitMinute, 0)
	fw5m := mustLimit(t, limits.FixedWindow, 5, limits.UnitMinute, 0)
	ban := mustLimit(t, limits.FixedWindow, 0, limits.UnitSecond, 0)
	tb := mustLimit(t, limits.TokenBucket, 1, limits.UnitSecond, 1)
	lb := mustLimit(t, limits.LeakyBucket, 2, limits.UnitSecond, 1)
	sw := mustLimit(t, limits.SlidingWindow, 2, limits.UnitSecond, 0)
	sl := mustLimit(t, limits.SlidingLog, 2, limits.UnitSecond, 0)
	sh1s := shadowOf(fw1s)

	tests := []struct {
		name    string
		latency time.Duration // how long the store takes to answer
		give    []step
	}{
		{
			// The store takes 100 ms: the entry must run from the time
			// before the call, not after it.
			name:    "expires_at_reset_measured_from_before_the_call",
			latency: 100 * ms,
			give: []step{
				{at: 0, give: []chk{{"k", fw2s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw2s, 1}}, wantAdmitted: true},
				{at: 250 * ms, give: []chk{{"k", fw2s, 1}}, want: []limits.Outcome{over(0, 750*ms)}},
				// Over until 1 s less one tick.
				{at: 300 * ms, give: []chk{{"k", fw2s, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 700*ms-us)}},
				{at: 999_998 * us, give: []chk{{"k", fw2s, 1}}, wantLocal: true, want: []limits.Outcome{over(0, us)}},
				{at: 999_999 * us, give: []chk{{"k", fw2s, 1}}, want: []limits.Outcome{over(0, us)}},
				{at: sec, give: []chk{{"k", fw2s, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(1, sec)}},
			},
		},
		{
			name: "reset_counts_down",
			give: []step{
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw1s, 1}}, want: []limits.Outcome{over(0, sec)}},
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantLocal: true, want: []limits.Outcome{over(0, sec-us)}},
				{at: 400 * ms, give: []chk{{"k", fw1s, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 600*ms-us)}},
				{at: 900 * ms, give: []chk{{"k", fw1s, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 100*ms-us)}},
			},
		},
		{
			// A request that needs fewer hits than the one rejected may
			// fit: only the store can say.
			name: "smaller_probe_goes_to_the_store",
			give: []step{
				{at: 0, give: []chk{{"k", fw5m, 4}}, wantAdmitted: true},
				{at: sec, give: []chk{{"k", fw5m, 3}}, want: []limits.Outcome{over(1, 59*sec)}},
				{at: 2 * sec, give: []chk{{"k", fw5m, 3}}, wantLocal: true, want: []limits.Outcome{over(0, 58*sec-us)}},
				{at: 2 * sec, give: []chk{{"k", fw5m, 4}}, wantLocal: true},
				{at: 3 * sec, give: []chk{{"k", fw5m, 2}}, want: []limits.Outcome{over(1, 57*sec)}},
				{at: 3 * sec, give: []chk{{"k", fw5m, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(0, 57*sec)}},
				// Zero hits asks whether one more fits: probe 1.
				{at: 4 * sec, give: []chk{{"k", fw5m, 0}}, want: []limits.Outcome{over(0, 56*sec)}},
				{at: 4 * sec, give: []chk{{"k", fw5m, 0}}, wantLocal: true},
				{at: 4 * sec, give: []chk{{"k", fw5m, 1}}, wantLocal: true},
				{at: 4 * sec, give: []chk{{"k", fw5m, 7}}, wantLocal: true},
				{at: 60 * sec, give: []chk{{"k", fw5m, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(4, 60*sec)}},
			},
		},
		{
			name: "zero_hits_probe_is_one",
			give: []step{
				// 2 hits never fit a limit of 1; a zero-hit check (probe 1)
				// still does.
				{at: 0, give: []chk{{"k", fw1s, 2}}, want: []limits.Outcome{over(1, sec)}},
				{at: 0, give: []chk{{"k", fw1s, 0}}, wantAdmitted: true, want: []limits.Outcome{ok(1, sec)}},
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw1s, 0}}, want: []limits.Outcome{over(0, sec)}},
				{at: 0, give: []chk{{"k", fw1s, 0}}, wantLocal: true},
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantLocal: true},
			},
		},
		{
			name: "shadow_checks_are_never_cached",
			give: []step{
				{at: 0, give: []chk{{"k", sh1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", sh1s, 1}}, wantAdmitted: true, want: []limits.Outcome{over(0, sec)}},
				{at: 0, give: []chk{{"k", sh1s, 1}}, wantAdmitted: true, want: []limits.Outcome{over(0, sec)}},
				{at: 0, give: []chk{{"k", sh1s, 1}, {"j", fw2s, 1}}, wantAdmitted: true},
				// Not even for an enforced limit with the same key and
				// numbers, which the shadow outcome would be right about.
				{at: 0, give: []chk{{"k", fw1s, 1}}, want: []limits.Outcome{over(0, sec)}},
			},
		},
		{
			name: "every_over_check_is_recorded",
			give: []step{
				{at: 0, give: []chk{{"a", fw1s, 1}, {"b", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"a", fw1s, 1}, {"b", fw1s, 1}}, want: []limits.Outcome{over(0, sec), over(0, sec)}},
				{at: 0, give: []chk{{"b", fw1s, 1}}, wantLocal: true},
				{at: 0, give: []chk{{"a", fw1s, 1}}, wantLocal: true},
			},
		},
		{
			name: "shadow_check_not_denied_by_an_enforced_entry",
			give: []step{
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw1s, 1}}},
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantLocal: true},
				{at: 0, give: []chk{{"k", sh1s, 1}}, wantAdmitted: true, want: []limits.Outcome{over(0, sec)}},
			},
		},
		{
			// Limits match by numbers: a reloaded limit with other numbers
			// (same key: same algorithm and window) is not answered from
			// the old entry, an override with the same numbers is.
			name: "limits_match_by_numbers",
			give: []step{
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw1s, 1}}},
				{at: 0, give: []chk{{"k", fw1sAgain, 1}}, wantLocal: true},
				{at: 0, give: []chk{{"k", fw2s, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(0, sec)}},
			},
		},
		{
			// The cache does not know the other checks' states: they
			// report unknown, not "0 left, resets now".
			name: "other_checks_of_a_local_answer_report_unknown",
			give: []step{
				{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", fw1s, 1}}},
				{at: 200 * ms, give: []chk{{"j", fw2s, 1}, {"k", fw1s, 1}, {"s", sh1s, 1}}, wantLocal: true,
					want: []limits.Outcome{{Unknown: true}, over(0, 800*ms-us), {Unknown: true}}},
				// They consumed nothing.
				{at: 200 * ms, give: []chk{{"j", fw2s, 2}}, wantAdmitted: true, want: []limits.Outcome{ok(0, 800*ms)}},
			},
		},
		{
			// A check over only because an earlier check of its batch on
			// the same key took hits says nothing about requests without
			// that check.
			name: "same_key_twice_in_a_batch",
			give: []step{
				{at: 0, give: []chk{{"k", fw4m, 2}, {"k", fw4m, 3}}},
				{at: 0, give: []chk{{"k", fw4m, 3}}, wantAdmitted: true, want: []limits.Outcome{ok(1, 60*sec)}},
				{at: 0, give: []chk{{"k", fw4m, 1}, {"k", fw4m, 1}}},
				{at: 0, give: []chk{{"k", fw4m, 1}}, wantAdmitted: true},
				// Its own probe is enough to deny locally.
				{at: 0, give: []chk{{"k", fw4m, 1}}},
				{at: 0, give: []chk{{"k", fw4m, 0}, {"k", fw4m, 1}}, wantLocal: true},
			},
		},
		{
			name: "zero_requests_limit",
			give: []step{
				{at: 0, give: []chk{{"k", ban, 0}}, want: []limits.Outcome{over(0, sec)}},
				{at: 500 * ms, give: []chk{{"k", ban, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 500*ms-us)}},
				{at: sec, give: []chk{{"k", ban, 1}}, want: []limits.Outcome{over(0, sec)}},
			},
		},
		{
			name: "token_bucket",
			give: []step{
				{at: 0, give: []chk{{"k", tb, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", tb, 1}}, want: []limits.Outcome{over(0, sec)}},
				{at: 999 * ms, give: []chk{{"k", tb, 1}}, wantLocal: true},
				{at: sec, give: []chk{{"k", tb, 1}}, wantAdmitted: true},
			},
		},
		{
			name: "leaky_bucket",
			give: []step{
				{at: 0, give: []chk{{"k", lb, 1}}, wantAdmitted: true},
				{at: 0, give: []chk{{"k", lb, 1}}, want: []limits.Outcome{over(0, 500*ms)}},
				{at: 499 * ms, give: []chk{{"k", lb, 1}}, wantLocal: true},
				{at: 500 * ms, give: []chk{{"k", lb, 1}}, wantAdmitted: true},
			},
		},
		{
			name: "sliding_window",
			give: []step{
				{at: 0, give: []chk{{"k", sw, 2}}, wantAdmitted: true},
				// 2 × (1 − elapsed) + 1 ≤ 2 at elapsed ≥ 0.5 s into the next window.
				{at: 500 * ms, give: []chk{{"k", sw, 1}}, want: []limits.Outcome{over(0, sec)}},
				{at: 1499 * ms, give: []chk{{"k", sw, 1}}, wantLocal: true},
				{at: 1500 * ms, give: []chk{{"k", sw, 1}}, wantAdmitted: true},
			},
		},
		{
			name: "sliding_log",
			give: []step{
				{at: 0, give: []chk{{"k", sl, 1}}, wantAdmitted: true},
				{at: 300 * ms, give: []chk{{"k", sl, 1}}, wantAdmitted: true},
				{at: 600 * ms, give: []chk{{"k", sl, 1}}, want: []limits.Outcome{over(0, 400*ms)}},
				{at: 999 * ms, give: []chk{{"k", sl, 1}}, wantLocal: true},
				{at: sec, give: []chk{{"k", sl, 1}}, wantAdmitted: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, sp, clk := newCache(DenyCacheOptions{}, tt.latency)
			runSteps(t, c, sp, clk, tt.give)
		})
	}
}

// TestDenyCacheCoarseTicks: the cache stays exact for limits so large
// that they count time in ticks of 10 or 100 µs. The store floors its
// clock to a tick, so its reset, measured from a time inside a tick, can
// be up to a tick longer than the wait; the cache's entry ends one tick
// before that reset, so a request at the first moment the store admits
// one reaches the store. Each rejection that is recorded comes from a
// time inside a tick; the last steps are the entry's end and the store's
// first admission.
func TestDenyCacheCoarseTicks(t *testing.T) {
	// 10^8 per minute: 10 µs ticks.
	fw := mustLimit(t, limits.FixedWindow, 100_000_000, limits.UnitMinute, 0)
	sw := mustLimit(t, limits.SlidingWindow, 100_000_000, limits.UnitMinute, 0)
	sl := mustLimit(t, limits.SlidingLog, 100_000_000, limits.UnitMinute, 0)
	// 10 per hour with a burst of 10^7: 100 µs ticks; one hit refills in
	// 360 s, all of them in a million hours.
	tb := mustLimit(t, limits.TokenBucket, 10, limits.UnitHour, 10_000_000)
	lb := mustLimit(t, limits.LeakyBucket, 10, limits.UnitHour, 10_000_000)
	for _, c := range []struct {
		l    *limits.Limit
		tick int64
	}{{fw, 10}, {sw, 10}, {sl, 10}, {tb, 100}, {lb, 100}} {
		if c.l.Tick() != c.tick {
			t.Fatalf("%s ticks %d µs, want %d: the cases test nothing", c.l.Algorithm, c.l.Tick(), c.tick)
		}
	}
	const h = time.Hour
	// bucket: the limit empties at 0; 250 µs is 50 µs into a tick, and a
	// hit fits at 360 s. The store's reset, 360 s − 200 µs, runs from the
	// tick's start; the entry ends a tick before 250 µs plus that.
	bucket := func(l *limits.Limit) []step {
		return []step{
			{at: 0, give: []chk{{"k", l, 10_000_000}}, wantAdmitted: true, want: []limits.Outcome{ok(0, 1_000_000*h)}},
			{at: 250 * us, give: []chk{{"k", l, 1}}, want: []limits.Outcome{over(0, 360*sec-200*us)}},
			{at: 250 * us, give: []chk{{"k", l, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 360*sec-300*us)}},
			{at: 360*sec - 51*us, give: []chk{{"k", l, 1}}, wantLocal: true, want: []limits.Outcome{over(0, us)}},
			{at: 360*sec - 50*us, give: []chk{{"k", l, 1}}, want: []limits.Outcome{over(0, 100*us)}},
			{at: 360 * sec, give: []chk{{"k", l, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(0, 1_000_000*h)}},
		}
	}
	// window: the limit fills at 0 and frees at 60 s; 15 µs is inside a
	// tick. Fixed windows and logs count in µs, but the entry still ends
	// a tick early.
	window := func(l *limits.Limit) []step {
		return []step{
			{at: 0, give: []chk{{"k", l, 100_000_000}}, wantAdmitted: true},
			{at: 15 * us, give: []chk{{"k", l, 1}}, want: []limits.Outcome{over(0, 60*sec-15*us)}},
			{at: 30 * sec, give: []chk{{"k", l, 1}}, wantLocal: true, want: []limits.Outcome{over(0, 30*sec-10*us)}},
			{at: 60*sec - 11*us, give: []chk{{"k", l, 1}}, wantLocal: true, want: []limits.Outcome{over(0, us)}},
			{at: 60*sec - 10*us, give: []chk{{"k", l, 1}}, want: []limits.Outcome{over(0, 10*us)}},
			{at: 60 * sec, give: []chk{{"k", l, 1}}, wantAdmitted: true, want: []limits.Outcome{ok(99_999_999, 60*sec)}},
		}
	}
	tests := []struct {
		name string
		give []step
	}{
		{name: "fixed_window", give: window(fw)},
		{name: "sliding_log", give: window(sl)},
		{
			// The window fills at 0. 25 µs into the next one is 5 µs into
			// a tick: the previous window weighs all but 2 ticks, and a
			// whole limit more fits once it has left, at 120 s.
			name: "sliding_window",
			give: []step{
				{at: 0, give: []chk{{"k", sw, 100_000_000}}, wantAdmitted: true},
				{at: 60*sec + 25*us, give: []chk{{"k", sw, 100_000_000}}, want: []limits.Outcome{over(33, 60*sec-20*us)}},
				{at: 90 * sec, give: []chk{{"k", sw, 100_000_000}}, wantLocal: true, want: []limits.Outcome{over(0, 30*sec-5*us)}},
				{at: 120*sec - 6*us, give: []chk{{"k", sw, 100_000_000}}, wantLocal: true, want: []limits.Outcome{over(0, us)}},
				{at: 120*sec - 5*us, give: []chk{{"k", sw, 100_000_000}}, want: []limits.Outcome{over(99_999_983, 10*us)}},
				{at: 120 * sec, give: []chk{{"k", sw, 100_000_000}}, wantAdmitted: true, want: []limits.Outcome{ok(0, 120*sec)}},
			},
		},
		{name: "token_bucket", give: bucket(tb)},
		{name: "leaky_bucket", give: bucket(lb)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, sp, clk := newCache(DenyCacheOptions{}, 0)
			runSteps(t, c, sp, clk, tt.give)
		})
	}
}

// TestDenyCacheMatchesTheStore runs every shared store case (usage
// charges, refunds, reservations and requests in flight among them)
// through a cache and, in lockstep, through a plain memory store: the
// verdicts must agree, batches the store answered must agree in full,
// and a local answer's over checks must be over in the store too, with
// no later a reset and no more remaining.
func TestDenyCacheMatchesTheStore(t *testing.T) {
	var local int
	for _, tt := range storetest.All() {
		if tt.Name == "reservation/ledger_full" {
			// 10,000 reservations of one key: the store's bound on its
			// ledger, which the cache passes through, and a minute of
			// the memory store's time twice over.
			continue
		}
		t.Run(tt.Name, func(t *testing.T) {
			c, sp, clk := newCache(DenyCacheOptions{}, 0)
			plain := memory.New(memory.Options{Now: clk.Now})
			for i, st := range tt.Steps {
				clk.Set(storetest.Epoch.Add(st.At))
				want, got := st.Batch(tt.Name), st.Batch(tt.Name)
				if err := plain.Apply(context.Background(), want); err != nil {
					t.Fatal(err)
				}
				calls := sp.calls.Load()
				if err := c.Apply(context.Background(), got); err != nil {
					t.Fatal(err)
				}
				compareBatches(t, fmt.Sprintf("step %d (at %v)", i, st.At), want, got, sp.calls.Load() == calls)
				if sp.calls.Load() == calls {
					local++
				}
			}
		})
	}
	if local == 0 {
		t.Error("no batch was answered locally: the test proves nothing")
	}
}

// compareBatches checks a batch the cache answered (got) against the same
// batch answered by a store without a cache (want).
func compareBatches(t *testing.T, where string, want, got *limits.Batch, local bool) {
	t.Helper()
	if got.Admitted != want.Admitted {
		t.Errorf("%s: admitted = %v, store without cache says %v", where, got.Admitted, want.Admitted)
	}
	if !local {
		if diff := cmp.Diff(want.Outcomes, got.Outcomes); diff != "" {
			t.Errorf("%s: outcomes of a batch the store answered (-without +with cache):\n%s", where, diff)
		}
		return
	}
	for j, o := range got.Outcomes {
		if !o.Over {
			if o != (limits.Outcome{Unknown: true}) {
				t.Errorf("%s: check %d: a check the cache does not know reports %+v, want only Unknown", where, j, o)
			}
			continue
		}
		w := want.Outcomes[j]
		if got.Checks[j].Limit.Shadow || !w.Over || o.Reset > w.Reset || o.Remaining > w.Remaining {
			t.Errorf("%s: check %d: cache says %+v, store without cache %+v", where, j, o, w)
		}
	}
}

func TestDenyCacheClear(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, sp, clk := newCache(DenyCacheOptions{}, 0)
	runSteps(t, c, sp, clk, []step{
		{at: 0, give: []chk{{"k", fw1s, 1}}, wantAdmitted: true},
		{at: 0, give: []chk{{"k", fw1s, 1}}},
		{at: 0, give: []chk{{"j", fw1s, 1}}, wantAdmitted: true},
		{at: 0, give: []chk{{"j", fw1s, 1}}},
		{at: 0, give: []chk{{"k", fw1s, 1}}, wantLocal: true},
	})
	if got := c.Len(); got != 2 {
		t.Fatalf("Len() = %d, want 2", got)
	}
	c.Clear()
	if got := c.Len(); got != 0 {
		t.Errorf("Len() after Clear = %d, want 0", got)
	}
	calls := sp.calls.Load()
	b := batchOf(chk{"k", fw1s, 1})
	if err := c.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if sp.calls.Load() == calls || b.Admitted {
		t.Errorf("after Clear: called store = %v, admitted = %v; want true, false", sp.calls.Load() != calls, b.Admitted)
	}
	if got := c.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1 after recording again", got)
	}
}

// A Clear while the store is deciding (a reload mid-request) must win:
// the answer, made under the old rules, is not recorded.
func TestDenyCacheClearDuringCall(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, sp, _ := newCache(DenyCacheOptions{}, 0)
	for range 2 {
		if err := c.Apply(context.Background(), batchOf(chk{"k", fw1s, 1})); err != nil {
			t.Fatal(err)
		}
	}
	c.Clear()
	sp.during = c.Clear
	b := batchOf(chk{"k", fw1s, 1})
	if err := c.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if b.Admitted || !b.Outcomes[0].Over {
		t.Fatalf("store admitted the third request: %+v", b)
	}
	if got := c.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0: an answer from before Clear was recorded", got)
	}
}

// keysInShard returns n key names (for batchOf) whose keys for l land in
// one shard of c.
func keysInShard(c *DenyCache, l *limits.Limit, n int) []string {
	var names []string
	var first *denyShard
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprint("key", i)
		key := storetest.Key("deny", name, l)
		if sh := c.shards.of(key); first == nil || sh == first {
			first = sh
			names = append(names, name)
		}
	}
	return names
}

func TestDenyCacheMaxEntries(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, sp, clk := newCache(DenyCacheOptions{MaxEntries: 2}, 0)
	names := keysInShard(c, fw1s, 4)
	overAt := func(at time.Duration, name string) []step {
		return []step{
			{at: at, give: []chk{{name, fw1s, 1}}, wantAdmitted: true},
			{at: at, give: []chk{{name, fw1s, 1}}},
		}
	}
	var steps []step
	steps = append(steps, overAt(0, names[0])...)
	steps = append(steps, overAt(100*ms, names[1])...)
	steps = append(steps, overAt(200*ms, names[2])...)
	steps = append(steps,
		// Full: the third key was not recorded, the first two still are.
		step{at: 300 * ms, give: []chk{{names[2], fw1s, 1}}},
		step{at: 300 * ms, give: []chk{{names[0], fw1s, 1}}, wantLocal: true},
		step{at: 300 * ms, give: []chk{{names[1], fw1s, 1}}, wantLocal: true},
	)
	// In the next second the first two have expired: recording a key of
	// their shard sweeps them out and makes room.
	steps = append(steps, overAt(1500*ms, names[3])...)
	steps = append(steps, step{at: 1500 * ms, give: []chk{{names[3], fw1s, 1}}, wantLocal: true})
	runSteps(t, c, sp, clk, steps)
	if got := c.Dropped(); got != 2 {
		t.Errorf("Dropped() = %d, want 2 (the third key, twice)", got)
	}
	if got := c.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1 after the sweep", got)
	}
}

// While the cache has room, a shard sweeps its expired entries when it
// records, at most once per denySweepEvery.
func TestDenyCacheSweepsOnWrite(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, _, clk := newCache(DenyCacheOptions{}, 0)
	names := keysInShard(c, fw1s, 3)
	tests := []struct {
		at      time.Duration
		name    string
		wantLen int
	}{
		// Each name is over from at until the end of that second.
		{at: 0, name: names[0], wantLen: 1},
		// names[0] has expired: the shard's first sweep drops it.
		{at: 1200 * ms, name: names[1], wantLen: 1},
		// names[1] has expired, but the shard swept less than a second
		// ago.
		{at: 2100 * ms, name: names[2], wantLen: 2},
		// Now it sweeps again: only names[2] and names[0] are live.
		{at: 2300 * ms, name: names[0], wantLen: 2},
	}
	for _, tt := range tests {
		for i, wantAdmitted := range []bool{true, false} {
			clk.Set(storetest.Epoch.Add(tt.at))
			b := batchOf(chk{tt.name, fw1s, 1})
			if err := c.Apply(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			if b.Admitted != wantAdmitted {
				t.Fatalf("at %v, %s request %d: admitted = %v", tt.at, tt.name, i, b.Admitted)
			}
		}
		if got := c.Len(); got != tt.wantLen {
			t.Errorf("at %v: Len() = %d, want %d", tt.at, got, tt.wantLen)
		}
	}
}

func TestDenyCacheCanceledContextAnswersLocally(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, sp, _ := newCache(DenyCacheOptions{}, 0)
	for range 2 {
		if err := c.Apply(context.Background(), batchOf(chk{"k", fw1s, 1})); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := sp.calls.Load()
	b := batchOf(chk{"k", fw1s, 1})
	if err := c.Apply(ctx, b); err != nil {
		t.Fatalf("Apply: %v, want a local answer", err)
	}
	if sp.calls.Load() != calls || b.Admitted || !b.Outcomes[0].Over {
		t.Errorf("canceled context: store called = %v, batch = %+v", sp.calls.Load() != calls, b)
	}
}

func TestDenyCacheStoreErrorRecordsNothing(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, sp, _ := newCache(DenyCacheOptions{}, 0)
	sp.err = fmt.Errorf("redis: %w", limits.ErrStoreUnavailable)
	b := batchOf(chk{"k", fw1s, 1})
	b.Outcomes = []limits.Outcome{over(0, sec)} // what a confused store might leave
	if err := c.Apply(context.Background(), b); !errors.Is(err, limits.ErrStoreUnavailable) {
		t.Fatalf("Apply = %v, want the store's error", err)
	}
	if got := c.Len(); got != 0 {
		t.Errorf("Len() = %d after an error, want 0", got)
	}
}

// The locally denied path, and the cache's part of the pass-through path,
// must not allocate.
func TestDenyCacheAllocs(t *testing.T) {
	fw1s := mustLimit(t, limits.FixedWindow, 1, limits.UnitSecond, 0)
	c, _, _ := newCache(DenyCacheOptions{}, 0)
	over := batchOf(chk{"j", fw1s, 0}, chk{"k", fw1s, 1})
	for range 3 {
		if err := c.Apply(context.Background(), over); err != nil {
			t.Fatal(err)
		}
	}
	if c.Answered() != 1 {
		t.Fatalf("Answered() = %d, want 1", c.Answered())
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Apply(context.Background(), over) }); n != 0 {
		t.Errorf("locally denied batch: %v allocs, want 0", n)
	}

	pass := NewDenyCache(admitAll{}, DenyCacheOptions{})
	// Make the cache non-empty, so the pass-through path looks keys up.
	pass.insert(&over.Checks[1], storetest.Epoch.Add(time.Hour), storetest.Epoch, 0, 0)
	b := batchOf(chk{"a", fw1s, 1}, chk{"b", fw1s, 1})
	b.Outcomes = make([]limits.Outcome, 0, 2)
	if n := testing.AllocsPerRun(100, func() { _ = pass.Apply(context.Background(), b) }); n != 0 {
		t.Errorf("pass-through batch: %v allocs, want 0", n)
	}
}

// admitAll is a store that admits everything, to measure the cache alone.
type admitAll struct{}

func (admitAll) Apply(_ context.Context, b *limits.Batch) error {
	b.Outcomes = b.Outcomes[:len(b.Checks)]
	for i := range b.Outcomes {
		b.Outcomes[i] = limits.Outcome{Remaining: 1}
	}
	b.Admitted = true
	return nil
}

// Under concurrency a cache in front of the memory store must neither
// over- nor under-admit: the shared checks for exactness.
func TestDenyCacheConcurrent(t *testing.T) {
	newStores := func(t *testing.T, clk *storetest.Clock) []limits.Store {
		c := NewDenyCache(memory.New(memory.Options{Now: clk.Now}), DenyCacheOptions{Now: clk.Now})
		return []limits.Store{c}
	}
	t.Run("exact", func(t *testing.T) { storetest.RunExact(t, newStores, 64, 20) })
	t.Run("tiers", func(t *testing.T) { storetest.RunTiers(t, newStores, 64) })
	t.Run("in_flight", func(t *testing.T) { storetest.RunInFlight(t, newStores, 64, 20) })
}

// BenchmarkDenyCache measures the cache alone: a locally denied batch,
// and what the cache adds to a batch it passes on (to a store that admits
// everything at once), empty and holding other keys.
func BenchmarkDenyCache(b *testing.B) {
	fw1s := mustLimit(b, limits.FixedWindow, 1, limits.UnitSecond, 0)
	fw1h := mustLimit(b, limits.FixedWindow, 1, limits.UnitHour, 0)
	// A clock that stands still, inside the hour of the entries below.
	now := func() time.Time { return storetest.Epoch }
	full := func() *DenyCache {
		c := NewDenyCache(admitAll{}, DenyCacheOptions{Now: now})
		for i := range 1000 {
			key := storetest.Key("deny", fmt.Sprint("over", i), fw1h)
			c.insert(&limits.Check{Key: key, Limit: fw1h, Hits: 1}, storetest.Epoch.Add(time.Hour), storetest.Epoch, 0, 0)
		}
		return c
	}
	run := func(b *testing.B, s limits.Store, batch *limits.Batch) {
		batch.Outcomes = make([]limits.Outcome, 0, len(batch.Checks))
		b.ReportAllocs()
		for b.Loop() {
			_ = s.Apply(context.Background(), batch)
		}
	}
	b.Run("denied/1_check", func(b *testing.B) {
		run(b, full(), batchOf(chk{"over7", fw1h, 1}))
	})
	b.Run("denied/3_checks", func(b *testing.B) {
		run(b, full(), batchOf(chk{"a", fw1s, 1}, chk{"b", fw1s, 1}, chk{"over7", fw1h, 1}))
	})
	b.Run("pass/no_cache", func(b *testing.B) {
		run(b, admitAll{}, batchOf(chk{"a", fw1s, 1}, chk{"b", fw1s, 1}, chk{"c", fw1h, 1}))
	})
	b.Run("pass/empty_cache", func(b *testing.B) {
		run(b, NewDenyCache(admitAll{}, DenyCacheOptions{Now: now}), batchOf(chk{"a", fw1s, 1}, chk{"b", fw1s, 1}, chk{"c", fw1h, 1}))
	})
	b.Run("pass/1000_entries", func(b *testing.B) {
		run(b, full(), batchOf(chk{"a", fw1s, 1}, chk{"b", fw1s, 1}, chk{"c", fw1h, 1}))
	})
	// Every goroutine on one hot key: the shard's read lock is shared.
	b.Run("denied/parallel_hot_key", func(b *testing.B) {
		c := full()
		b.SetParallelism(64)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			batch := batchOf(chk{"over7", fw1h, 1})
			for pb.Next() {
				_ = c.Apply(context.Background(), batch)
			}
		})
	})
	b.Run("denied/parallel_many_keys", func(b *testing.B) {
		c := full()
		var seq atomic.Int64
		b.SetParallelism(64)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			batch := batchOf(chk{fmt.Sprint("over", seq.Add(1)%1000), fw1h, 1})
			for pb.Next() {
				_ = c.Apply(context.Background(), batch)
			}
		})
	})
}

// TestDenyCacheRefunds: a refund (limits.Check.Refund) of a key the
// cache holds as over goes to the store, and the cache forgets the key,
// so the next request is decided by the store, which admits it; a
// refund a Forget reports (another sidecar's) does the same.
func TestDenyCacheRefunds(t *testing.T) {
	fw2 := mustLimit(t, limits.FixedWindow, 2, limits.UnitHour, 0)
	c, sp, clk := newCache(DenyCacheOptions{}, 0)
	refund := func(hits uint64) *limits.Batch {
		b := batchOf(chk{"k", fw2, hits})
		b.Checks[0].Refund = true
		return b
	}
	runSteps(t, c, sp, clk, []step{
		{give: []chk{{"k", fw2, 2}}, wantAdmitted: true},
		{give: []chk{{"k", fw2, 1}}, want: []limits.Outcome{over(0, time.Hour)}},
		{give: []chk{{"k", fw2, 1}}, wantLocal: true},
	})
	calls := sp.calls.Load()
	b := refund(1)
	if err := c.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if sp.calls.Load() != calls+1 || !b.Admitted || b.Outcomes[0] != ok(1, time.Hour) {
		t.Fatalf("refund: store calls %d, outcome %+v, admitted %v; want it sent to the store, admitted, OK with 1 left", sp.calls.Load()-calls, b.Outcomes, b.Admitted)
	}
	for i, wantAdmitted := range []bool{true, false} {
		b := batchOf(chk{"k", fw2, 1})
		if err := c.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if b.Admitted != wantAdmitted {
			t.Errorf("request %d after the refund: admitted %v, want %v", i, b.Admitted, wantAdmitted)
		}
	}
	// Another sidecar's refund, told by Forget, on the store behind the
	// cache's back.
	other := refund(1)
	if err := sp.next.Apply(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if !c.Forget(other.Checks[0].Key) {
		t.Fatal("Forget found no entry for the key the cache held as over")
	}
	b = batchOf(chk{"k", fw2, 1})
	if err := c.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if !b.Admitted {
		t.Errorf("after another sidecar's refund: %+v, want admitted by the store", b.Outcomes)
	}
}

// TestDenyCacheForgetDuringCall: a call under way when a refund is told
// (Forget) may have read the key before the refund: it records nothing
// in the key's shard.
func TestDenyCacheForgetDuringCall(t *testing.T) {
	fw1 := mustLimit(t, limits.FixedWindow, 1, limits.UnitHour, 0)
	c, sp, _ := newCache(DenyCacheOptions{}, 0)
	if err := c.Apply(context.Background(), batchOf(chk{"k", fw1, 1})); err != nil {
		t.Fatal(err)
	}
	key := storetest.Key("deny", "k", fw1)
	sp.during = func() { c.Forget(key) }
	b := batchOf(chk{"k", fw1, 1})
	if err := c.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if b.Admitted {
		t.Fatalf("store admitted the second request: %+v", b)
	}
	if got := c.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0: an answer read before a refund was recorded after it", got)
	}
}
