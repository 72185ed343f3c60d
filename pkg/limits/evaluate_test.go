package limits_test

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// The direct tests of each algorithm: Limit.Evaluate on a given state, at
// a given time, for given hits, must return exactly this outcome and, when
// the hits fit, exactly this next state. (When they do not, a store keeps
// the state it had, so the state Evaluate returns then is not checked.)
// The stores' shared cases (internal/storetest) test the same semantics
// through the stores; these pin the arithmetic itself, edge by edge.

const (
	us  = int64(1)
	ms  = 1000 * us
	sec = 1000 * ms
	// base is the start of every table's windows: a multiple of every
	// window below (1000 days).
	base = 1000 * 24 * 3600 * sec
)

// dur converts µs to a time.Duration.
func dur(µs int64) time.Duration { return time.Duration(µs) * time.Microsecond }

// forever is the longest time.Duration: the reset of a limit that resets
// later than a time.Duration can tell.
const forever = time.Duration(math.MaxInt64)

func ok(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Remaining: rem, Reset: reset}
}

func over(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Over: true, Remaining: rem, Reset: reset}
}

func newLimit(t *testing.T, alg limits.Algorithm, requests uint64, unit limits.Unit, mult, burst uint64) *limits.Limit {
	t.Helper()
	l, err := limits.NewLimit(alg, requests, unit, mult, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// evalTest is one call of Limit.Evaluate.
type evalTest struct {
	name     string
	limit    *limits.Limit
	give     limits.State
	now      int64 // µs since the epoch
	hits     uint64
	want     limits.Outcome
	wantNext limits.State // when !want.Over
}

func runEval(t *testing.T, tests []evalTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next := tt.limit.Evaluate(tt.give, tt.now, tt.hits)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			if !tt.want.Over {
				if diff := cmp.Diff(tt.wantNext, next, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("next state (-want +got):\n%s", diff)
				}
			}
			// Whatever the state: nothing remains beyond what the limit
			// holds, and no reset is negative.
			most := tt.limit.Requests
			if tt.limit.Algorithm.Bucketed() {
				most = tt.limit.Burst
			}
			if got.Remaining > most {
				t.Errorf("remaining %d, more than the limit holds (%d)", got.Remaining, most)
			}
			if got.Reset < 0 {
				t.Errorf("negative reset %v", got.Reset)
			}
		})
	}
}

func TestFixedWindow(t *testing.T) {
	l := newLimit(t, limits.FixedWindow, 3, limits.UnitSecond, 1, 0)
	huge := newLimit(t, limits.FixedWindow, 1<<50, limits.UnitSecond, 1, 0)
	full := limits.State{Start: base, Count: 3, Expire: base + sec}
	runEval(t, []evalTest{
		{name: "fresh_key", limit: l, now: base + 250*ms, hits: 1,
			want: ok(2, dur(750*ms)), wantNext: limits.State{Start: base, Count: 1, Expire: base + sec}},
		{name: "counts_within_the_window", limit: l, give: limits.State{Start: base, Count: 1, Expire: base + sec}, now: base + 500*ms, hits: 2,
			want: ok(0, dur(500*ms)), wantNext: full},
		{name: "full_window_rejects", limit: l, give: full, now: base + 500*ms, hits: 1,
			want: over(0, dur(500*ms))},
		{name: "last_microsecond_of_the_window", limit: l, give: full, now: base + sec - us, hits: 1,
			want: over(0, dur(us))},
		{name: "exact_window_edge_starts_afresh", limit: l, give: full, now: base + sec, hits: 1,
			want: ok(2, dur(sec)), wantNext: limits.State{Start: base + sec, Count: 1, Expire: base + 2*sec}},
		{name: "an_older_window_is_forgotten", limit: l, give: limits.State{Start: base - 5*sec, Count: 3, Expire: base - 4*sec}, now: base, hits: 3,
			want: ok(0, dur(sec)), wantNext: full},
		{name: "zero_hits_probe_consumes_nothing", limit: l, give: limits.State{Start: base, Count: 2, Expire: base + sec}, now: base + 100*ms,
			want: ok(1, dur(900*ms)), wantNext: limits.State{Start: base, Count: 2, Expire: base + sec}},
		{name: "zero_hits_probe_on_a_full_window", limit: l, give: full, now: base + 100*ms,
			want: over(0, dur(900*ms))},
		{name: "hits_beyond_what_remains_are_rejected_whole", limit: l, give: limits.State{Start: base, Count: 2, Expire: base + sec}, now: base, hits: 2,
			want: over(1, dur(sec))},
		{name: "more_hits_than_the_limit_never_fit", limit: l, now: base, hits: 4,
			want: over(3, dur(sec))},
		{name: "zero_requests_bans", limit: newLimit(t, limits.FixedWindow, 0, limits.UnitMinute, 1, 0), now: base + 10*sec,
			want: over(0, dur(50*sec))},
		{name: "huge_limit_counts_exactly", limit: huge, give: limits.State{Start: base, Count: 1<<50 - 1, Expire: base + sec}, now: base + 999*ms, hits: 1,
			want: ok(0, dur(ms)), wantNext: limits.State{Start: base, Count: 1 << 50, Expire: base + sec}},
		{name: "huge_limit_one_too_many", limit: huge, give: limits.State{Start: base, Count: 1<<50 - 1, Expire: base + sec}, now: base + 999*ms, hits: 2,
			want: over(1, dur(ms))},
	})
}

