package storetest

import (
	"math"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
	day = 24 * time.Hour
)

func ok(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Remaining: rem, Reset: reset}
}

func over(rem uint64, reset time.Duration) limits.Outcome {
	return limits.Outcome{Over: true, Remaining: rem, Reset: reset}
}

func one(key string, l *limits.Limit, hits uint64) []Check {
	return []Check{{Key: key, Limit: l, Hits: hits}}
}

// Cases returns the shared algorithm cases. Every expectation follows from
// the semantics documented on limits.Algorithm and limits.Outcome.
func Cases() []Case {
	fw3s := mustLimit(limits.FixedWindow, 3, limits.UnitSecond, 1, 0)
	fw10m := mustLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	fw2s := mustLimit(limits.FixedWindow, 2, limits.UnitSecond, 1, 0)
	fw2per30s := mustLimit(limits.FixedWindow, 2, limits.UnitSecond, 30, 0)
	sw10m := mustLimit(limits.SlidingWindow, 10, limits.UnitMinute, 1, 0)
	sw4s := mustLimit(limits.SlidingWindow, 4, limits.UnitSecond, 1, 0)
	sl3per10s := mustLimit(limits.SlidingLog, 3, limits.UnitSecond, 10, 0)
	tb := mustLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 5)
	lb := mustLimit(limits.LeakyBucket, 10, limits.UnitSecond, 1, 5)
	lb3s := mustLimit(limits.LeakyBucket, 3, limits.UnitSecond, 1, 1)
	tb1s := mustLimit(limits.TokenBucket, 1, limits.UnitSecond, 1, 0)
	a5 := mustLimit(limits.FixedWindow, 5, limits.UnitSecond, 1, 0)
	b1 := mustLimit(limits.FixedWindow, 1, limits.UnitSecond, 1, 0)
	fw10s := mustLimit(limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
	shadow1 := shadow(b1)

	bucketSteps := func(l *limits.Limit) []Step {
		// 10/s with burst 5: a fresh key takes 5 at once, then one per
		// 100 ms. Reset on OK is the time to refill completely.
		return []Step{
			{At: 0, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(4, 100*ms)}},
			{At: 0, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(3, 200*ms)}},
			{At: 0, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(2, 300*ms)}},
			{At: 0, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(1, 400*ms)}},
			{At: 0, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			{At: 0, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 100*ms)}},
			{At: 50 * ms, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 50*ms)}},
			{At: 100 * ms, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			{At: 1100 * ms, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(4, 100*ms)}},
			// More hits than the burst can never fit: nothing to wait
			// for but a full bucket.
			{At: 1100 * ms, Checks: one("k", l, 6), Want: []limits.Outcome{over(4, 100*ms)}},
			{At: 1100 * ms, Checks: one("k", l, 4), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
		}
	}

	return []Case{
		{Name: "fixed_window/counts_down_and_resets", Steps: []Step{
			{At: 0, Checks: one("k", fw3s, 1), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: one("k", fw3s, 1), Admitted: true, Want: []limits.Outcome{ok(1, sec)}},
			{At: 250 * ms, Checks: one("k", fw3s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 750*ms)}},
			{At: 500 * ms, Checks: one("k", fw3s, 1), Want: []limits.Outcome{over(0, 500*ms)}},
			{At: 999_999 * us, Checks: one("k", fw3s, 1), Want: []limits.Outcome{over(0, us)}},
			{At: sec, Checks: one("k", fw3s, 1), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
		}},
		{Name: "fixed_window/hits_addend", Steps: []Step{
			{At: 0, Checks: one("k", fw10m, 4), Admitted: true, Want: []limits.Outcome{ok(6, 60*sec)}},
			{At: sec, Checks: one("k", fw10m, 4), Admitted: true, Want: []limits.Outcome{ok(2, 59*sec)}},
			// 4 more would make 12: rejected whole, not partly counted.
			{At: 2 * sec, Checks: one("k", fw10m, 4), Want: []limits.Outcome{over(2, 58*sec)}},
			{At: 3 * sec, Checks: one("k", fw10m, 2), Admitted: true, Want: []limits.Outcome{ok(0, 57*sec)}},
		}},
		{Name: "fixed_window/zero_hits_checks_without_consuming", Steps: []Step{
			{At: 0, Checks: one("k", fw2s, 0), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: one("k", fw2s, 0), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: one("k", fw2s, 2), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: one("k", fw2s, 0), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "fixed_window/unit_multiplier", Steps: []Step{
			{At: 0, Checks: one("k", fw2per30s, 1), Admitted: true, Want: []limits.Outcome{ok(1, 30*sec)}},
			{At: 29 * sec, Checks: one("k", fw2per30s, 1), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 29500 * ms, Checks: one("k", fw2per30s, 1), Want: []limits.Outcome{over(0, 500*ms)}},
			{At: 30 * sec, Checks: one("k", fw2per30s, 1), Admitted: true, Want: []limits.Outcome{ok(1, 30*sec)}},
		}},
		{Name: "fixed_window/long_units_align_to_epoch", Steps: []Step{
			{At: 3 * day, Checks: one("w", mustLimit(limits.FixedWindow, 5, limits.UnitWeek, 1, 0), 1), Admitted: true, Want: []limits.Outcome{ok(4, 4*day)}},
			{At: day, Checks: one("m", mustLimit(limits.FixedWindow, 5, limits.UnitMonth, 1, 0), 1), Admitted: true, Want: []limits.Outcome{ok(4, 29*day)}},
			{At: day, Checks: one("y", mustLimit(limits.FixedWindow, 5, limits.UnitYear, 1, 0), 1), Admitted: true, Want: []limits.Outcome{ok(4, 364*day)}},
		}},
		{Name: "ban/zero_requests_rejects_everything", Steps: []Step{
			{At: 10 * sec, Checks: one("f", mustLimit(limits.FixedWindow, 0, limits.UnitMinute, 1, 0), 1), Want: []limits.Outcome{over(0, 50*sec)}},
			{At: 10 * sec, Checks: one("f", mustLimit(limits.FixedWindow, 0, limits.UnitMinute, 1, 0), 0), Want: []limits.Outcome{over(0, 50*sec)}},
			{At: 10 * sec, Checks: one("t", mustLimit(limits.TokenBucket, 0, limits.UnitMinute, 1, 0), 1), Want: []limits.Outcome{over(0, 50*sec)}},
			{At: 10 * sec, Checks: one("s", mustLimit(limits.SlidingLog, 0, limits.UnitMinute, 1, 0), 1), Want: []limits.Outcome{over(0, 50*sec)}},
		}},
		{Name: "sliding_window/no_double_burst_across_the_edge", Steps: []Step{
			// 10 at the very end of window [0, 60s).
			{At: 59 * sec, Checks: one("k", sw10m, 10), Admitted: true, Want: []limits.Outcome{ok(0, 61*sec)}},
			// A fixed window would now admit 10 more. Here the previous
			// window still weighs 10 × (1 − 0/60): nothing fits until
			// 6 s in, when 10 × 54/60 + 1 = 10.
			{At: 60 * sec, Checks: one("k", sw10m, 1), Want: []limits.Outcome{over(0, 6*sec)}},
			{At: 65 * sec, Checks: one("k", sw10m, 1), Want: []limits.Outcome{over(0, sec)}},
			{At: 66 * sec, Checks: one("k", sw10m, 1), Admitted: true, Want: []limits.Outcome{ok(0, 114*sec)}},
			// Halfway: 10 × 30/60 + 1 = 6, so 4 more fit and a 5th does not.
			{At: 90 * sec, Checks: one("k", sw10m, 4), Admitted: true, Want: []limits.Outcome{ok(0, 90*sec)}},
			{At: 90 * sec, Checks: one("k", sw10m, 1), Want: []limits.Outcome{over(0, 6*sec)}},
		}},
		{Name: "sliding_window/more_hits_than_the_limit_never_fit", Steps: []Step{
			// 584943 × the year in µs overflows 64 bits: the check must not
			// multiply before comparing with the limit.
			{At: 0, Checks: one("k", mustLimit(limits.SlidingWindow, 1, limits.UnitYear, 1, 0), 584943), Want: []limits.Outcome{over(1, 730*day)}},
			{At: 0, Checks: one("k", mustLimit(limits.SlidingWindow, 1, limits.UnitYear, 1, 0), 1), Admitted: true, Want: []limits.Outcome{ok(0, 730*day)}},
		}},
		{Name: "sliding_window/retry_after_reaches_into_next_window", Steps: []Step{
			{At: 0, Checks: one("k", sw4s, 4), Admitted: true, Want: []limits.Outcome{ok(0, 2*sec)}},
			// Full until the current count has aged a quarter into the
			// next window: 4 × (1 − 0.25) + 1 = 4 at 1.25 s.
			{At: 500 * ms, Checks: one("k", sw4s, 1), Want: []limits.Outcome{over(0, 750*ms)}},
			{At: 1250 * ms, Checks: one("k", sw4s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 1750*ms)}},
			// Two windows later everything has aged out.
			{At: 3 * sec, Checks: one("k", sw4s, 4), Admitted: true, Want: []limits.Outcome{ok(0, 2*sec)}},
		}},
		{Name: "sliding_log/exact_count_in_last_window", Steps: []Step{
			{At: 0, Checks: one("k", sl3per10s, 1), Admitted: true, Want: []limits.Outcome{ok(2, 10*sec)}},
			{At: sec, Checks: one("k", sl3per10s, 1), Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: 2 * sec, Checks: one("k", sl3per10s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// Free again when the hit at 0 leaves the window at 10 s.
			{At: 3 * sec, Checks: one("k", sl3per10s, 1), Want: []limits.Outcome{over(0, 7*sec)}},
			{At: 10 * sec, Checks: one("k", sl3per10s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			{At: 10500 * ms, Checks: one("k", sl3per10s, 1), Want: []limits.Outcome{over(0, 500*ms)}},
			{At: 20 * sec, Checks: one("k", sl3per10s, 2), Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			// 2 more need both hits of 20 s gone.
			{At: 21 * sec, Checks: one("k", sl3per10s, 2), Want: []limits.Outcome{over(1, 9*sec)}},
			{At: 21 * sec, Checks: one("k", sl3per10s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
		{Name: "token_bucket/burst_then_rate", Steps: bucketSteps(tb)},
		{Name: "leaky_bucket/burst_then_rate", Steps: bucketSteps(lb)},
		{Name: "leaky_bucket/fractional_interval_never_over_admits", Steps: []Step{
			// 3/s: the 333 333.3 µs interval rounds up to whole µs.
			{At: 0, Checks: one("k", lb3s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 333334*us)}},
			{At: 0, Checks: one("k", lb3s, 1), Want: []limits.Outcome{over(0, 333334*us)}},
			{At: 333333 * us, Checks: one("k", lb3s, 1), Want: []limits.Outcome{over(0, us)}},
			{At: 333334 * us, Checks: one("k", lb3s, 1), Admitted: true, Want: []limits.Outcome{ok(0, 333334*us)}},
		}},
		{Name: "token_bucket/zero_hits", Steps: []Step{
			{At: 0, Checks: one("k", tb1s, 0), Admitted: true, Want: []limits.Outcome{ok(1, 0)}},
			{At: 0, Checks: one("k", tb1s, 1), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: one("k", tb1s, 0), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "all_or_nothing/rejected_request_consumes_nothing", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "a", Limit: a5, Hits: 1}, {Key: "b", Limit: b1, Hits: 1}}, Admitted: true, Want: []limits.Outcome{ok(4, sec), ok(0, sec)}},
			// b rejects; a reports what it has left without this request.
			{At: 0, Checks: []Check{{Key: "a", Limit: a5, Hits: 1}, {Key: "b", Limit: b1, Hits: 1}}, Want: []limits.Outcome{ok(4, sec), over(0, sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: a5, Hits: 1}, {Key: "b", Limit: b1, Hits: 1}}, Want: []limits.Outcome{ok(4, sec), over(0, sec)}},
			{At: 0, Checks: one("a", a5, 1), Admitted: true, Want: []limits.Outcome{ok(3, sec)}},
		}},
		{Name: "all_or_nothing/mixed_algorithms", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "a", Limit: tb, Hits: 1}, {Key: "b", Limit: sl3per10s, Hits: 3}, {Key: "c", Limit: sw4s, Hits: 1}}, Admitted: true,
				Want: []limits.Outcome{ok(4, 100*ms), ok(0, 10*sec), ok(3, 2*sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: tb, Hits: 1}, {Key: "b", Limit: sl3per10s, Hits: 1}, {Key: "c", Limit: sw4s, Hits: 1}},
				Want: []limits.Outcome{ok(4, 100*ms), over(0, 10*sec), ok(3, 2*sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: tb, Hits: 1}, {Key: "c", Limit: sw4s, Hits: 1}}, Admitted: true,
				Want: []limits.Outcome{ok(3, 200*ms), ok(2, 2*sec)}},
		}},
		{Name: "shadow/never_denies_and_previews_enforcement", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "s", Limit: shadow1, Hits: 1}, {Key: "e", Limit: fw10s, Hits: 1}}, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(9, sec)}},
			// The shadow limit is over but does not deny; it consumes
			// nothing, as enforcing it would not have.
			{At: 0, Checks: []Check{{Key: "s", Limit: shadow1, Hits: 1}, {Key: "e", Limit: fw10s, Hits: 1}}, Admitted: true, Want: []limits.Outcome{over(0, sec), ok(8, sec)}},
			{At: 0, Checks: []Check{{Key: "s", Limit: shadow1, Hits: 0}}, Admitted: true, Want: []limits.Outcome{over(0, sec)}},
			{At: sec, Checks: []Check{{Key: "s", Limit: shadow1, Hits: 1}}, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		{Name: "same_key_twice/sees_its_own_hits", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "x", Limit: fw3s, Hits: 2}, {Key: "x", Limit: fw3s, Hits: 2}}, Want: []limits.Outcome{ok(3, sec), over(1, sec)}},
			{At: 0, Checks: []Check{{Key: "x", Limit: fw3s, Hits: 1}, {Key: "x", Limit: fw3s, Hits: 2}}, Admitted: true, Want: []limits.Outcome{ok(2, sec), ok(0, sec)}},
			{At: 0, Checks: one("x", fw3s, 0), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "same_key_twice/later_check_that_consumes_nothing_keeps_earlier_hits", Steps: []Step{
			// The key is written from its last check's working copy even
			// when that check itself (zero hits, or an over shadow limit)
			// consumes nothing.
			{At: 0, Checks: []Check{{Key: "x", Limit: fw3s, Hits: 1}, {Key: "x", Limit: fw3s, Hits: 0}}, Admitted: true, Want: []limits.Outcome{ok(2, sec), ok(2, sec)}},
			{At: 0, Checks: []Check{{Key: "y", Limit: tb, Hits: 2}, {Key: "y", Limit: shadow(tb), Hits: 4}}, Admitted: true, Want: []limits.Outcome{ok(3, 200*ms), over(3, 100*ms)}},
			{At: 0, Checks: one("x", fw3s, 0), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: one("y", tb, 0), Admitted: true, Want: []limits.Outcome{ok(3, 200*ms)}},
		}},
		{Name: "sliding_window/reset_longer_than_a_duration_saturates", Steps: []Step{
			// Two windows of 280 years end later than a time.Duration can
			// say: the reset is the longest one, not a negative one.
			{At: 0, Checks: one("k", mustLimit(limits.SlidingWindow, 10, limits.UnitYear, 280, 0), 1), Admitted: true, Want: []limits.Outcome{ok(9, forever)}},
		}},
		{Name: "token_bucket/reload_lowers_the_burst_under_a_live_key", Steps: reloadedBucket(limits.TokenBucket)},
		{Name: "leaky_bucket/reload_lowers_the_burst_under_a_live_key", Steps: reloadedBucket(limits.LeakyBucket)},
		{Name: "sliding_window/coarse_tick", Steps: coarseSlidingWindow()},
		{Name: "token_bucket/coarse_tick", Steps: coarseBucket(limits.TokenBucket)},
		{Name: "leaky_bucket/coarse_tick", Steps: coarseBucket(limits.LeakyBucket)},
	}
}

