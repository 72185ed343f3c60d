package limits

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Check is one limit to apply to one request.
type Check struct {
	// Key identifies the counter: see AppendKey. Stores may prefix it but
	// must not otherwise change it.
	Key   string
	Limit *Limit
	// Hits to consume. Zero only checks whether the limit is exhausted.
	Hits uint64
	// Usage makes the hits a usage charge (see Charge): the store
	// consumes them whatever the verdict, past the limit if need be
	// (Limit.EvaluateUsage), and whether or not the batch is admitted.
	// Its verdict still counts toward the batch's as its kind of check
	// (enforced, shadow or quota) says. Stores must never answer a usage
	// check with hits from a cache, nor lease it.
	Usage bool
	// Extra asks the store, if the request is admitted, to consume up to
	// Extra more hits on this limit for a lease, as Limit.Grant decides;
	// Outcome.Granted says how many. Stores that do not lease leave it
	// unanswered (Granted 0).
	Extra uint64
	// Hold names the request on a rule with a HoldKey (Rule.HoldKey):
	// a concurrency limit takes and frees the request's slot by it (see
	// Take and GiveBack). Empty otherwise.
	Hold string
	// Refund makes the check give its Hits back to its limit instead of
	// consuming them (Envoy's is_negative_hits; see Limit.Refund). A
	// refund is never refused and never all-or-nothing with the rest of
	// its batch: the store applies every refund of a batch first,
	// whatever the verdict, then decides the batch as if the refund were
	// a check of zero hits that is never over, so that its outcome is the
	// limit's state after it, with Over unset. Stores must never answer a
	// refund from a cache nor lease it. Usage and Extra are unset.
	Refund bool
	// Group, when above 0, makes the check a quota check (quota_mode):
	// one of the checks of quota group Group, from 1 to
	// Batch.QuotaGroups, which stands for one descriptor of the request.
	// A quota check that is over rejects the batch only together with
	// the other quota groups (see Store). Zero for every other check.
	Group int
}

// Enforced reports whether c alone, if it is over, rejects its batch: it
// is neither a shadow check, nor a quota check, nor a refund.
func (c *Check) Enforced() bool { return c.Group == 0 && !c.Limit.Shadow && !c.Refund }

// Take evaluates c on st at now as a store decides an ordinary check:
// Limit.Occupy for a concurrency limit, by c's hold; otherwise
// Limit.Grant, with c's lease ask.
func (c *Check) Take(st State, now int64) (Outcome, State) {
	if c.Limit.Algorithm == Concurrency {
		return c.Limit.Occupy(st, now, c.Hold, c.Hits)
	}
	return c.Limit.Grant(st, now, c.Hits, c.Extra)
}

// GiveBack returns st at now after refund c: Limit.Vacate of c's hold on
// a concurrency limit, whatever its hits; Limit.Refund of c's hits
// otherwise.
func (c *Check) GiveBack(st State, now int64) State {
	if c.Limit.Algorithm == Concurrency {
		return c.Limit.Vacate(st, now, c.Hold)
	}
	return c.Limit.Refund(st, now, c.Hits)
}

// Refunds reports whether c is a refund that gives something back: some
// hits, or a concurrency limit's slot.
func (c *Check) Refunds() bool {
	return c.Refund && (c.Hits > 0 || c.Limit.Algorithm == Concurrency)
}

// Charges reports whether c changes its limit's state whatever its
// batch's verdict: a usage charge or a refund of some hits. Such a check
// must reach the store that counts it; no cache may answer it.
func (c *Check) Charges() bool { return (c.Usage && c.Hits > 0) || c.Refunds() }

// Batch is every check of one request. The engine fills Checks; the store
// fills Outcomes (same length and order) and Admitted.
type Batch struct {
	Checks   []Check
	Outcomes []Outcome
	// QuotaGroups is how many quota groups (quota_mode descriptors) the
	// request has, those that have no check here included: a descriptor
	// that matched no limit is one under a global quota mode. A group
	// with no check, or with shadow checks only, is never over, so the
	// quota checks of its batch never reject it.
	QuotaGroups int
	// Admitted is set when no enforced check (Check.Enforced) was over
	// and, if the batch has quota groups, at least one of them had no
	// check other than a shadow check over; in which case every check
	// that was not itself over consumed its hits. Otherwise nothing was
	// consumed anywhere but by usage checks (Check.Usage), which consume
	// their hits in every case.
	Admitted bool
	// DecidedBy names the layer that answered the batch when it was not
	// the backend store: middleware that answers a batch itself sets it
	// (the deny cache, leases). Empty means the backend decided. For logs
	// and diagnostics only; Reset clears it.
	DecidedBy string
}

// SizeOutcomes makes b.Outcomes one per check, reusing its array: the
// first thing a store's Apply does. The outcomes keep what they held,
// for the store to overwrite; Reset does not keep them.
func (b *Batch) SizeOutcomes() {
	b.Outcomes = slices.Grow(b.Outcomes[:0], len(b.Checks))[:len(b.Checks)]
}