func TestSlidingWindow(t *testing.T) {
	// 4 per second: the previous window's hits weigh by the part of it
	// still inside the sliding window.
	l := newLimit(t, limits.SlidingWindow, 4, limits.UnitSecond, 1, 0)
	prevFull := limits.State{Start: base - sec, Count: 4, Expire: base + sec}
	// 10^8 per minute counts in 10 µs ticks: a window is 6·10^6 ticks.
	coarse := newLimit(t, limits.SlidingWindow, 100_000_000, limits.UnitMinute, 1, 0)
	if coarse.Tick() != 10 {
		t.Fatalf("tick %d µs, want 10: the coarse rows test nothing", coarse.Tick())
	}
	coarsePrev := limits.State{Start: base - 60*sec, Count: 100_000_000, Expire: base + 60*sec}
	// A window of 280 years: two of them are more than a time.Duration.
	longest := newLimit(t, limits.SlidingWindow, 10, limits.UnitYear, 280, 0)
	w := longest.Window().Microseconds()
	runEval(t, []evalTest{
		{name: "fresh_key", limit: l, now: base + 500*ms, hits: 1,
			want: ok(3, dur(1500*ms)), wantNext: limits.State{Start: base, Count: 1, Expire: base + 2*sec}},
		{name: "previous_window_weighs_by_what_is_left_of_it", limit: l, give: prevFull, now: base + 250*ms, hits: 1,
			want: ok(0, dur(1750*ms)), wantNext: limits.State{Start: base, Count: 1, Prev: 4, Expire: base + 2*sec}},
		// 4 × 0.8 + 1 > 4: wait until 4 × (1 − elapsed) + 1 = 4, 50 ms on.
		{name: "over_until_the_previous_window_has_aged_out_enough", limit: l, give: prevFull, now: base + 200*ms, hits: 1,
			want: over(0, dur(50*ms))},
		{name: "exact_window_edge_previous_weighs_whole", limit: l, give: prevFull, now: base, hits: 1,
			want: over(0, dur(250*ms))},
		// 4 hits of this window: full until they have aged a quarter
		// into the next one.
		{name: "current_hits_wait_into_the_next_window", limit: l, give: limits.State{Start: base, Count: 4, Expire: base + 2*sec}, now: base + 500*ms, hits: 1,
			want: over(0, dur(750*ms))},
		{name: "two_windows_on_all_is_forgotten", limit: l, give: limits.State{Start: base - 2*sec, Count: 4, Prev: 4, Expire: base}, now: base + 500*ms, hits: 4,
			want: ok(0, dur(1500*ms)), wantNext: limits.State{Start: base, Count: 4, Expire: base + 2*sec}},
		{name: "zero_hits_probe_consumes_nothing", limit: l, give: limits.State{Start: base, Count: 1, Expire: base + 2*sec}, now: base + 500*ms,
			want: ok(3, dur(1500*ms)), wantNext: limits.State{Start: base, Count: 1, Expire: base + 2*sec}},
		// Only the previous window holds hits: replenished when it has
		// left the sliding window, at the end of this one.
		{name: "zero_hits_probe_with_only_previous_hits", limit: l, give: limits.State{Start: base - sec, Count: 2, Expire: base + sec}, now: base + 500*ms,
			want: ok(3, dur(500*ms)), wantNext: limits.State{Start: base, Prev: 2, Expire: base + 2*sec}},
		{name: "more_hits_than_the_limit_never_fit", limit: l, now: base + 500*ms, hits: 5,
			want: over(4, dur(1500*ms))},
		{name: "zero_requests_bans", limit: newLimit(t, limits.SlidingWindow, 0, limits.UnitSecond, 1, 0), now: base + 300*ms, hits: 1,
			want: over(0, dur(700*ms))},
		// 15 µs into the window is one whole tick: the previous window
		// weighs (6·10^6 − 1) / 6·10^6, which leaves room for 16 hits.
		{name: "coarse_tick_floors_the_clock", limit: coarse, give: coarsePrev, now: base + 15*us, hits: 16,
			want: ok(0, dur(120*sec-15*us)), wantNext: limits.State{Start: base, Count: 16, Prev: 100_000_000, Expire: base + 120*sec}},
		// 17 fit from the next tick, at 20 µs: the reset counts whole
		// ticks from the tick now is in.
		{name: "coarse_tick_over_for_the_rest_of_the_tick", limit: coarse, give: coarsePrev, now: base + 19*us, hits: 17,
			want: over(16, dur(10*us))},
		{name: "huge_window_reset_saturates", limit: longest, now: base, hits: 1,
			want: ok(9, forever), wantNext: limits.State{Count: 1, Expire: 2 * w}},
	})
}

