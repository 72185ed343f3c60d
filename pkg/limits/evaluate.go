package limits

import (
	"math"
	"time"
)

// Evaluate applies the limit's algorithm to st at time now (µs since the
// Unix epoch) for hits hits. It returns the verdict and the state after
// consuming the hits; the caller stores next only if the whole request is
// admitted and hits > 0. Evaluate is the reference semantics: the memory
// store calls it and the Redis script mirrors it line by line.
func (l *Limit) Evaluate(st State, now int64, hits uint64) (Outcome, State) {
	// Zero hits asks "is the limit exhausted?": would one more hit pass?
	probe := max(hits, 1)
	if l.Requests == 0 {
		_, end := l.Span(now)
		return Outcome{Over: true, Reset: micros(end - now)}, st
	}
	switch l.Algorithm {
	case SlidingWindow:
		return l.slidingWindow(st, now, hits, probe)
	case SlidingLog:
		return l.slidingLog(st, now, hits, probe)
	case TokenBucket, LeakyBucket:
		return l.bucket(st, now, hits, probe)
	case Concurrency:
		return l.Occupy(st, now, "", hits)
	}
	return l.fixedWindow(st, now, hits, probe)
}

func (l *Limit) fixedWindow(st State, now int64, hits, probe uint64) (Outcome, State) {
	start, end := l.Span(now)
	if st.Start != start {
		st = State{Start: start}
	}
	reset := micros(end - now)
	if st.Count+probe > l.Requests {
		return Outcome{Over: true, Remaining: l.Requests - min(st.Count, l.Requests), Reset: reset}, st
	}
	st.Count += hits
	st.Expire = end
	return Outcome{Remaining: l.Requests - st.Count, Reset: reset}, st
}

// slidingWindow works in ticks and scales the estimate by the window length
// W, so it stays an integer: E = prev × (W − elapsed) + cur × W. A usage
// charge can take either count far past the limit (see EvaluateUsage), so
// E itself is never formed: slideRoom and slideWait compare and divide
// instead, and every product they form is at most Requests × W, which
// compile keeps exact.
func (l *Limit) slidingWindow(st State, now int64, hits, probe uint64) (Outcome, State) {
	w := l.window.Microseconds()
	start := now - now%w
	st = slideTo(st, start, w)
	wt := uint64(w / l.tick)
	elapsed := uint64((now - start) / l.tick)
	room := l.slideRoom(st, wt, wt-elapsed)
	if probe > room {
		return Outcome{Over: true, Remaining: room, Reset: micros(int64(l.slideWait(st, wt, elapsed, probe)) * l.tick)}, st
	}
	st.Count += hits
	st.Expire = start + 2*w
	reset := int64(0)
	switch {
	case st.Count > 0:
		reset = start + 2*w - now
	case st.Prev > 0:
		reset = start + w - now
	}
	return Outcome{Remaining: room - hits, Reset: micros(reset)}, st
}

// slideTo returns a sliding window's state st moved to the window that
// starts at start: this window's count becomes the previous one's, and
// older counts are gone.
func slideTo(st State, start, w int64) State {
	switch st.Start {
	case start:
		return st
	case start - w:
		return State{Start: start, Prev: st.Count}
	}
	return State{Start: start}
}

// slideRoom returns how many hits fit in a sliding window of wt ticks
// whose previous window still weighs age ticks (1 to wt): ⌊(Requests×W −
// E) / W⌋, or 0 when E is at or past Requests×W.
func (l *Limit) slideRoom(st State, wt, age uint64) uint64 {
	if st.Count >= l.Requests {
		return 0
	}
	free := (l.Requests - st.Count) * wt
	if st.Prev > free/age { // Prev × age > free
		return 0
	}
	return (free - st.Prev*age) / wt
}

