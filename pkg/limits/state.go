package limits

import (
	"time"
)

// maxExact is the largest integer that both Go and Lua (whose numbers are
// IEEE doubles) represent exactly. All algorithm state stays at or below it.
const maxExact = 1 << 53

// State is what a store keeps for one key. Each algorithm uses some fields
// and leaves the others zero; the zero State is a fresh key.
type State struct {
	// Start is the start of the current window in µs (fixed and sliding
	// window) or the tick of the last update (buckets).
	Start int64
	// Count is the hits in the current window (fixed and sliding window),
	// the token level scaled by the window in ticks (token bucket) or the
	// backlog scaled likewise (leaky bucket).
	Count uint64
	// Prev is the previous window's hits (sliding window).
	Prev uint64
	// Debt is how far a bucket's level is below empty, scaled like
	// Count: a usage charge can take a bucket past empty (see
	// Limit.EvaluateUsage). Count then says empty: 0 for a token bucket,
	// Burst×W for a leaky bucket. Zero for the other algorithms.
	Debt uint64
	// Log is the admitted hits, oldest first (sliding log).
	Log []LogEntry
	// Slots are the requests in flight, soonest to expire first
	// (concurrency).
	Slots []Slot
	// Expire is the µs time from which the state equals a fresh key's and
	// may be dropped.
	Expire int64
}

// Slot is a request in flight on a concurrency limit: its hold, and the
// µs time at which the slot expires if no refund frees it first.
type Slot struct {
	Hold  string
	Until int64
	// Hits is what a reservation holds (see Check.Reserves); 0 on a
	// concurrency limit, whose slots each hold one request.
	Hits uint64
}

// LogEntry is a sliding-log record: Hits admitted at At (µs).
type LogEntry struct {
	At   int64
	Hits uint64
}

// Outcome is one limit's verdict on one request.
type Outcome struct {
	// Over is set when this limit alone cannot admit the request's hits (or,
	// for zero hits, when it could not admit one more).
	Over bool
	// Unknown is set by a store that decided the batch without learning
	// this limit's state, as a deny cache does for the other checks of a
	// batch it rejects on one check's cached verdict. Over, Remaining and
	// Reset are then zero and mean nothing: the engine never reports
	// them (see Store).
	Unknown bool
	// Remaining is how many more hits the limit admits now: after this
	// request's hits if the request was admitted, before them otherwise.
	Remaining uint64
	// Reset: when Over, how long until the request could be admitted; else
	// how long until the limit is fully replenished (for fixed windows, the
	// end of the window).
	Reset time.Duration
	// Granted is how many hits beyond the check's own were consumed for a
	// lease (see Check.Extra and Limit.Grant), and GrantFor how long they
	// may be spent. Zero unless the request was admitted.
	Granted  uint64
	GrantFor time.Duration
	// GrantReceipt tells which state the granted hits went to: the
	// State.Start after them (the window's start in µs, or the bucket's
	// tick). A store that takes unused granted hits back (Returner)
	// finds them by it, and a lease knows a grant of a new window by it.
	GrantReceipt int64
	// Released is how many reservations on the check's key (see
	// Check.Reserves) reached their Limit.ReleaseAfter unsettled and were
	// given back before the check was decided.
	Released uint64
}