func TestSlidingLog(t *testing.T) {
	// 3 per 10 seconds, counted exactly over the last 10 seconds.
	l := newLimit(t, limits.SlidingLog, 3, limits.UnitSecond, 10, 0)
	three := []limits.LogEntry{{At: base, Hits: 1}, {At: base + sec, Hits: 1}, {At: base + 2*sec, Hits: 1}}
	runEval(t, []evalTest{
		{name: "fresh_key", limit: l, now: base, hits: 1,
			want: ok(2, dur(10*sec)), wantNext: limits.State{Log: three[:1], Expire: base + 10*sec}},
		{name: "counts_the_hits_of_the_last_window", limit: l, give: limits.State{Log: three[:2], Expire: base + 11*sec}, now: base + 2*sec, hits: 1,
			want: ok(0, dur(10*sec)), wantNext: limits.State{Log: three, Expire: base + 12*sec}},
		{name: "over_until_the_oldest_hit_leaves", limit: l, give: limits.State{Log: three, Expire: base + 12*sec}, now: base + 3*sec, hits: 1,
			want: over(0, dur(7*sec))},
		{name: "a_hit_exactly_one_window_old_has_left", limit: l, give: limits.State{Log: three, Expire: base + 12*sec}, now: base + 10*sec, hits: 1,
			want: ok(0, dur(10*sec)), wantNext: limits.State{Log: []limits.LogEntry{three[1], three[2], {At: base + 10*sec, Hits: 1}}, Expire: base + 20*sec}},
		{name: "enough_of_the_oldest_hits_must_leave", limit: l, give: limits.State{Log: []limits.LogEntry{{At: base, Hits: 2}, {At: base + sec, Hits: 1}}, Expire: base + 11*sec}, now: base + 2*sec, hits: 2,
			want: over(0, dur(8*sec))},
		{name: "zero_hits_probe_consumes_nothing", limit: l, give: limits.State{Log: three[:1], Expire: base + 10*sec}, now: base + sec,
			want: ok(2, dur(9*sec)), wantNext: limits.State{Log: three[:1], Expire: base + 10*sec}},
		{name: "every_hit_aged_out", limit: l, give: limits.State{Log: []limits.LogEntry{{At: base, Hits: 3}}, Expire: base + 10*sec}, now: base + 10*sec, hits: 3,
			want: ok(0, dur(10*sec)), wantNext: limits.State{Log: []limits.LogEntry{{At: base + 10*sec, Hits: 3}}, Expire: base + 20*sec}},
		{name: "more_hits_than_the_limit_never_fit", limit: l, now: base, hits: 4,
			want: over(3, dur(10*sec))},
		{name: "zero_requests_bans", limit: newLimit(t, limits.SlidingLog, 0, limits.UnitSecond, 10, 0), now: base + 4*sec, hits: 1,
			want: over(0, dur(6*sec))},
	})
}

