package limits

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Limit is one compiled limit: an algorithm, a rate and the rule metadata
// reported with it. A Limit is immutable once compiled and safe to share.
type Limit struct {
	Algorithm Algorithm
	// Requests is requests_per_unit: how many hits one Window allows.
	// Zero bans every request.
	Requests uint64
	// Unit and Multiplier give the window: Window = Multiplier × Unit.
	Unit       Unit
	Multiplier uint64
	// Burst is how many hits a fresh token or leaky bucket admits at once.
	Burst uint64
	// Name is the rule name reported to Envoy and matched by Replaces.
	Name     string
	Replaces []string
	// Shadow limits are evaluated and reported but never deny.
	Shadow bool
	// Quota limits are those of a quota_mode rule: the engine puts each
	// in its descriptor's quota group (see Check.Group), so that it denies
	// a request only together with every other quota descriptor of it.
	Quota bool
	// Unlimited limits are never evaluated; a descriptor that matches one
	// is reported as unlimited. No other field but Name and Replaces is set.
	Unlimited bool
	// Lease, when above 0, lets each sidecar take up to Lease hits at a
	// time from a shared store and admit from them locally (see
	// store.Leases). Stores that are not shared ignore it.
	Lease uint64
	// Charge says which hits on the limit are usage charges (see
	// Charge); the engine marks its checks by it (Check.Usage).
	Charge Charge
	// ReleaseAfter, when above 0 on a counting limit of a rule with a
	// HoldKey, makes the hits of a request that names its hold a
	// reservation: held under the hold until its stream-end refund
	// settles it, or for ReleaseAfter at most (see Check.Reserves).
	ReleaseAfter time.Duration
	// Calendar, when set, aligns the windows of a fixed window limit of
	// one day, week, month or year to the calendar of a time zone (see
	// Calendar); nil keeps windows aligned to the Unix epoch.
	Calendar *Calendar

	window time.Duration         // Multiplier × Unit
	spans  *atomic.Pointer[span] // a Calendar's last window of Unit
	tick   int64                 // time resolution in µs; see compile
	id     string                // algorithm and window, part of every store key
	// tickFor, if above Requests and Burst, is the count the tick is
	// chosen for: an override's bucket keeps one tick whatever it is sent
	// (see OverrideSpec).
	tickFor uint64
}

// NewLimit returns a compiled limit, or an error if the numbers cannot be
// evaluated exactly. A zero multiplier means 1, and a zero burst on a bucket
// algorithm means Requests.
func NewLimit(alg Algorithm, requests uint64, unit Unit, multiplier, burst uint64) (*Limit, error) {
	l := &Limit{Algorithm: alg, Requests: requests, Unit: unit, Multiplier: multiplier, Burst: burst}
	if err := l.compile(); err != nil {
		return nil, err
	}
	return l, nil
}

// compile checks the limit and derives its window, tick and identity.
func (l *Limit) compile() error {
	if l.Multiplier == 0 {
		l.Multiplier = 1
	}
	if l.Unit.Duration() == 0 {
		return fmt.Errorf("unknown unit %d", l.Unit)
	}
	if int(l.Algorithm) >= len(algorithmNames) {
		return fmt.Errorf("unknown algorithm %d", l.Algorithm)
	}
	if l.Algorithm.Bucketed() && l.Burst == 0 {
		l.Burst = l.Requests
	}
	if !l.Algorithm.Bucketed() {
		l.Burst = 0
	}
	if l.Multiplier > uint64(maxExact/l.Unit.Duration().Microseconds()) {
		return fmt.Errorf("window of %d %ss is too long", l.Multiplier, l.Unit)
	}
	l.window = time.Duration(l.Multiplier) * l.Unit.Duration()
	if err := l.compileCalendar(); err != nil {
		return err
	}
	w := l.window.Microseconds()
	// The sliding window and the buckets multiply counts by the window
	// length in ticks. A tick is 1 µs unless that product could pass 2^53;
	// then it grows by powers of ten (still dividing the window) until the
	// arithmetic is exact again. Only huge limits over long windows pay
	// with a coarser clock.
	//
	// tickFor asks for the tick of a larger count, as far as a power of
	// ten dividing the window allows: the tick then depends on the window
	// alone, and the limit's own count must fit it.
	big := max(l.Requests, l.Burst) + 1
	want := max(big, l.tickFor+1)
	l.tick = 1
	for want > maxExact/4/uint64(w/l.tick) {
		if w%(l.tick*10) != 0 {
			if big <= maxExact/4/uint64(w/l.tick) {
				break
			}
			return fmt.Errorf("%d requests over %s cannot be counted exactly; use a smaller limit or a shorter window", max(l.Requests, l.Burst), l.window)
		}
		l.tick *= 10
	}
	l.id = fmt.Sprintf("%s/%d", l.Algorithm, l.window/time.Second)
	if l.Calendar != nil {
		// A calendar window is counted apart from an epoch-aligned one,
		// and from one of another zone or anchor. The ID still ends in a
		// digit (see pkg/redis's logSuffix).
		l.id = fmt.Sprintf("%s/%s@%s/1", l.Algorithm, l.Unit, l.Calendar.describe(l.Unit))
	}
	return nil
}

