package storetest

import (
	"fmt"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// reserve is request hold's request-time call on a limit that reserves
// (limits.Check.Reserves): hits held under hold.
func reserve(key string, l *limits.Limit, hold string, hits uint64) Check {
	return Check{Key: key, Limit: l, Hits: hits, Hold: hold}
}

// settle is request hold's stream-end refund of its estimate, hits.
func settle(key string, l *limits.Limit, hold string, hits uint64) Check {
	return Check{Key: key, Limit: l, Hits: hits, Hold: hold, Refund: true}
}

// released is o with n reservations released before it.
func released(o limits.Outcome, n uint64) limits.Outcome {
	o.Released = n
	return o
}

// reserving returns a limit that holds reservations for release.
func reserving(alg limits.Algorithm, requests uint64, unit limits.Unit, release time.Duration) *limits.Limit {
	l := mustLimit(alg, requests, unit, 1, 0)
	l.ReleaseAfter = release
	return l
}

// ReservationCases returns the cases of reservations (limits.Check.Reserves):
// an estimate held at admission under the request's hold, settled by
// the stream-end refund under the same hold, or released after the
// limit's ReleaseAfter.
func ReservationCases() []Case {
	fw := reserving(limits.FixedWindow, 10, limits.UnitMinute, 10*time.Second)
	tb := reserving(limits.TokenBucket, 10, limits.UnitMinute, 10*time.Second)
	ban := mustLimit(limits.FixedWindow, 0, limits.UnitSecond, 1, 0)
	min := 60 * sec
	return []Case{
		{Name: "reservation/fixed_window/settled", Steps: []Step{
			{At: 0, Checks: []Check{reserve("k", fw, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(2, min)}},
			// Refused: room again when a's reservation is released at
			// 10 s, if nothing settles it sooner.
			{At: sec, Checks: []Check{reserve("k", fw, "b", 5)}, Want: []limits.Outcome{over(2, 9*sec)}},
			// a's stream end: its estimate back, what it used charged.
			{At: 2 * sec, Checks: []Check{settle("k", fw, "a", 8), use("k", fw, 6)}, Admitted: true, Want: []limits.Outcome{ok(10, 58*sec), ok(4, 58*sec)}},
			// A second settlement of a, and the refused b's, give
			// nothing back.
			{At: 2 * sec, Checks: []Check{settle("k", fw, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(4, 58*sec)}},
			{At: 2 * sec, Checks: []Check{settle("k", fw, "b", 5)}, Admitted: true, Want: []limits.Outcome{ok(4, 58*sec)}},
			{At: 2 * sec, Checks: []Check{reserve("k", fw, "c", 4)}, Admitted: true, Want: []limits.Outcome{ok(0, 58*sec)}},
			{At: 2 * sec, Checks: one("k", fw, 1), Want: []limits.Outcome{over(0, 10*sec)}},
		}},
		{Name: "reservation/fixed_window/released_after_its_time", Steps: []Step{
			{At: 0, Checks: []Check{reserve("k", fw, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(2, min)}},
			// A retried call holds what it took, and takes nothing more.
			{At: 5 * sec, Checks: []Check{reserve("k", fw, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(2, 55*sec)}},
			{At: 9 * sec, Checks: []Check{reserve("k", fw, "b", 3)}, Want: []limits.Outcome{over(2, sec)}},
			// a's stream end never came: released at 10 s.
			{At: 10 * sec, Checks: []Check{reserve("k", fw, "b", 3)}, Admitted: true, Want: []limits.Outcome{released(ok(7, 50*sec), 1)}},
			{At: 10 * sec, Checks: []Check{settle("k", fw, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(7, 50*sec)}},
			{At: 10 * sec, Checks: one("k", fw, 7), Admitted: true, Want: []limits.Outcome{ok(0, 50*sec)}},
		}},
		{Name: "reservation/token_bucket", Steps: []Step{
			// 10 a minute: a token every 6 s.
			{At: 0, Checks: []Check{reserve("k", tb, "a", 8)}, Admitted: true, Want: []limits.Outcome{ok(2, 48*sec)}},
			{At: 0, Checks: []Check{settle("k", tb, "a", 8), use("k", tb, 3)}, Admitted: true, Want: []limits.Outcome{ok(10, 0), ok(7, 18*sec)}},
			{At: 0, Checks: []Check{reserve("k", tb, "b", 7)}, Admitted: true, Want: []limits.Outcome{ok(0, min)}},
			{At: 0, Checks: []Check{reserve("k", tb, "c", 1)}, Want: []limits.Outcome{over(0, 6*sec)}},
			// At 10 s b is released (7 back), with 10/6 tokens refilled.
			{At: 10 * sec, Checks: []Check{reserve("k", tb, "c", 1)}, Admitted: true, Want: []limits.Outcome{released(ok(7, 14*sec), 1)}},
		}},
		{Name: "reservation/all_or_nothing", Steps: []Step{
			// A reservation of a refused request holds nothing, so its
			// stream-end refund gives nothing back.
			{At: 0, Checks: []Check{reserve("k", fw, "a", 5), {Key: "ban", Limit: ban, Hits: 1}}, Want: []limits.Outcome{ok(10, min), over(0, sec)}},
			{At: 0, Checks: []Check{settle("k", fw, "a", 5)}, Admitted: true, Want: []limits.Outcome{ok(10, min)}},
			{At: 0, Checks: []Check{reserve("k", fw, "a", 10)}, Admitted: true, Want: []limits.Outcome{ok(0, min)}},
		}},
		ledgerFullCase(),
		{Name: reservationTwoKeys + "refused_elsewhere", Steps: []Step{
			// On a Cluster the two keys are in two slots: a's slot
			// reserves first and gives back when b's refuses.
			{At: 0, Checks: []Check{reserve("a", fw, "r", 5), one("b", fw, 11)[0]}, Want: []limits.Outcome{ok(10, min), over(10, min)}},
			// r holds nothing: a call under it again is no retry.
			{At: 0, Checks: []Check{reserve("a", fw, "r", 10)}, Admitted: true, Want: []limits.Outcome{ok(0, min)}},
			{At: 0, Checks: []Check{settle("a", fw, "r", 10)}, Admitted: true, Want: []limits.Outcome{ok(10, min)}},
		}},
	}
}

// ledgerFullCase fills one key's ledger with limits.MaxReservations
// reservations of one hit each: the next is over until they are
// released, however much of the limit is left.
func ledgerFullCase() Case {
	l := reserving(limits.FixedWindow, 2*limits.MaxReservations, limits.UnitHour, 10*time.Second)
	var steps []Step
	for i := range limits.MaxReservations {
		steps = append(steps, Step{Checks: []Check{reserve("k", l, fmt.Sprint("r", i), 1)}, Admitted: true,
			Want: []limits.Outcome{ok(uint64(2*limits.MaxReservations-i-1), 3600*sec)}})
	}
	steps = append(steps,
		Step{Checks: []Check{reserve("k", l, "one-more", 1)}, Want: []limits.Outcome{over(0, 10*sec)}},
		Step{At: 10 * sec, Checks: []Check{reserve("k", l, "one-more", 1)}, Admitted: true,
			Want: []limits.Outcome{released(ok(2*limits.MaxReservations-1, 3590*sec), limits.MaxReservations)}},
	)
	return Case{Name: "reservation/ledger_full", Steps: steps}
}

// reservationTwoKeys opens the names of the reservation cases that need
// two keys held at once.
const reservationTwoKeys = "reservation/two_keys/"