// forever is the longest time.Duration, the reset of a limit that resets
// later than a time.Duration can say.
const forever = time.Duration(math.MaxInt64)

// reloadedBucket is a bucket whose rate and burst a reload changes while
// its key holds state: the key (algorithm and window) stays, and the
// state it holds is read under the new numbers. Never does more than
// the new burst remain or pass at once, and no reset is negative; the
// token bucket's stored level and the leaky bucket's backlog are capped
// at the new burst.
//
// The stores agree on every step here. They do not on one case this
// leaves out: after a reload that slows the refill (or raises a token
// bucket's burst), between the time the old numbers had the bucket full
// again and the key's next write, the memory store reads the key as
// fresh (its state expires then), while Redis reads the stored level
// under the new numbers until its key expires, up to that long again (at
// most a minute) later. Both stay within the new burst.
func reloadedBucket(alg limits.Algorithm) []Step {
	old := mustLimit(alg, 10, limits.UnitSecond, 1, 10)
	lower := mustLimit(alg, 10, limits.UnitSecond, 1, 5)
	// Refills twice as fast, with a burst of 2: one hit per 50 ms.
	faster := mustLimit(alg, 20, limits.UnitSecond, 1, 2)
	if alg == limits.TokenBucket {
		return []Step{
			// 9 tokens left of the old burst of 10.
			{At: 0, Checks: one("k", old, 1), Admitted: true, Want: []limits.Outcome{ok(9, 100*ms)}},
			// Under the burst of 5 they are 5: the bucket is full.
			{At: 0, Checks: one("k", lower, 0), Admitted: true, Want: []limits.Outcome{ok(5, 0)}},
			{At: 0, Checks: one("k", lower, 1), Admitted: true, Want: []limits.Outcome{ok(4, 100*ms)}},
			{At: 0, Checks: one("k", lower, 6), Want: []limits.Outcome{over(4, 100*ms)}},
			{At: 0, Checks: one("k", lower, 4), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			{At: 0, Checks: one("k", lower, 1), Want: []limits.Outcome{over(0, 100*ms)}},
			// An empty bucket of 2 refilling at 20/s has one token back
			// after 50 ms.
			{At: 50 * ms, Checks: one("k", faster, 1), Admitted: true, Want: []limits.Outcome{ok(0, 100*ms)}},
			{At: 50 * ms, Checks: one("k", faster, 1), Want: []limits.Outcome{over(0, 50*ms)}},
			{At: 50 * ms, Checks: one("k", faster, 3), Want: []limits.Outcome{over(0, 100*ms)}},
			// Slower again, read before the faster numbers had it full.
			{At: 100 * ms, Checks: one("k", mustLimit(alg, 2, limits.UnitSecond, 1, 2), 1), Want: []limits.Outcome{over(0, 450*ms)}},
		}
	}
	return []Step{
		// A backlog of 7 of the old burst of 10.
		{At: 0, Checks: one("k", old, 7), Admitted: true, Want: []limits.Outcome{ok(3, 700*ms)}},
		// Under the burst of 5 it is 5: the bucket is full.
		{At: 0, Checks: one("k", lower, 0), Want: []limits.Outcome{over(0, 100*ms)}},
		// It drains from 5, not from 7.
		{At: 300 * ms, Checks: one("k", lower, 1), Admitted: true, Want: []limits.Outcome{ok(2, 300*ms)}},
		{At: 300 * ms, Checks: one("k", lower, 6), Want: []limits.Outcome{over(2, 300*ms)}},
		// A backlog of 3 counts as the burst of 2, of which one hit
		// drains in 50 ms.
		{At: 350 * ms, Checks: one("k", faster, 1), Admitted: true, Want: []limits.Outcome{ok(0, 100*ms)}},
		{At: 350 * ms, Checks: one("k", faster, 1), Want: []limits.Outcome{over(0, 50*ms)}},
		{At: 350 * ms, Checks: one("k", faster, 3), Want: []limits.Outcome{over(0, 100*ms)}},
		// Slower again, read before the faster numbers had it drained.
		{At: 400 * ms, Checks: one("k", mustLimit(alg, 2, limits.UnitSecond, 1, 2), 1), Want: []limits.Outcome{over(0, 450*ms)}},
	}
}

// coarseSlidingWindow is a limit so large that it counts time in 10 µs
// ticks: the clock is floored to a tick, so a reset measured from a time
// inside a tick is up to a tick longer than the wait (which the deny
// cache allows for), and a request at the exact end of the wait passes.
func coarseSlidingWindow() []Step {
	l := mustLimit(limits.SlidingWindow, 100_000_000, limits.UnitMinute, 1, 0)
	if l.Tick() != 10 {
		panic("storetest: the coarse sliding window does not count in 10 µs ticks")
	}
	return []Step{
		{At: 0, Checks: one("k", l, 100_000_000), Admitted: true, Want: []limits.Outcome{ok(0, 120*sec)}},
		// 25 µs into the next window is 2 ticks: all of the previous
		// window but 2 ticks' worth weighs, and a whole limit more needs
		// it gone, at the end of this window. The reset counts from the
		// tick's start, 5 µs before now.
		{At: 60*sec + 25*us, Checks: one("k", l, 100_000_000), Want: []limits.Outcome{over(33, 60*sec-20*us)}},
		{At: 90 * sec, Checks: one("k", l, 100_000_000), Want: []limits.Outcome{over(50_000_000, 30*sec)}},
		{At: 120*sec - us, Checks: one("k", l, 100_000_000), Want: []limits.Outcome{over(99_999_983, 10*us)}},
		{At: 120 * sec, Checks: one("k", l, 100_000_000), Admitted: true, Want: []limits.Outcome{ok(0, 120*sec)}},
	}
}

// coarseBucket is a bucket of 10 per hour with a burst of 10^7, which
// counts time in 100 µs ticks: one hit refills in 360 s, all of them in
// a million hours.
func coarseBucket(alg limits.Algorithm) []Step {
	l := mustLimit(alg, 10, limits.UnitHour, 1, 10_000_000)
	if l.Tick() != 100 {
		panic("storetest: the coarse bucket does not count in 100 µs ticks")
	}
	return []Step{
		{At: 0, Checks: one("k", l, 10_000_000), Admitted: true, Want: []limits.Outcome{ok(0, 1_000_000*time.Hour)}},
		// 250 µs is 2 ticks, 50 µs into the third: a hit fits 360 s after
		// the bucket emptied, and the reset counts from the tick's start.
		{At: 250 * us, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 360*sec-200*us)}},
		{At: 300 * sec, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 60*sec)}},
		{At: 360*sec - us, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 100*us)}},
		{At: 360 * sec, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(0, 1_000_000*time.Hour)}},
	}
}