// compileCalendar checks that a Calendar fits the limit.
func (l *Limit) compileCalendar() error {
	c := l.Calendar
	if c == nil {
		l.spans = nil
		return nil
	}
	switch {
	case !calendarUnit(l.Unit):
		return fmt.Errorf("a calendar window needs a unit of day, week, month or year, not %s", l.Unit)
	case l.Multiplier != 1:
		return fmt.Errorf("a calendar window is one %s: unit_multiplier must be 1, not %d", l.Unit, l.Multiplier)
	case l.Algorithm != FixedWindow:
		return fmt.Errorf("a calendar window is counted as a fixed_window, not %s", l.Algorithm)
	case c.ResetDay < 0 || c.ResetDay > 31:
		return fmt.Errorf("reset day %d is not a day of the month (1 to 31)", c.ResetDay)
	case c.WeekStart < time.Sunday || c.WeekStart > time.Saturday:
		return fmt.Errorf("unknown week start %d", c.WeekStart)
	}
	l.spans = &c.last[l.Unit]
	return nil
}

// WithBurst returns a copy of l, a token or leaky bucket, that admits at
// most burst hits at once, with l's rate, tick and identity, so that it
// reads and writes l's state in the same units. burst must be at least 1
// and at most l.Burst.
func (l *Limit) WithBurst(burst uint64) *Limit {
	c := *l
	c.Burst = burst
	return &c
}

// CountsLike reports whether l and o decide alike from the same state:
// the same algorithm, window, requests and burst. What is remembered of
// one limit's answers holds for the other; compare limits with it rather
// than by pointer, since Envoy's per-request limits are new each time and
// a reload builds new limits with the same numbers.
func (l *Limit) CountsLike(o *Limit) bool {
	return l.Algorithm == o.Algorithm && l.window == o.window && l.Requests == o.Requests && l.Burst == o.Burst &&
		(l.spans == nil) == (o.spans == nil) && (l.spans == nil || l.id == o.id)
}

// GrantsLike reports whether hits granted ahead under l (a lease, an
// RLQS grant) still stand under o: o counts like l and grants as much at
// a time. A reload that changes either ends what was granted under l.
// o may be nil, which grants nothing alike.
func (l *Limit) GrantsLike(o *Limit) bool {
	return o != nil && l.CountsLike(o) && l.Lease == o.Lease
}

// Window returns the limit's window: Multiplier × Unit.
func (l *Limit) Window() time.Duration { return l.window }

// ID returns the limit's identity within a rule, e.g. "token_bucket/60":
// the algorithm and the window in seconds. It is part of every store key,
// so a changed algorithm or window starts new counters, while a changed
// Requests or Burst keeps them.
func (l *Limit) ID() string { return l.id }

// Tick returns the time resolution, in microseconds, at which the limit is
// evaluated. It is 1 except for limits too large to count per microsecond.
func (l *Limit) Tick() int64 { return l.tick }