// slideWait returns how many ticks a sliding window of wt ticks, elapsed
// ticks into its current window, takes to fit probe more hits: first as
// the previous window ages out of this one, then as this window ages out
// of the next. More hits than the limit never fit; they get the time
// until both windows are empty. Requires that probe does not fit now.
func (l *Limit) slideWait(st State, wt, elapsed, probe uint64) uint64 {
	age := wt - elapsed
	switch {
	case probe > l.Requests:
		return 2*wt - elapsed
	case st.Count+probe <= l.Requests:
		// Prev × (age − x) ≤ (Requests − Count − probe) × W, for the
		// least x; Prev > 0, or probe would fit.
		return age - (l.Requests-st.Count-probe)*wt/st.Prev
	}
	// This window, as the next one's previous: Count × (W − y) ≤
	// (Requests − probe) × W, for the least y; Count > 0, since Count +
	// probe > Requests ≥ probe.
	return age + wt - (l.Requests-probe)*wt/st.Count
}

// slidingLog keeps the hits admitted in (now − W, now].
func (l *Limit) slidingLog(st State, now int64, hits, probe uint64) (Outcome, State) {
	w := l.window.Microseconds()
	i := 0
	for i < len(st.Log) && st.Log[i].At <= now-w {
		i++
	}
	st.Log = st.Log[i:]
	var count uint64
	for _, e := range st.Log {
		count += e.Hits
	}
	if count+probe > l.Requests {
		// Wait until enough of the oldest hits have left the window.
		reset := w
		freed := uint64(0)
		for _, e := range st.Log {
			freed += e.Hits
			if count-freed+probe <= l.Requests {
				reset = e.At + w - now
				break
			}
		}
		return Outcome{Over: true, Remaining: l.Requests - min(count, l.Requests), Reset: micros(reset)}, st
	}
	if hits > 0 {
		// Appending may write into the stored state's array, but only past
		// its length, so the stored state reads the same if the request is
		// rejected by another limit.
		st.Log = append(st.Log, LogEntry{At: now, Hits: hits})
	}
	reset := int64(0)
	if n := len(st.Log); n > 0 {
		st.Expire = st.Log[n-1].At + w
		reset = st.Expire - now
	}
	return Outcome{Remaining: l.Requests - count - hits, Reset: micros(reset)}, st
}

// bucket evaluates both bucket algorithms in ticks with levels scaled by
// the window length W in ticks, so every quantity is an integer: a bucket
// holds Burst×W, a hit costs W, and each tick drains (or refills) Requests.
// The token bucket stores the free level (tokens×W); the leaky bucket
// stores the backlog (Burst×W − tokens×W), i.e. GCRA's TAT − now scaled by
// Requests. For the same rate and burst the two make the same decisions;
// they differ in what they store, as the textbooks' versions do. A usage
// charge can take the backlog past Burst×W (see EvaluateUsage): the
// level is then below empty, and State.Debt holds how far.
func (l *Limit) bucket(st State, now int64, hits, probe uint64) (Outcome, State) {
	wt := uint64(l.window.Microseconds() / l.tick)
	t := now / l.tick
	capacity := l.Burst * wt
	rate := l.Requests
	backlog := l.backlog(st, t, now)
	if probe > l.Burst || backlog+probe*wt > capacity {
		ticks := ceilDiv(backlog, rate) // never admissible: time to drain fully
		if probe <= l.Burst {
			ticks = ceilDiv(backlog+probe*wt-capacity, rate)
		}
		return Outcome{Over: true, Remaining: (capacity - min(backlog, capacity)) / wt, Reset: micros(int64(ticks) * l.tick)}, st
	}
	backlog += hits * wt
	full := int64(ceilDiv(backlog, rate)) * l.tick
	next := l.BucketState(t, backlog)
	if next.Expire <= now {
		next = State{} // nothing to remember: same as a fresh key
	}
	return Outcome{Remaining: (capacity - backlog) / wt, Reset: micros(full - (now - t*l.tick))}, next
}

