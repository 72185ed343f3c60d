package limits

// Reservations: a counting limit with ReleaseAfter, on a rule with a
// HoldKey, holds the request-time hits of each request that names its
// hold (Envoy: x-request-id) as a reservation, and the stream-end refund
// (is_negative_hits) of the same hold settles it. A store keeps, beside
// the limit's state, a ledger of the live reservations: a State whose
// Slots are the holds, each with its Hits and the µs it is released at.
//
//   - A reservation is an admission: all-or-nothing with its request,
//     refused when it does not fit (never a usage charge), and recorded
//     only if its request is admitted.
//   - A second reservation under a hold that holds one already takes
//     nothing more (a retried call).
//   - A refund under a hold gives back what the hold holds, at most the
//     refund's hits, and ends the reservation. A hold that holds nothing
//     (its request was refused, settled already, or released) gives back
//     nothing: a refused request's stream-end call never frees another's
//     hits, and a duplicate settles nothing.
//   - A reservation that reaches its release time unsettled is given back
//     whole (Limit.Refund) before anything else is decided on its key, and
//     counted (Outcome.Released).
//
// What the answer used is charged by a descriptor without the hold, a
// usage charge on the same key (see Charge).

// MaxReservations bounds the reservations one key holds at once: a
// reservation takes at least one hit, but a fixed window's count starts
// again each window while its reservations are kept until released. A
// reservation past it is over until one is settled or released.
const MaxReservations = 10000

// LedgerSuffix ends the key of a limit's ledger of reservations: the
// limit's key and this. Keys of AppendKey end in a limit ID, which ends
// in a digit, so no limit's key ends in it.
const LedgerSuffix = ":r"

// Ledgered reports whether c's limit keeps a ledger of reservations: a
// counting limit with ReleaseAfter. A store gives back the reservations
// due on c's key before it decides c, whether c names a hold or not.
func (c *Check) Ledgered() bool {
	return c.Limit.ReleaseAfter > 0 && c.Limit.Algorithm != Concurrency
}

// Reserves reports whether c reserves its hits, or settles its hold's
// reservation if it is a refund: a check of a Ledgered limit for a
// request that names its hold.
func (c *Check) Reserves() bool { return c.Hold != "" && c.Ledgered() }

// Due splits ledger at now into the reservations whose release time has
// come, which the store gives back whole (Limit.Refund), and the ledger
// of the others.
func (l *Limit) Due(ledger State, now int64) (due []Slot, live State) {
	keep := ledger.Slots[:0:0]
	for _, s := range ledger.Slots {
		if s.Until > now {
			keep = append(keep, s)
		} else {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return nil, ledger
	}
	return due, l.ledgerState(keep)
}

// Unhold ends ledger's live reservation under hold, if there is one, and
// returns what it held and the ledger without it; ok is false, and the
// ledger unchanged, if there is none. A refund under hold gives back
// what it held, at most the refund's hits.
func (l *Limit) Unhold(ledger State, hold string, now int64) (hits uint64, rest State, ok bool) {
	for i, s := range ledger.Slots {
		if s.Hold == hold && s.Until > now {
			return s.Hits, l.ledgerState(append(ledger.Slots[:i:i], ledger.Slots[i+1:]...)), true
		}
	}
	return 0, ledger, false
}

// Holds reports whether ledger holds a live reservation under hold.
func Holds(ledger State, hold string, now int64) bool {
	for _, s := range ledger.Slots {
		if s.Hold == hold && s.Until > now {
			return true
		}
	}
	return false
}

// Reserve returns ledger with a reservation of hits under hold, released
// ReleaseAfter from now.
func (l *Limit) Reserve(ledger State, now int64, hold string, hits uint64) State {
	live := append(ledger.Slots[:len(ledger.Slots):len(ledger.Slots)], Slot{Hold: hold, Until: now + l.ReleaseAfter.Microseconds(), Hits: hits})
	return l.ledgerState(live)
}

// SoonestRelease returns when ledger's first reservation is released, 0
// if it holds none: a request over its limit may fit then.
func SoonestRelease(ledger State) int64 {
	var at int64
	for _, s := range ledger.Slots {
		if at == 0 || s.Until < at {
			at = s.Until
		}
	}
	return at
}

// ledgerState returns the ledger that holds slots, the zero State if none.
// It outlives its last reservation's release by two windows, so that
// the release is given back by whatever check comes next while the
// limit's state still holds what the reservation took.
func (l *Limit) ledgerState(slots []Slot) State {
	if len(slots) == 0 {
		return State{}
	}
	var last int64
	for _, s := range slots {
		last = max(last, s.Until)
	}
	return State{Slots: slots, Expire: last + 2*l.window.Microseconds()}
}