// Reset empties b for reuse, keeping its capacity.
func (b *Batch) Reset() {
	clear(b.Checks)
	b.Checks = b.Checks[:0]
	b.Outcomes = b.Outcomes[:0]
	b.QuotaGroups = 0
	b.Admitted = false
	b.DecidedBy = ""
}

// QuotaOver reports whether b's quota checks reject it: b has quota
// groups, and every one of them has a check, not a shadow check nor a
// refund, that over(i) says is over. Stores call it with the verdicts they reached.
// It is false at once for a batch without quota groups.
func (b *Batch) QuotaOver(over func(i int) bool) bool {
	n := b.QuotaGroups
	if n <= 0 {
		return false
	}
	var small [4]uint64
	seen := small[:]
	if n > 64*len(small) {
		seen = make([]uint64, (n+63)/64)
	}
	left := n
	for i := range b.Checks {
		c := &b.Checks[i]
		g := c.Group - 1
		if g < 0 || g >= n || c.Limit.Shadow || c.Refund || !over(i) {
			continue
		}
		if bit := uint64(1) << (g % 64); seen[g/64]&bit == 0 {
			seen[g/64] |= bit
			if left--; left == 0 {
				return true
			}
		}
	}
	return false
}

// Store decides batches. Implementations must be safe for concurrent use.
//
// Apply decides every check of b as one atomic unit, using the store's own
// clock: the request is admitted only if every enforced check
// (Check.Enforced) admits its hits and, when b has quota groups, not
// every group has a non-shadow check that is over (Batch.QuotaOver). If
// it is admitted, each check that admits its hits consumes them (shadow
// and quota checks that are over consume nothing, so a shadow check
// previews exactly what enforcing it would do, and a quota limit that is
// over stays where it is); if it is rejected, nothing is consumed.
// Checks with the same key see each other's hits, in order.
//
// Refunds (Check.Refund) come first: each gives its hits back to the
// state before the batch (Limit.Refund), in order, whatever the batch's
// verdict; the batch is then decided on the state they leave, each
// refund as a check of zero hits whose outcome is never Over. Requests
// decided together may be ordered as the store likes (they were in
// flight together), so a store that decides several requests at once
// may apply all their refunds before any of them.
//
// Usage checks (Check.Usage) are the exception: each consumes its hits
// with Limit.EvaluateUsage, admitted or not, over or not, and its outcome
// is EvaluateUsage's. In a rejected batch they are evaluated again, in
// order, from the state before the batch, so that they see each other's
// hits but none of the other checks'.
//
// Every outcome says what the store learned of its check's limit. A store
// that decides b without learning some check's state (a cache that
// rejects b on another check's remembered verdict, a Cluster whose
// report of a refunded slot failed) sets that outcome's Unknown rather
// than leave it zero: a zero outcome reads as "nothing left, resets now",
// which the engine would report to Envoy, and Envoy to the client.
//
// An error means the store could not decide (it is unreachable, too slow,
// or answered nonsense); b's outcomes are then undefined and nothing may
// be assumed consumed.
type Store interface {
	Apply(ctx context.Context, b *Batch) error
}

// Returner is a shared store that can take back hits it granted ahead
// (Outcome.Granted, for a lease or an RLQS grant) that were not spent:
// Hits of each check's key, granted under receipts[i]
// (Outcome.GrantReceipt). It must never take back more than the key
// still holds of them.
type Returner interface {
	Return(ctx context.Context, checks []Check, receipts []int64) error
}

// ErrStoreUnavailable is wrapped by stores when they cannot reach their
// backend, so callers can apply a failure mode.
var ErrStoreUnavailable = errors.New("store unavailable")

// ErrPartUnavailable is wrapped, beside ErrStoreUnavailable, by a store
// whose backend has parts that fail alone (a Redis Cluster's masters)
// when only the part that holds a request's keys failed. Such a store
// keeps track of its parts itself, so a circuit breaker in front of the
// whole store ignores these errors: the other parts still answer.
var ErrPartUnavailable = errors.New("part of the store unavailable")

// ErrStoreSwitching is wrapped, beside ErrStoreUnavailable, by a store
// that refuses a call at once because it is moving to a new backend it
// has been told of (a Sentinel failover under way, a connection to the
// master it left). The refusal ends by itself, in moments, and calls
// wait for nothing meanwhile, so a circuit breaker in front of the store
// does not count it: opened, it would fail calls until its next probe,
// long after the switch.
var ErrStoreSwitching = errors.New("store switching to a new backend")

// CallerGaveUp reports whether a store call under ctx that failed failed
// for its caller rather than for the store, as a circuit breaker must
// tell: ctx was cancelled, or its deadline passed (its timer may not have
// fired yet) and was short, leaving the store less time than a breaker
// waits for before it blames the store. short is to be decided as the
// call starts.
func CallerGaveUp(ctx context.Context, short bool) bool {
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return true
	} else if err != nil {
		return short
	}
	d, ok := ctx.Deadline()
	return ok && short && !time.Now().Before(d)
}