// bucketTests are the cases that the token and the leaky bucket share:
// they decide alike and differ only in what they store, the free level
// (token) or the backlog (leaky), both scaled by the window in ticks.
// level turns a backlog into what alg stores.
func bucketTests(t *testing.T, alg limits.Algorithm) []evalTest {
	// 10 per second, burst 5: a hit costs 10^6 scaled units and each µs
	// gives back 10, so one hit refills in 100 ms.
	l := newLimit(t, alg, 10, limits.UnitSecond, 1, 5)
	level := func(backlog uint64) uint64 {
		if alg == limits.TokenBucket {
			return 5_000_000 - backlog
		}
		return backlog
	}
	empty := limits.State{Start: base, Count: level(5_000_000), Expire: base + 500*ms}
	// 10 per hour with a burst of 10^8 counts in 1 ms ticks: a window is
	// 3.6·10^6 ticks and one hit refills in 360 s.
	coarse := newLimit(t, alg, 10, limits.UnitHour, 1, 100_000_000)
	if coarse.Tick() != 1000 {
		t.Fatalf("tick %d µs, want 1000: the coarse rows test nothing", coarse.Tick())
	}
	const capacity = 100_000_000 * 3_600_000 // scaled
	coarseLevel := func(backlog uint64) uint64 {
		if alg == limits.TokenBucket {
			return capacity - backlog
		}
		return backlog
	}
	// Empty at tick base/1000, full again 10^8 × 360 s later.
	coarseEmpty := limits.State{Start: base / 1000, Count: coarseLevel(capacity), Expire: base + 36_000_000_000*sec}
	return []evalTest{
		{name: "fresh_key", limit: l, now: base, hits: 1,
			want: ok(4, dur(100*ms)), wantNext: limits.State{Start: base, Count: level(1_000_000), Expire: base + 100*ms}},
		{name: "the_burst_at_once", limit: l, now: base, hits: 5,
			want: ok(0, dur(500*ms)), wantNext: empty},
		{name: "empty_waits_one_interval", limit: l, give: empty, now: base, hits: 1,
			want: over(0, dur(100*ms))},
		{name: "refills_continuously", limit: l, give: empty, now: base + 50*ms, hits: 1,
			want: over(0, dur(50*ms))},
		{name: "one_interval_on_one_hit_fits", limit: l, give: empty, now: base + 100*ms, hits: 1,
			want: ok(0, dur(500*ms)), wantNext: limits.State{Start: base + 100*ms, Count: level(5_000_000), Expire: base + 600*ms}},
		{name: "past_its_expiry_the_state_is_a_fresh_key", limit: l, give: empty, now: base + 500*ms, hits: 1,
			want: ok(4, dur(100*ms)), wantNext: limits.State{Start: base + 500*ms, Count: level(1_000_000), Expire: base + 600*ms}},
		// A full bucket is no state at all.
		{name: "zero_hits_probe_on_a_full_bucket", limit: l, now: base,
			want: ok(5, 0), wantNext: limits.State{}},
		{name: "zero_hits_probe_consumes_nothing", limit: l, give: limits.State{Start: base, Count: level(2_000_000), Expire: base + 200*ms}, now: base,
			want: ok(3, dur(200*ms)), wantNext: limits.State{Start: base, Count: level(2_000_000), Expire: base + 200*ms}},
		{name: "zero_hits_probe_on_an_empty_bucket", limit: l, give: empty, now: base,
			want: over(0, dur(100*ms))},
		// Nothing to wait for but a full bucket, and a fresh one is full.
		{name: "more_hits_than_the_burst_never_fit", limit: l, now: base, hits: 6,
			want: over(5, 0)},
		{name: "more_hits_than_the_burst_wait_for_a_full_bucket", limit: l, give: limits.State{Start: base, Count: level(2_000_000), Expire: base + 200*ms}, now: base, hits: 6,
			want: over(3, dur(200*ms))},
		{name: "zero_requests_bans", limit: newLimit(t, alg, 0, limits.UnitSecond, 1, 5), now: base + 300*ms, hits: 1,
			want: over(0, dur(700*ms))},
		// Half a tick in, the clock is floored to the tick: one hit fits
		// 360 s after the tick began, and the reset counts from there.
		{name: "coarse_tick_empty", limit: coarse, give: coarseEmpty, now: base + 500*us, hits: 1,
			want: over(0, dur(360*sec))},
		{name: "coarse_tick_a_microsecond_early", limit: coarse, give: coarseEmpty, now: base + 360*sec - us, hits: 1,
			want: over(0, dur(ms))},
		// Full again in 10^8 × 360 s, more than a time.Duration holds.
		{name: "coarse_tick_one_interval_on_reset_saturates", limit: coarse, give: coarseEmpty, now: base + 360*sec, hits: 1,
			want: ok(0, forever), wantNext: limits.State{Start: base/1000 + 360_000, Count: coarseLevel(capacity), Expire: base + 360*sec + 36_000_000_000*sec}},
	}
}

