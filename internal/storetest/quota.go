package storetest

import "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"

// QuotaCases returns the cases of quota groups (limits.Check.Group): a
// batch is rejected by its quota checks only when every quota group has
// a check, not a shadow check, that is over; an admitted batch consumes
// on every check that had room and on none that was over; a rejected one
// consumes nothing. Run runs them with Cases.
func QuotaCases() []Case {
	a := mustLimit(limits.FixedWindow, 1, limits.UnitSecond, 1, 0)
	b := mustLimit(limits.FixedWindow, 2, limits.UnitSecond, 1, 0)
	m10 := mustLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0)
	tb := mustLimit(limits.TokenBucket, 1, limits.UnitSecond, 1, 1)
	shadowA := shadow(a)
	two := func(x, y *limits.Limit) []Check {
		return []Check{{Key: "a", Limit: x, Hits: 1}, {Key: "b", Limit: y, Hits: 1}}
	}
	return []Case{
		{Name: "quota/every_group_over_rejects", Steps: []Step{
			{At: 0, Checks: two(a, b), Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(1, sec)}},
			// a is over, b has room: admitted, and a consumes nothing.
			{At: 0, Checks: two(a, b), Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{over(0, sec), ok(0, sec)}},
			{At: 0, Checks: two(a, b), Groups: []int{1, 2}, QuotaGroups: 2, Want: []limits.Outcome{over(0, sec), over(0, sec)}},
			// The next window admits again.
			{At: sec, Checks: two(a, b), Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(1, sec)}},
		}},
		// A check that is over consumes nothing, even when the batch is
		// admitted: a token bucket would otherwise run into debt.
		{Name: "quota/over_check_consumes_nothing", Steps: []Step{
			{At: 0, Checks: []Check{{Key: "a", Limit: a, Hits: 3}, {Key: "t", Limit: tb, Hits: 1}}, Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{over(1, sec), ok(0, sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: a, Hits: 1}, {Key: "t", Limit: tb, Hits: 1}}, Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{ok(0, sec), over(0, sec)}},
			{At: 0, Checks: []Check{{Key: "a", Limit: a, Hits: 1}, {Key: "t", Limit: tb, Hits: 1}}, Groups: []int{1, 2}, QuotaGroups: 2, Want: []limits.Outcome{over(0, sec), over(0, sec)}},
		}},
		// An enforced check rejects alone; the quota check with room
		// reports what it has without the request.
		{Name: "quota/enforced_check_rejects_alone", Steps: []Step{
			{At: 0, Checks: one("e", a, 1), Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: []Check{{Key: "e", Limit: a, Hits: 1}, {Key: "q", Limit: b, Hits: 1}}, Groups: []int{0, 1}, QuotaGroups: 1, Want: []limits.Outcome{over(0, sec), ok(2, sec)}},
			{At: 0, Checks: []Check{{Key: "q", Limit: b, Hits: 2}}, Groups: []int{1}, QuotaGroups: 1, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
		}},
		// A group is over when one of its checks is, though another has
		// room; the one with room consumes when the batch is admitted.
		{Name: "quota/group_over_on_one_check", Steps: []Step{
			{At: 0, Checks: one("b", a, 1), Groups: []int{1}, QuotaGroups: 1, Admitted: true, Want: []limits.Outcome{ok(0, sec)}},
			{At: 0, Checks: []Check{{Key: "m1", Limit: a, Hits: 1}, {Key: "m2", Limit: m10, Hits: 1}}, Groups: []int{1, 1}, QuotaGroups: 1, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(9, 60*sec)}},
			{At: 0, Checks: []Check{{Key: "m1", Limit: a, Hits: 1}, {Key: "m2", Limit: m10, Hits: 1}, {Key: "b", Limit: a, Hits: 1}}, Groups: []int{1, 1, 2}, QuotaGroups: 2, Want: []limits.Outcome{over(0, sec), ok(9, 60*sec), over(0, sec)}},
			{At: sec, Checks: []Check{{Key: "m1", Limit: a, Hits: 1}, {Key: "m2", Limit: m10, Hits: 1}, {Key: "b", Limit: a, Hits: 1}}, Groups: []int{1, 1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(8, 59*sec), ok(0, sec)}},
			{At: sec, Checks: []Check{{Key: "m1", Limit: a, Hits: 0}, {Key: "m2", Limit: m10, Hits: 1}, {Key: "b", Limit: a, Hits: 1}}, Groups: []int{1, 1, 2}, QuotaGroups: 2, Want: []limits.Outcome{over(0, sec), ok(8, 59*sec), over(0, sec)}},
		}},
		// A group with no check (a descriptor that matched nothing under
		// a global quota mode) is never over.
		{Name: "quota/group_without_checks", Steps: []Step{
			{At: 0, Checks: one("a", a, 2), Groups: []int{1}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{over(1, sec)}},
			{At: 0, Checks: one("a", a, 2), Groups: []int{1}, QuotaGroups: 1, Want: []limits.Outcome{over(1, sec)}},
		}},
		// A group whose only check is a shadow check is never over.
		{Name: "quota/shadow_check_never_over", Steps: []Step{
			{At: 0, Checks: two(shadowA, a), Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{ok(0, sec), ok(0, sec)}},
			{At: 0, Checks: two(shadowA, a), Groups: []int{1, 2}, QuotaGroups: 2, Admitted: true, Want: []limits.Outcome{over(0, sec), over(0, sec)}},
		}},
	}
}
