package storetest

import (
	"slices"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// back is a refund of hits on key: hits given back (limits.Check.Refund).
func back(key string, l *limits.Limit, hits uint64) Check {
	return Check{Key: key, Limit: l, Hits: hits, Refund: true}
}

// refundTwoKeys opens the names of the refund cases that need two keys
// held at once.
const refundTwoKeys = "refund/two_keys/"

// RefundCases returns the cases of refunds (limits.Check.Refund, Envoy's
// is_negative_hits): hits given back, whatever the batch's verdict, and
// never over. Every expectation follows from limits.Limit.Refund, and a
// refund's outcome is the limit's state after it.
func RefundCases() []Case {
	fw10 := mustLimit(limits.FixedWindow, 10, limits.UnitSecond, 1, 0)
	fw2h := mustLimit(limits.FixedWindow, 2, limits.UnitHour, 1, 0)
	sw10 := mustLimit(limits.SlidingWindow, 10, limits.UnitSecond, 1, 0)
	sl3 := mustLimit(limits.SlidingLog, 3, limits.UnitSecond, 10, 0)
	tb := mustLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 5)
	lb := mustLimit(limits.LeakyBucket, 10, limits.UnitSecond, 1, 5)
	ban := mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0)

	bucket := func(l *limits.Limit) []Step {
		// 10/s, burst 5: a token is 100 ms.
		return []Step{
			{At: 0, Checks: one("k", l, 5), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			{At: 0, Checks: []Check{back("k", l, 3)}, Admitted: true, Want: []limits.Outcome{ok(3, 200*ms)}},
			{At: 0, Checks: one("k", l, 3), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			// Never past full.
			{At: 100 * ms, Checks: []Check{back("k", l, 100)}, Admitted: true, Want: []limits.Outcome{ok(5, 0)}},
			{At: 100 * ms, Checks: one("k", l, 5), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
			{At: 100 * ms, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 100*ms)}},
			// Debt is repaid first: 12 more on an empty bucket leave 12
			// owed, one token fitting after 13 have refilled; 9 back
			// leave 3 owed, and one fits after 4.
			{At: 100 * ms, Checks: []Check{use("k", l, 12)}, Want: []limits.Outcome{over(0, 1300*ms)}},
			{At: 100 * ms, Checks: []Check{back("k", l, 9)}, Admitted: true, Want: []limits.Outcome{ok(0, 400*ms)}},
			{At: 400 * ms, Checks: one("k", l, 1), Want: []limits.Outcome{over(0, 100*ms)}},
			{At: 500 * ms, Checks: one("k", l, 1), Admitted: true, Want: []limits.Outcome{ok(0, 500*ms)}},
		}
	}

	return slices.Concat(envoyRefundCases(), []Case{
		{Name: "refund/fixed_window/gives_back", Steps: []Step{
			// Reserve 8 of 10, give 5 back: 7 are left.
			{At: 0, Checks: one("k", fw10, 8), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: 0, Checks: []Check{back("k", fw10, 5)}, Admitted: true, Want: []limits.Outcome{ok(7, sec)}},
			{At: 0, Checks: one("k", fw10, 7), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: one("k", fw10, 1), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "refund/fixed_window/fresh_counter", Steps: []Step{
			// Nothing was counted: nothing to give back, no credit.
			{At: 0, Checks: []Check{back("k", fw10, 5)}, Admitted: true, Want: []limits.Outcome{ok(10, sec)}},
			{At: 0, Checks: one("k", fw10, 10), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: one("k", fw10, 1), Want: []limits.Outcome{over(0, sec)}},
		}},
		{Name: "refund/fixed_window/earlier_window", Steps: []Step{
			// Hits of a window that has ended are gone with it.
			{At: 0, Checks: one("k", fw10, 8), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			{At: sec, Checks: one("k", fw10, 9), Admitted: true, Want: []limits.Outcome{ok(1, sec)}},
			{At: sec, Checks: []Check{back("k", fw10, 3)}, Admitted: true, Want: []limits.Outcome{ok(4, sec)}},
			{At: sec, Checks: []Check{back("k", fw10, 30)}, Admitted: true, Want: []limits.Outcome{ok(10, sec)}},
			{At: sec, Checks: one("k", fw10, 10), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		{Name: "refund/fixed_window/repays_debt_first", Steps: []Step{
			// 15 of 10 charged: 2 back still leave 3 owed, and the
			// refund says so, with OK; 10 back leave 3 counted.
			{At: 0, Checks: []Check{use("k", fw10, 15)}, Want: []limits.Outcome{over(0, sec)}},
			{At: 0, Checks: []Check{back("k", fw10, 2)}, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: one("k", fw10, 1), Want: []limits.Outcome{over(0, sec)}},
			{At: 0, Checks: []Check{back("k", fw10, 10)}, Admitted: true, Want: []limits.Outcome{ok(7, sec)}},
			{At: 0, Checks: one("k", fw10, 7), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		{Name: "refund/fixed_window/concurrency_pattern", Steps: []Step{
			// +1 at request time, -1 at stream end, 2 in flight.
			{At: 0, Checks: one("k", fw2h, 1), Admitted: true, Want: []limits.Outcome{ok(1, 3600*sec)}},
			{At: sec, Checks: one("k", fw2h, 1), Admitted: true, Want: []limits.Outcome{ok(0, 3599*sec)}},
			{At: 2 * sec, Checks: one("k", fw2h, 1), Want: []limits.Outcome{over(0, 3598*sec)}},
			{At: 3 * sec, Checks: []Check{back("k", fw2h, 1)}, Admitted: true, Want: []limits.Outcome{ok(1, 3597*sec)}},
			{At: 4 * sec, Checks: one("k", fw2h, 1), Admitted: true, Want: []limits.Outcome{ok(0, 3596*sec)}},
		}},
		{Name: refundTwoKeys + "whatever_the_batch_says", Steps: []Step{
			{At: 0, Checks: one("a", fw10, 8), Admitted: true, Want: []limits.Outcome{ok(2, sec)}},
			// A refund and a charge in one call: both count.
			{At: 0, Checks: []Check{back("a", fw10, 5), use("b", fw10, 3)}, Admitted: true, Want: []limits.Outcome{ok(7, sec), ok(7, sec)}},
			// A refund in a rejected request counts all the same, and is
			// not over; the rejected check consumes nothing.
			{At: 0, Checks: []Check{back("a", fw10, 7), one("b", fw10, 8)[0]}, Want: []limits.Outcome{ok(10, sec), over(7, sec)}},
			{At: 0, Checks: one("a", fw10, 10), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			// Refunds come first: the check after it on its key fits.
			{At: 0, Checks: []Check{one("a", fw10, 1)[0], back("a", fw10, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(0, sec)}},
		}},
		{Name: "refund/zero_requests", Steps: []Step{
			{At: 0, Checks: []Check{back("k", ban, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		{Name: "refund/sliding_window/current_then_previous", Steps: []Step{
			{At: 0, Checks: one("k", sw10, 8), Admitted: true, Want: []limits.Outcome{ok(2, 2*sec)}},
			{At: 0, Checks: []Check{back("k", sw10, 3)}, Admitted: true, Want: []limits.Outcome{ok(5, 2*sec)}},
			// A window later the 5 weigh fully: 3 back leave 2.
			{At: sec, Checks: []Check{back("k", sw10, 3)}, Admitted: true, Want: []limits.Outcome{ok(8, sec)}},
			{At: sec, Checks: one("k", sw10, 8), Admitted: true, Want: []limits.Outcome{ok(0, 2*sec)}},
			// 4 back: the current window's 8 go down to 4.
			{At: sec, Checks: []Check{back("k", sw10, 4)}, Admitted: true, Want: []limits.Outcome{ok(4, 2*sec)}},
			// Half a window on, the previous 2 weigh 1: all back, from
			// both windows, and nothing is left.
			{At: 1500 * ms, Checks: []Check{back("k", sw10, 6)}, Admitted: true, Want: []limits.Outcome{ok(10, 0)}},
			{At: 1500 * ms, Checks: one("k", sw10, 10), Admitted: true, Want: []limits.Outcome{ok(0, 1500*ms)}},
		}},
		{Name: "refund/sliding_log/newest_first", Steps: []Step{
			{At: 0, Checks: one("k", sl3, 1), Admitted: true, Want: []limits.Outcome{ok(2, 10*sec)}},
			{At: sec, Checks: one("k", sl3, 1), Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: 2 * sec, Checks: one("k", sl3, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// The entry of 2 s goes: the newest left is at 1 s.
			{At: 3 * sec, Checks: []Check{back("k", sl3, 1)}, Admitted: true, Want: []limits.Outcome{ok(1, 8*sec)}},
			{At: 3 * sec, Checks: one("k", sl3, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// 2 back: the entries of 3 s and 1 s.
			{At: 4 * sec, Checks: []Check{back("k", sl3, 2)}, Admitted: true, Want: []limits.Outcome{ok(2, 6*sec)}},
			// The first entry leaves at 10 s as it would have.
			{At: 10 * sec, Checks: one("k", sl3, 3), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
		{Name: "refund/sliding_log/cuts_an_entry", Steps: []Step{
			{At: 0, Checks: one("k", sl3, 3), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			{At: sec, Checks: []Check{back("k", sl3, 1)}, Admitted: true, Want: []limits.Outcome{ok(1, 9*sec)}},
			{At: sec, Checks: one("k", sl3, 1), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// 5 back of 3: all gone, nothing more.
			{At: 2 * sec, Checks: []Check{back("k", sl3, 5)}, Admitted: true, Want: []limits.Outcome{ok(3, 0)}},
			{At: 2 * sec, Checks: one("k", sl3, 3), Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
		{Name: "refund/token_bucket", Steps: bucket(tb)},
		{Name: "refund/leaky_bucket", Steps: bucket(lb)},
	})
}