func TestTokenBucket(t *testing.T) {
	l := newLimit(t, limits.TokenBucket, 10, limits.UnitSecond, 1, 5)
	// A reload lowered the burst from 10 to 5: the key holds 9 tokens of
	// the old burst. Never more than the new burst remains, and the
	// subtraction of the level from the new capacity cannot underflow.
	lowered := limits.State{Start: base, Count: 9_000_000, Expire: base + 100*ms}
	runEval(t, append(bucketTests(t, limits.TokenBucket), []evalTest{
		{name: "lowered_burst_caps_the_stored_level", limit: l, give: lowered, now: base, hits: 1,
			want: ok(4, dur(100*ms)), wantNext: limits.State{Start: base, Count: 4_000_000, Expire: base + 100*ms}},
		{name: "lowered_burst_probe", limit: l, give: lowered, now: base,
			want: ok(5, 0), wantNext: limits.State{}},
		{name: "lowered_burst_more_than_the_new_burst", limit: l, give: lowered, now: base, hits: 6,
			want: over(5, 0)},
	}...))
}

func TestLeakyBucket(t *testing.T) {
	l := newLimit(t, limits.LeakyBucket, 10, limits.UnitSecond, 1, 5)
	// A reload lowered the burst from 10 to 5: the key holds a backlog of
	// 7 hits. It counts as the new burst's 5, which drain from there.
	lowered := limits.State{Start: base, Count: 7_000_000, Expire: base + 700*ms}
	runEval(t, append(bucketTests(t, limits.LeakyBucket), []evalTest{
		{name: "lowered_burst_caps_the_stored_backlog", limit: l, give: lowered, now: base, hits: 1,
			want: over(0, dur(100*ms))},
		{name: "lowered_burst_drains_from_the_new_burst", limit: l, give: lowered, now: base + 300*ms, hits: 1,
			want: ok(2, dur(300*ms)), wantNext: limits.State{Start: base + 300*ms, Count: 3_000_000, Expire: base + 600*ms}},
		{name: "lowered_burst_more_than_the_new_burst", limit: l, give: lowered, now: base, hits: 6,
			want: over(0, dur(500*ms))},
	}...))
}

// TestGrantsLike: hits granted ahead under a limit (a lease, an RLQS
// grant) stand under another only if it counts alike and grants as much
// at a time; leases and RLQS grants share this one answer.
func TestGrantsLike(t *testing.T) {
	base := func() *limits.Limit {
		l := newLimit(t, limits.TokenBucket, 100, limits.UnitMinute, 1, 10)
		l.Lease = 5
		return l
	}
	tests := []struct {
		name   string
		change func(*limits.Limit) *limits.Limit
		want   bool
	}{
		{"same numbers, another limit", func(l *limits.Limit) *limits.Limit { return l }, true},
		{"other requests", func(l *limits.Limit) *limits.Limit { l.Requests = 101; return l }, false},
		{"other burst", func(l *limits.Limit) *limits.Limit { l.Burst = 11; return l }, false},
		{"other lease", func(l *limits.Limit) *limits.Limit { l.Lease = 6; return l }, false},
		{"other algorithm", func(*limits.Limit) *limits.Limit {
			l := newLimit(t, limits.LeakyBucket, 100, limits.UnitMinute, 1, 10)
			l.Lease = 5
			return l
		}, false},
		{"other window", func(*limits.Limit) *limits.Limit {
			l := newLimit(t, limits.TokenBucket, 100, limits.UnitMinute, 2, 10)
			l.Lease = 5
			return l
		}, false},
		{"none", func(*limits.Limit) *limits.Limit { return nil }, false},
	}
	for _, tt := range tests {
		if got := base().GrantsLike(tt.change(base())); got != tt.want {
			t.Errorf("%s: GrantsLike = %v, want %v", tt.name, got, tt.want)
		}
	}
}
