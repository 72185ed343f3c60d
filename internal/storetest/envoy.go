package storetest

import (
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// The cases in this file replay, at the store, the calls Envoy makes for
// a usage-based limit (Envoy Gateway's rate-limit cost, Envoy AI
// Gateway's token budgets) and for one that gives hits back (a
// hits_addend with is_negative_hits): a check of 0 at request time, and
// at stream end a call whose descriptors each carry what the response
// used, or what it gives back. The engine makes a descriptor's own
// hits_addend a usage charge (limits.Check.Usage) and is_negative_hits a
// refund (limits.Check.Refund); cmd/ratelimit-sidecar proves that once,
// end to end.

const hour = time.Hour

// usageManyKeys opens the names of the usage cases that charge several
// keys at once, and see what each has left after.
const usageManyKeys = "usage/many_keys/"

// hourly returns a limit of requests an hour of alg (a bucket's burst is
// requests), so that a case hardly ever straddles a window.
func hourly(alg limits.Algorithm, requests uint64) *limits.Limit {
	return mustLimit(alg, requests, limits.UnitHour, 1, 0)
}

// envoyUsageCases returns, for every algorithm, a budget of 10 an hour
// taken past its end by a stream-end charge, and one charge larger than
// the budget; then charges on several budgets in one call.
func envoyUsageCases() []Case {
	var cases []Case
	for _, alg := range limits.Algorithms {
		l := hourly(alg, 10)
		w := envoyWaits[alg]
		cases = append(cases,
			// Check, charge 6, check (4 left), charge 6, which goes
			// over and counts, so every later check is denied.
			Case{Name: "usage/" + alg.String() + "/over_by_a_charge", Steps: []Step{
				{Checks: []Check{use("k", l, 0)}, Admitted: true, Want: []limits.Outcome{ok(10, w.fresh)}},
				{Checks: []Check{use("k", l, 6)}, Admitted: true, Want: []limits.Outcome{ok(4, w.six)}},
				{Checks: []Check{use("k", l, 0)}, Admitted: true, Want: []limits.Outcome{ok(4, w.six)}},
				{Checks: []Check{use("k", l, 6)}, Want: []limits.Outcome{over(0, w.twelve)}},
				{Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, w.twelve)}},
				{Checks: one("k", l, 1), Want: []limits.Outcome{over(0, w.twelve)}},
			}},
			// One response of 50 on a fresh budget of 10.
			Case{Name: "usage/" + alg.String() + "/one_large_charge", Steps: []Step{
				{Checks: []Check{use("k", l, 50)}, Want: []limits.Outcome{over(0, w.fifty)}},
				{Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, w.fifty)}},
			}},
		)
	}
	in, out, total := hourly(limits.FixedWindow, 10), hourly(limits.FixedWindow, 100), hourly(limits.FixedWindow, 1000)
	model := mustLimit(limits.FixedWindow, 1_000_000, limits.UnitDay, 1, 0)
	tokens := func(i, o, t uint64) []Check {
		return []Check{use("in", in, i), use("out", out, o), use("total", total, t)}
	}
	return append(cases,
		// AI Gateway's token example: input 10/h, output 100/h, total
		// 1000/h, charged in one stream-end call; only output goes
		// over, and each counter counts its own charge.
		Case{Name: usageManyKeys + "ai_gateway_tokens", Steps: []Step{
			{Checks: tokens(0, 0, 0), Admitted: true, Want: []limits.Outcome{ok(10, hour), ok(100, hour), ok(1000, hour)}},
			{Checks: tokens(5, 150, 155), Want: []limits.Outcome{ok(5, hour), over(0, hour), ok(845, hour)}},
			{Checks: tokens(0, 0, 0), Want: []limits.Outcome{ok(5, hour), over(0, hour), ok(845, hour)}},
		}},
		// A tenant (1000/h) and a model (1,000,000/day) in one
		// stream-end report, the tenant over: both count.
		Case{Name: usageManyKeys + "tenant_and_model", Steps: []Step{
			{Checks: []Check{use("tenant", total, 800), use("model", model, 800)}, Admitted: true, Want: []limits.Outcome{ok(200, hour), ok(999_200, day)}},
			{Checks: []Check{use("tenant", total, 500), use("model", model, 500)}, Want: []limits.Outcome{over(0, hour), ok(998_700, day)}},
			{Checks: []Check{use("tenant", total, 0), use("model", model, 0)}, Want: []limits.Outcome{over(0, hour), ok(998_700, day)}},
		}},
		// An ordinary request (no hits_addend of its own) keeps
		// all-or-nothing after a charge took a budget to its end:
		// rejected, it consumes nothing anywhere.
		Case{Name: usageManyKeys + "then_an_ordinary_request", Steps: []Step{
			{Checks: []Check{use("in", in, 10)}, Admitted: true, Want: []limits.Outcome{ok(0, hour)}},
			{Checks: []Check{{Key: "total", Limit: total, Hits: 1}, {Key: "in", Limit: in, Hits: 1}}, Want: []limits.Outcome{ok(1000, hour), over(0, hour)}},
			{Checks: []Check{use("total", total, 0)}, Admitted: true, Want: []limits.Outcome{ok(1000, hour)}},
		}},
		// AI Gateway's QuotaPolicy: 10 tokens an hour on a quota_mode
		// descriptor; a request, an answer of 20 tokens, and the next
		// request is denied.
		Case{Name: "usage/quota_policy", Steps: []Step{
			{Checks: []Check{use("q", in, 0)}, Groups: []int{1}, QuotaGroups: 1, Admitted: true, Want: []limits.Outcome{ok(10, hour)}},
			{Checks: []Check{use("q", in, 20)}, Groups: []int{1}, QuotaGroups: 1, Want: []limits.Outcome{over(0, hour)}},
			{Checks: []Check{use("q", in, 0)}, Groups: []int{1}, QuotaGroups: 1, Want: []limits.Outcome{over(0, hour)}},
		}},
	)
}

