package limits

import "fmt"

// Charge says how a limit counts hits that do not fit in what it has
// left. An admission is all-or-nothing: hits that do not fit reject the
// request, and a rejected request consumes nothing anywhere. A usage
// charge reports what a request already used (the tokens of an answer,
// sent by Envoy at the stream's end with apply_on_stream_done): it is
// counted in full, past the limit if need be ("debt"), whatever the
// request's other limits say, so that the checks after it are denied
// until the debt is repaid.
type Charge uint8

// The charges. ChargeAuto is the zero value and the default.
const (
	// ChargeAuto makes hits a usage charge when the descriptor carries
	// its own hits_addend, as Envoy sends it for Envoy Gateway's rate
	// limit cost and Envoy AI Gateway's token counts, and an admission
	// otherwise.
	ChargeAuto Charge = iota
	// ChargeUsage makes every hit a usage charge.
	ChargeUsage
	// ChargeAdmission makes every hit an admission.
	ChargeAdmission
)

var chargeNames = [...]string{
	ChargeAuto:      "auto",
	ChargeUsage:     "usage",
	ChargeAdmission: "admission",
}

// ParseCharge parses a charge name such as "usage".
func ParseCharge(s string) (Charge, error) {
	for c, name := range chargeNames {
		if name == s {
			return Charge(c), nil
		}
	}
	return 0, fmt.Errorf("unknown charge %q (want auto, usage or admission)", s)
}

// String returns the charge's configuration name.
func (c Charge) String() string {
	if int(c) < len(chargeNames) {
		return chargeNames[c]
	}
	return fmt.Sprintf("charge(%d)", c)
}

// Usage reports whether hits on a limit with charge c, from a descriptor
// that does (own) or does not carry its own hits_addend, are a usage
// charge. Zero hits are never one: they only ask whether anything is
// left.
func (c Charge) Usage(hits uint64, own bool) bool {
	return hits > 0 && (c == ChargeUsage || (c == ChargeAuto && own))
}

// MaxCount is the most that a count, a bucket's backlog or a sliding
// log's hits reach: a usage charge that would take one past it stops
// there (see EvaluateUsage). It is half of 2^53, so that a count plus a
// request's hits (at most MaxHitsAddend) stays exact in Lua's doubles.
const MaxCount = 1 << 52

const maxCount = MaxCount

// MaxHitsAddend is the largest hits_addend a request may carry
// (RequestLimits.MaxHits cannot be set above it): with it, a count plus
// a request's hits stays below 2^53, where Go and Lua agree exactly.
const MaxHitsAddend = 1 << 52

// addCount returns a + b, or maxCount if that is more.
func addCount(a, b uint64) uint64 {
	if b > maxCount-min(a, maxCount) {
		return maxCount
	}
	return a + b
}

// addScaled returns a + b×scale, or maxCount if that is more, without
// overflowing. scale is at least 1.
func addScaled(a, b, scale uint64) uint64 {
	if a >= maxCount || b > (maxCount-a)/scale {
		return maxCount
	}
	return a + b*scale
}

// EvaluateUsage is Evaluate for a usage charge (see Charge): hits that
// fit are consumed as Evaluate consumes them; hits that do not are
// consumed all the same, past the limit, and the outcome is Over, with
// Remaining and Reset as a check of one hit would see them after the
// charge: Reset is how long until the debt is repaid and one hit fits
// again. The state returned always includes the hits, except on a
// limit of zero requests, which bans without counting.
//
// Past the limit each algorithm keeps the debt its own way: a fixed or
// sliding window counts on past Requests, so the window (and, sliding,
// its weight in the next one) must pass; a token or leaky bucket's level
// goes below empty and refills from there at its rate; a sliding log
// records the hits, and while it has no room left at all adds them to
// its newest entry, moved to now, so that it never holds more than
// Requests entries (the hits it merges count a little longer). Counts,
// backlogs and a log's hits stop at 2^52 (scaled by the window in ticks
// for the buckets): see docs/usage.md for what that is in tokens.
func (l *Limit) EvaluateUsage(st State, now int64, hits uint64) (Outcome, State) {
	out, next := l.Evaluate(st, now, hits)
	if !out.Over || hits == 0 || l.Requests == 0 {
		return out, next
	}
	next = l.owe(st, now, hits)
	out, _ = l.Evaluate(next, now, 0)
	out.Over = true
	return out, next
}

// owe returns st at now with hits consumed whether or not they fit.
func (l *Limit) owe(st State, now int64, hits uint64) State {
	w := l.window.Microseconds()
	switch l.Algorithm {
	case SlidingWindow:
		start := now - now%w
		st = slideTo(st, start, w)
		st.Count = addCount(st.Count, hits)
		st.Expire = start + 2*w
		return st
	case SlidingLog:
		return l.oweLog(st, now, hits)
	case TokenBucket, LeakyBucket:
		wt := uint64(w / l.tick)
		t := now / l.tick
		backlog := addScaled(l.backlog(st, t, now), hits, wt)
		return l.BucketState(t, backlog)
	}
	start, end := l.Span(now)
	if st.Start != start {
		st = State{Start: start}
	}
	st.Count = addCount(st.Count, hits)
	st.Expire = end
	return st
}

// oweLog records hits in a sliding log: as an entry of their own while
// the log has room, else added to its newest entry, moved to now. The
// log's hits in the window stop at maxCount. The entries are copied, so
// st's own are never changed.
func (l *Limit) oweLog(st State, now int64, hits uint64) State {
	w := l.window.Microseconds()
	var live []LogEntry
	var count uint64
	for _, e := range st.Log {
		if e.At > now-w {
			live = append(live, e)
			count += e.Hits
		}
	}
	add := addCount(count, hits) - count
	if n := len(live); n > 0 && count >= l.Requests {
		live[n-1] = LogEntry{At: now, Hits: live[n-1].Hits + add}
	} else {
		live = append(live, LogEntry{At: now, Hits: add})
	}
	return State{Log: live, Expire: now + w}
}
