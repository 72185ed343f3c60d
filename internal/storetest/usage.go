package storetest

import (
	"slices"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// use is a usage charge of hits on key.
func use(key string, l *limits.Limit, hits uint64) Check {
	return Check{Key: key, Limit: l, Hits: hits, Usage: true}
}

// UsageCases returns the cases of usage charges (limits.Check.Usage):
// hits that count in full, past the limit, whatever the batch's verdict.
// Every expectation follows from limits.Limit.EvaluateUsage.
func UsageCases() []Case {
	fw10 := mustLimit(limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
	fw1 := mustLimit(limits.FixedWindow, 1, limits.UnitSecond, 1, 0)
	sw10 := mustLimit(limits.SlidingWindow, 10, limits.UnitSecond, 1, 0)
	sl3 := mustLimit(limits.SlidingLog, 3, limits.UnitSecond, 10, 0)
	tb := mustLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 5)
	lb := mustLimit(limits.LeakyBucket, 10, limits.UnitSecond, 1, 5)
	ban := mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0)

	bucket := func(l *limits.Limit) []Step {
		// 10/s with burst 5: 12 tokens leave 7 owed; one more token
		// fits after 8 have refilled, 800 ms.
		return []Step{
			{At: 0, Checks: []Check{use("k", l, 12)}, Admitted: false, Want: []limits.Outcome{over(0, 800*ms)}},
			{At: 500 * ms, Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, 300*ms)}},
			{At: 800 * ms, Checks: []Check{use("k", l, 0)}, Admitted: true, Want: []limits.Outcome{ok(1, 400*ms)}},
			// A charge that fits counts as an admission does.
			{At: 800 * ms, Checks: []Check{use("k", l, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			// Debt past 2^52 (scaled by the window, here 10^6 ticks)
			// stops there: the wait is that of 2^52 ticks of backlog.
			{At: 800 * ms, Checks: []Check{use("k", l, 1<<40)}, Want: []limits.Outcome{over(0, saturatedWait(l))}},
		}
	}

	return slices.Concat(envoyUsageCases(), []Case{
		{Name: "usage/fixed_window/counts_past_the_limit", Steps: []Step{
			{At: 0, Checks: []Check{use("k", fw10, 6)}, Admitted: true, Want: []limits.Outcome{ok(4, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 0)}, Admitted: true, Want: []limits.Outcome{ok(4, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 6)}, Want: []limits.Outcome{over(0, sec)}},
			{At: 500 * ms, Checks: []Check{use("k", fw10, 0)}, Want: []limits.Outcome{over(0, 500*ms)}},
			// Ordinary hits see the debt too.
			{At: 500 * ms, Checks: one("k", fw10, 1), Want: []limits.Outcome{over(0, 500*ms)}},
			{At: sec, Checks: []Check{use("k", fw10, 0)}, Admitted: true, Want: []limits.Outcome{ok(10, sec)}},
		}},
		{Name: "usage/fixed_window/larger_than_the_limit", Steps: []Step{
			{At: 0, Checks: []Check{use("k", fw10, 5000)}, Want: []limits.Outcome{over(0, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 0)}, Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "usage/sliding_window/debt_weighs_in_the_next_window", Steps: []Step{
			// 15 of 10: the window after waits until 15 × (1 − x) + 1
			// <= 10, x = 0.4.
			{At: 0, Checks: []Check{use("k", sw10, 15)}, Want: []limits.Outcome{over(0, 1400*ms)}},
			{At: sec, Checks: []Check{use("k", sw10, 0)}, Want: []limits.Outcome{over(0, 400*ms)}},
			{At: 1400 * ms, Checks: []Check{use("k", sw10, 0)}, Admitted: true, Want: []limits.Outcome{ok(1, 600*ms)}},
		}},
		// Far past the limit: counts stop at 2^52 and every product the
		// window forms stays exact.
		{Name: "usage/sliding_window/huge_debt", Steps: []Step{
			{At: 0, Checks: []Check{use("k", sw10, 1<<40)}, Want: []limits.Outcome{over(0, 2*sec)}},
			{At: 0, Checks: []Check{use("k", sw10, 1<<52)}, Want: []limits.Outcome{over(0, 2*sec)}},
			{At: 1500 * ms, Checks: one("k", sw10, 1), Want: []limits.Outcome{over(0, 500*ms)}},
		}},
		{Name: "usage/fixed_window/huge_debt", Steps: []Step{
			{At: 0, Checks: []Check{use("k", fw10, 1<<52)}, Want: []limits.Outcome{over(0, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 1<<52)}, Want: []limits.Outcome{over(0, sec)}},
			{At: sec, Checks: one("k", fw10, 1), Admitted: true, Want: []limits.Outcome{ok(9, sec)}},
		}},
		{Name: "usage/sliding_log/records_and_merges", Steps: []Step{
			{At: 0, Checks: []Check{use("k", sl3, 2)}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			// Room for 1: the 5 are an entry of their own, over.
			{At: sec, Checks: []Check{use("k", sl3, 5)}, Want: []limits.Outcome{over(0, 10*sec)}},
			// No room at all: the hit joins the newest entry, moved to now.
			{At: 2 * sec, Checks: []Check{use("k", sl3, 1)}, Want: []limits.Outcome{over(0, 10*sec)}},
			// The first entry has left; the merged 6 leave at 12 s.
			{At: 10 * sec, Checks: []Check{use("k", sl3, 0)}, Want: []limits.Outcome{over(0, 2*sec)}},
			{At: 12 * sec, Checks: []Check{use("k", sl3, 0)}, Admitted: true, Want: []limits.Outcome{ok(3, 0)}},
		}},
		{Name: "usage/token_bucket/debt_refills", Steps: bucket(tb)},
		{Name: "usage/leaky_bucket/debt_refills", Steps: bucket(lb)},
		{Name: "usage/ban_counts_nothing", Steps: []Step{
			{At: 0, Checks: []Check{use("k", ban, 3)}, Want: []limits.Outcome{over(0, sec)}},
		}},
		// A rejected request consumes nothing but its usage charges.
		{Name: "usage/charged_in_a_rejected_request", Steps: []Step{
			{At: 0, Checks: one("a", fw1, 1), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: fw1, Hits: 1}, use("b", fw10, 4)},
				Want: []limits.Outcome{over(0, sec), ok(6, sec)}},
			{At: 0, Checks: []Check{use("b", fw10, 0)}, Admitted: true, Want: []limits.Outcome{ok(6, sec)}},
		}},
		// On one key, an ordinary check after a usage charge of a
		// rejected request consumes nothing, and reports what the charge
		// left. (A Cluster that reserved the request's hits and refunded
		// them can only report the state after the request's usage
		// charges, so the shared case puts the charge first.)
		{Name: "usage/same_key_in_a_rejected_request", Steps: []Step{
			{At: 0, Checks: one("a", fw1, 1), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 3), {Key: "k", Limit: fw10, Hits: 2}, {Key: "a", Limit: fw1, Hits: 1}},
				Want: []limits.Outcome{ok(7, sec), ok(7, sec), over(0, sec)}},
			{At: 0, Checks: []Check{use("k", fw10, 0)}, Admitted: true, Want: []limits.Outcome{ok(7, sec)}},
		}},
		// A usage charge that goes over rejects its request, so the
		// ordinary check beside it consumes nothing.
		{Name: "usage/over_rejects_the_ordinary", Steps: []Step{
			{At: 0, Checks: []Check{use("u", fw10, 11), {Key: "o", Limit: fw10, Hits: 1}},
				Want: []limits.Outcome{over(0, sec), ok(10, sec)}},
			{At: 0, Checks: one("o", fw10, 0), Admitted: true, Want: []limits.Outcome{ok(10, sec)}},
		}},
		// A shadow usage charge counts, and rejects nothing.
		{Name: "usage/shadow", Steps: []Step{
			{At: 0, Checks: []Check{use("k", shadow(fw10), 11)}, Admitted: true, Want: []limits.Outcome{over(0, sec)}},
			{At: 0, Checks: []Check{use("k", shadow(fw10), 0)}, Admitted: true, Want: []limits.Outcome{over(0, sec)}},
		}},
	})
}

// saturatedWait is how long a bucket l whose backlog stopped at 2^52
// ticks of its scale waits for one hit.
func saturatedWait(l *limits.Limit) time.Duration {
	wt := uint64(l.Window().Microseconds() / l.Tick())
	need := uint64(1<<52) + wt - l.Burst*wt
	return time.Duration((need+l.Requests-1)/l.Requests*uint64(l.Tick())) * us
}