// backlog returns a bucket's backlog in st, drained to tick t (now is t
// in µs), scaled by the window in ticks and at most maxCount.
func (l *Limit) backlog(st State, t, now int64) uint64 {
	if st.Expire == 0 || st.Expire <= now {
		return 0
	}
	b := l.Backlog(st)
	if t > st.Start {
		// Drain by elapsed × rate, without overflowing the product.
		elapsed := uint64(t - st.Start)
		if elapsed >= ceilDiv(b, l.Requests) {
			return 0
		}
		b -= elapsed * l.Requests
	}
	return b
}

// Backlog returns the backlog that st holds for l, a token or leaky
// bucket, as of st's own tick (State.Start), undrained: Burst×W less the
// free level, scaled by the window W in ticks, debt included, at most
// 2^52. A level stored under a larger burst counts as a full bucket
// (backlog 0, token bucket) or an empty one (Burst×W, leaky bucket);
// debt stays debt.
func (l *Limit) Backlog(st State) uint64 {
	capacity := l.Burst * uint64(l.window.Microseconds()/l.tick)
	b := min(st.Count, capacity)
	if l.Algorithm == TokenBucket {
		b = capacity - b
	}
	return min(b+min(st.Debt, maxCount), maxCount)
}

// BucketState returns the state of l, a token or leaky bucket, that
// holds backlog (scaled as Backlog's) at tick t. Past Burst×W the level
// is Debt below empty.
func (l *Limit) BucketState(t int64, backlog uint64) State {
	st := State{Start: t, Expire: t*l.tick + int64(ceilDiv(backlog, l.Requests))*l.tick}
	capacity := l.Burst * uint64(l.window.Microseconds()/l.tick)
	level := min(backlog, capacity)
	if l.Algorithm == TokenBucket {
		level = capacity - level
	}
	st.Count, st.Debt = level, backlog-min(backlog, capacity)
	return st
}

// Grant evaluates hits like Evaluate and, if they fit, also takes up to
// extra more hits for a lease: as many as fit, but never more than half of
// what would remain after hits, so that leases shrink as the limit nears
// exhaustion and the last hit is never leased. It returns the outcome
// with Granted and GrantFor set (Remaining is after the granted hits too)
// and the state after consuming hits plus Granted.
//
// GrantFor bounds how long the granted hits may be spent: for the window
// algorithms, until the current window ends, so that they count in the
// window they are spent in; for the buckets, the time the bucket takes to
// refill them, so that leased hits run ahead of the bucket by at most the
// lease.
func (l *Limit) Grant(st State, now int64, hits, extra uint64) (Outcome, State) {
	out, next := l.Evaluate(st, now, hits)
	if out.Over || extra == 0 || !l.Algorithm.Leasable() || l.Requests == 0 {
		return out, next
	}
	g := min(extra, out.Remaining/2)
	if g == 0 {
		return out, next
	}
	out, next = l.Evaluate(st, now, hits+g)
	if out.Over { // cannot happen: Remaining said g more fit
		return l.Evaluate(st, now, hits)
	}
	out.Granted, out.GrantReceipt = g, next.Start
	w := l.window.Microseconds()
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		_, end := l.Span(now)
		out.GrantFor = micros(end - now)
	default:
		wt := uint64(w / l.tick)
		out.GrantFor = micros(int64(ceilDiv(g*wt, l.Requests)) * l.tick)
	}
	return out, next
}

func ceilDiv(a, b uint64) uint64 {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}

// micros converts µs to a time.Duration: 0 for less than none, and the
// longest time.Duration (about 292 years) for more than it holds, which
// a reset can be: two windows of a limit per 280 years, or the refill of
// a huge bucket. Multiplying would wrap to a negative reset.
func micros(us int64) time.Duration {
	switch {
	case us < 0:
		return 0
	case us > math.MaxInt64/int64(time.Microsecond):
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}
