package storetest

import (
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
			{At: 0, Checks: []Check{{"a", a5, 1}, {"b", b1, 1}}, Admitted: true, Want: []limits.Outcome{ok(4, sec), ok(0, sec)}},
			// b rejects; a reports what it has left without this request.
			{At: 0, Checks: []Check{{"a", a5, 1}, {"b", b1, 1}}, Want: []limits.Outcome{ok(4, sec), over(0, sec)}},
			{At: 0, Checks: []Check{{"a", a5, 1}, {"b", b1, 1}}, Want: []limits.Outcome{ok(4, sec), over(0, sec)}},
			{At: 0, Checks: one("a", a5, 1), Admitted: true, Want: []limits.Outcome{ok(3, sec)}},
		}},
		{Name: "all_or_nothing/mixed_algorithms", Steps: []Step{
			{At: 0, Checks: []Check{{"a", tb, 1}, {"b", sl3per10s, 3}, {"c", sw4s, 1}}, Admitted: true,
				Want: []limits.Outcome{ok(4, 100*ms), ok(0, 10*sec), ok(3, 2*sec)}},
			{At: 0, Checks: []Check{{"a", tb, 1}, {"b", sl3per10s, 1}, {"c", sw4s, 1}},
				Want: []limits.Outcome{ok(4, 100*ms), over(0, 10*sec), ok(3, 2*sec)}},
			{At: 0, Checks: []Check{{"a", tb, 1}, {"c", sw4s, 1}}, Admitted: true,
				Want: []limits.Outcome{ok(3, 200*ms), ok(2, 2*sec)}},
		}},
		{Name: "shadow/never_denies_and_previews_enforcement", Steps: []Step{
			{At: 0, Checks: []Check{{"s", shadow1, 1}, {"e", fw10s, 1}}, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(9, sec)}},
			// The shadow limit is over but does not deny; it consumes
			// nothing, as enforcing it would not have.
			{At: 0, Checks: []Check{{"s", shadow1, 1}, {"e", fw10s, 1}}, Admitted: true, Want: []limits.Outcome{over(0, sec), ok(8, sec)}},
			{At: 0, Checks: []Check{{"s", shadow1, 0}}, Admitted: true, Want: []limits.Outcome{over(0, sec)}},
			{At: sec, Checks: []Check{{"s", shadow1, 1}}, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		{Name: "same_key_twice/sees_its_own_hits", Steps: []Step{
			{At: 0, Checks: []Check{{"x", fw3s, 2}, {"x", fw3s, 2}}, Want: []limits.Outcome{ok(3, sec), over(1, sec)}},
			{At: 0, Checks: []Check{{"x", fw3s, 1}, {"x", fw3s, 2}}, Admitted: true, Want: []limits.Outcome{ok(2, sec), ok(0, sec)}},
			{At: 0, Checks: one("x", fw3s, 0), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "same_key_twice/later_check_that_consumes_nothing_keeps_earlier_hits", Steps: []Step{
			// The key is written from its last check's working copy even
			// when that check itself (zero hits, or an over shadow limit)
			// consumes nothing.
			{At: 0, Checks: []Check{{"x", fw3s, 1}, {"x", fw3s, 0}}, Admitted: true, Want: []limits.Outcome{ok(2, sec), ok(2, sec)}},
			{At: 0, Checks: []Check{{"y", tb, 2}, {"y", shadow(tb), 4}}, Admitted: true, Want: []limits.Outcome{ok(3, 200*ms), over(3, 100*ms)}},
			{At: 0, Checks: one("x", fw3s, 0), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: one("y", tb, 0), Admitted: true, Want: []limits.Outcome{ok(3, 200*ms)}},
		}},
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
			{At: 0, Checks: []Check{{"k", fw10s, 1}, {"b", ban, 1}}, Extra: []uint64{4, 0}, Want: []limits.Outcome{ok(10, sec), over(0, sec)}},
			{At: 0, Checks: one("k", fw10s, 1), Admitted: true, Want: []limits.Outcome{ok(9, sec)}},
		}},
		{Name: "grant/not_for_a_sliding_log", Steps: []Step{
			{At: 0, Checks: one("k", sl, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{ok(9, sec)}},
		}},
	}
}