// envoyWaits are the resets of envoyUsageCases's steps on a budget of 10
// an hour of each algorithm: fresh, after 6, after 12 (2 owed) and after
// 50 (40 owed).
var envoyWaits = map[limits.Algorithm]struct{ fresh, six, twelve, fifty time.Duration }{
	limits.FixedWindow: {hour, hour, hour, hour},
	// 12 weigh 12 × (1 − x) + 1 <= 10 at x = 0.25 of the next
	// window, and 50 at x = 0.82.
	limits.SlidingWindow: {0, 2 * hour, 75 * time.Minute, 109*time.Minute + 12*sec},
	limits.SlidingLog:    {0, hour, hour, hour},
	// A token every 6 minutes: 6 refill in 36, one more fits 3 after
	// 2 owed, and 41 after 40 owed.
	limits.TokenBucket: {0, 36 * time.Minute, 18 * time.Minute, 246 * time.Minute},
	limits.LeakyBucket: {0, 36 * time.Minute, 18 * time.Minute, 246 * time.Minute},
}

// envoyRefundCases returns, for every algorithm, Envoy's calls that give
// hits back on a budget of 10 an hour: an estimate charged at request
// time and partly given back at stream end; a refund on a fresh counter;
// a refund after a charge put the budget in debt. Then Envoy's
// concurrency example, counted with a usage charge.
func envoyRefundCases() []Case {
	var cases []Case
	for _, alg := range limits.Algorithms {
		l := hourly(alg, 10)
		w := refundWaits[alg]
		cases = append(cases,
			// 8 at request time, 5 back at stream end: 7 left.
			Case{Name: "refund/" + alg.String() + "/estimate_then_give_back", Steps: []Step{
				{Checks: []Check{use("k", l, 8)}, Admitted: true, Want: []limits.Outcome{ok(2, w.eight)}},
				{Checks: []Check{back("k", l, 5)}, Admitted: true, Want: []limits.Outcome{ok(7, w.three)}},
				{Checks: []Check{use("k", l, 0)}, Admitted: true, Want: []limits.Outcome{ok(7, w.three)}},
				{Checks: []Check{use("k", l, 7)}, Admitted: true, Want: []limits.Outcome{ok(0, w.ten)}},
				{Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, w.full)}},
			}},
			// Nothing was counted: nothing to give back, no credit.
			Case{Name: "refund/" + alg.String() + "/fresh_counter", Steps: []Step{
				{Checks: []Check{back("k", l, 5)}, Admitted: true, Want: []limits.Outcome{ok(10, w.none)}},
				{Checks: []Check{use("k", l, 10)}, Admitted: true, Want: []limits.Outcome{ok(0, w.ten)}},
				{Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, w.full)}},
			}},
			// 15 of 10 charged after the fact, then 2 and 10 back: the
			// debt goes first, and the refund's own outcome is not over.
			Case{Name: "refund/" + alg.String() + "/debt_then_refund", Steps: []Step{
				{Checks: []Check{use("k", l, 15)}, Want: []limits.Outcome{over(0, w.owe5)}},
				{Checks: []Check{back("k", l, 2)}, Admitted: true, Want: []limits.Outcome{ok(0, w.owe3)}},
				{Checks: []Check{use("k", l, 0)}, Want: []limits.Outcome{over(0, w.owe3)}},
				{Checks: []Check{back("k", l, 10)}, Admitted: true, Want: []limits.Outcome{ok(7, w.three)}},
				{Checks: []Check{use("k", l, 0)}, Admitted: true, Want: []limits.Outcome{ok(7, w.three)}},
			}},
		)
	}
	// Envoy's concurrency example: +1 at request time, -1 at stream end,
	// 2 in flight. Envoy sends the stream-end call of a refused request
	// too; its +1, a descriptor's own hits_addend, counted (a usage
	// charge), so its -1 frees nothing that another request holds.
	in2 := hourly(limits.FixedWindow, 2)
	return append(cases, Case{Name: "refund/in_flight_by_usage", Steps: []Step{
		{Checks: []Check{use("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(1, hour)}},
		{Checks: []Check{use("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, hour)}},
		{Checks: []Check{use("k", in2, 1)}, Want: []limits.Outcome{over(0, hour)}},
		{Checks: []Check{back("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, hour)}}, // the refused one ends
		{Checks: []Check{use("k", in2, 1)}, Want: []limits.Outcome{over(0, hour)}},
		{Checks: []Check{back("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, hour)}}, // and the one refused now
		{Checks: []Check{back("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(1, hour)}}, // the first ends
		{Checks: []Check{use("k", in2, 1)}, Admitted: true, Want: []limits.Outcome{ok(0, hour)}},
	}})
}

// refundWaits are the resets of envoyRefundCases's steps on a budget of
// 10 an hour of each algorithm, by what the counter holds: nothing, 3,
// 8, 10 (and over for one more), and 5 and 3 owed.
var refundWaits = map[limits.Algorithm]struct{ none, three, eight, ten, full, owe5, owe3 time.Duration }{
	limits.FixedWindow: {hour, hour, hour, hour, hour, hour, hour},
	// Over at 10: 10 × (1 − x) + 1 <= 10 at x = 0.1; 15 and 13 weigh
	// at x = 0.4 and 4/13.
	limits.SlidingWindow: {0, 2 * hour, 2 * hour, 2 * hour, 66 * time.Minute, 84 * time.Minute, 78*time.Minute + 27692308*us},
	limits.SlidingLog:    {0, hour, hour, hour, hour, hour, hour},
	// A token every 6 minutes.
	limits.TokenBucket: {0, 18 * time.Minute, 48 * time.Minute, hour, 6 * time.Minute, 36 * time.Minute, 24 * time.Minute},
	limits.LeakyBucket: {0, 18 * time.Minute, 48 * time.Minute, hour, 6 * time.Minute, 36 * time.Minute, 24 * time.Minute},
}