func granted(o limits.Outcome, g uint64, d time.Duration) limits.Outcome {
	o.Granted, o.GrantFor = g, d
	return o
}

// GrantCases returns the cases of limits.Limit.Grant: checks that ask for
// extra hits for a lease get as many as fit, at most half of what would
// remain, and only if the request is admitted.
func GrantCases() []Case {
	fw10s := mustLimit(limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
	sw10m := mustLimit(limits.SlidingWindow, 10, limits.UnitMinute, 1, 0)
	tb := mustLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 5)
	lb := mustLimit(limits.LeakyBucket, 10, limits.UnitSecond, 1, 5)
	ban := mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0)
	sl := mustLimit(limits.SlidingLog, 10, limits.UnitSecond, 1, 0)
	bucket := func(l *limits.Limit) []Step {
		// 10/s, burst 5: after 1 hit 4 remain, so 2 are granted, and
		// refilling 2 takes 200 ms.
		return []Step{
			{At: 0, Checks: one("k", l, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{granted(ok(2, 300*ms), 2, 200*ms)}},
			// 2 remain: 1 after the hit, half of which is nothing.
			{At: 0, Checks: one("k", l, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{ok(1, 400*ms)}},
			{At: 0, Checks: one("k", l, 2), Extra: []uint64{4}, Want: []limits.Outcome{over(1, 100*ms)}},
		}
	}
	return []Case{
		{Name: "grant/fixed_window_halves_what_remains", Steps: []Step{
			{At: 0, Checks: one("k", fw10s, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{granted(ok(5, sec), 4, sec)}},
			{At: 100 * ms, Checks: one("k", fw10s, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{granted(ok(2, 900*ms), 2, 900*ms)}},
			// One would remain after the hit: the last hit is never leased.
			{At: 200 * ms, Checks: one("k", fw10s, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{ok(1, 800*ms)}},
			{At: 300 * ms, Checks: one("k", fw10s, 2), Extra: []uint64{4}, Want: []limits.Outcome{over(1, 700*ms)}},
			// A new window: a zero-hit check may lease too.
			{At: sec, Checks: one("k", fw10s, 0), Extra: []uint64{3}, Admitted: true, Want: []limits.Outcome{granted(ok(7, sec), 3, sec)}},
		}},
		{Name: "grant/sliding_window_until_the_window_ends", Steps: []Step{
			{At: 15 * sec, Checks: one("k", sw10m, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{granted(ok(5, 105*sec), 4, 45*sec)}},
		}},
		{Name: "grant/token_bucket", Steps: bucket(tb)},
		{Name: "grant/leaky_bucket", Steps: bucket(lb)},
		{Name: "grant/nothing_when_rejected", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "k", Limit: fw10s, Hits: 1}, {Key: "b", Limit: ban, Hits: 1}}, Extra: []uint64{4, 0}, Want: []limits.Outcome{ok(10, sec), over(0, sec)}},
			{At: 0, Checks: one("k", fw10s, 1), Admitted: true, Want: []limits.Outcome{ok(9, sec)}},
		}},
		{Name: "grant/not_for_a_sliding_log", Steps: []Step{
			{At: 0, Checks: one("k", sl, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{ok(9, sec)}},
		}},
	}
}
