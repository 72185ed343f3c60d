package storetest

import (
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// take is request hold taking a slot of l on key (hits 1), as Envoy's
// request-time call does.
func take(key string, l *limits.Limit, hold string) Check {
	return Check{Key: key, Limit: l, Hits: 1, Hold: hold}
}

// free is request hold's stream-end call, which frees its slot.
func free(key string, l *limits.Limit, hold string) Check {
	return Check{Key: key, Limit: l, Hits: 1, Refund: true, Hold: hold}
}

// ConcurrencyCases returns the cases of concurrency limits
// (limits.Limit.Occupy and Vacate): requests in flight, each named by
// its hold, freed by its refund or after the window.
func ConcurrencyCases() []Case {
	in2 := mustLimit(limits.Concurrency, 2, limits.UnitSecond, 10, 0)
	return []Case{
		{Name: "concurrency/exact_pairing", Steps: []Step{
			{At: 0, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: sec, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// Full: the soonest slot (a's) expires at 10 s.
			{At: 2 * sec, Checks: []Check{take("k", in2, "c")}, Want: []limits.Outcome{over(0, 8*sec)}},
			// The refused request's stream-end call frees nothing.
			{At: 3 * sec, Checks: []Check{free("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 7*sec)}},
			{At: 3 * sec, Checks: []Check{take("k", in2, "c")}, Want: []limits.Outcome{over(0, 7*sec)}},
			// a ends; a second -1 for it frees nothing more.
			{At: 4 * sec, Checks: []Check{free("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 7*sec)}},
			{At: 4 * sec, Checks: []Check{free("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 7*sec)}},
			{At: 4 * sec, Checks: []Check{take("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// b's and c's -1 never come: their slots expire at 11 s and 14 s.
			{At: 11 * sec, Checks: []Check{take("k", in2, "d")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			{At: 12 * sec, Checks: []Check{take("k", in2, "e")}, Want: []limits.Outcome{over(0, 2*sec)}},
			{At: 14 * sec, Checks: []Check{take("k", in2, "e")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
		{Name: "concurrency/retry_keeps_its_slot", Steps: []Step{
			{At: 0, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: sec, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// a again (a retry of the call): admitted, its slot renewed.
			{At: 2 * sec, Checks: []Check{take("k", in2, "a")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
			// A probe (no hits) asks whether a request could take a slot.
			{At: 2 * sec, Checks: []Check{{Key: "k", Limit: in2, Hold: "c"}}, Want: []limits.Outcome{over(0, 9*sec)}},
			{At: 3 * sec, Checks: []Check{free("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(1, 9*sec)}},
			{At: 3 * sec, Checks: []Check{{Key: "k", Limit: in2, Hold: "c"}}, Admitted: true, Want: []limits.Outcome{ok(1, 9*sec)}},
		}},
		{Name: "concurrency/all_or_nothing", Steps: []Step{
			// A request refused by another limit takes no slot.
			{At: 0, Checks: []Check{take("k", in2, "a"), {Key: "ban", Limit: mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0), Hits: 1}}, Want: []limits.Outcome{ok(2, 0), over(0, sec)}},
			{At: 0, Checks: []Check{take("k", in2, "b")}, Admitted: true, Want: []limits.Outcome{ok(1, 10*sec)}},
			{At: 0, Checks: []Check{take("k", in2, "c")}, Admitted: true, Want: []limits.Outcome{ok(0, 10*sec)}},
		}},
	}
}
