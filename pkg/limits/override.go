package limits

import (
	"fmt"
	"strconv"
	"strings"
)

// OverrideKeys says which counter a descriptor's own limit (Envoy's
// descriptor.limit, see Override) counts on. The zero value is
// OverrideShared.
type OverrideKeys uint8

// The override key modes.
const (
	// OverrideShared counts an override on the key a rule's fixed-window
	// limit of the same window has for the same entries, as
	// envoyproxy/ratelimit does. Overrides and rules then spend one
	// counter: a request with a small override (1 per day) can push the
	// rule's counter over for requests without it, and the other way
	// round, until the window ends.
	OverrideShared OverrideKeys = iota
	// OverrideSeparate counts each override on a key of its own, which
	// names the override's requests and unit: no rule limit and no other
	// override shares it.
	OverrideSeparate
)

var overrideKeysNames = [...]string{OverrideShared: "shared", OverrideSeparate: "separate"}

// ParseOverrideKeys parses "shared" or "separate".
func ParseOverrideKeys(s string) (OverrideKeys, error) {
	for m, name := range overrideKeysNames {
		if name == s {
			return OverrideKeys(m), nil
		}
	}
	return OverrideShared, fmt.Errorf("unknown override keys %q (want shared or separate)", s)
}

// String returns the mode's flag value.
func (m OverrideKeys) String() string {
	if int(m) < len(overrideKeysNames) {
		return overrideKeysNames[m]
	}
	return fmt.Sprintf("OverrideKeys(%d)", m)
}

// Set parses s into m, so that *OverrideKeys is a flag.Value.
func (m *OverrideKeys) Set(s string) error {
	v, err := ParseOverrideKeys(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// overrideLimit compiles o into the fixed-window limit it stands for. With
// OverrideSeparate its identity, the last part of its key (see AppendKey),
// is override/<requests>/<unit>, which no rule limit's
// <algorithm>/<window seconds> can equal.
//
// With a spec (see OverrideSpec), s decides instead, whatever keys says.
// Without one, months is the calendar of a sent month (nil: 30 days from
// the epoch), as envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT
// makes it (see EngineOptions.CalendarMonths).
func overrideLimit(o *Override, keys OverrideKeys, s *OverrideSpec, months *Calendar) (*Limit, error) {
	if s != nil {
		return s.limit(o)
	}
	l, err := NewLimit(FixedWindow, o.Requests, o.Unit, 1, 0)
	if err != nil {
		return nil, err
	}
	if months != nil && o.Unit == UnitMonth {
		// On the key of the rules' calendar months, as the reference
		// shares it.
		if l, err = l.WithCalendar(months); err != nil {
			return nil, err
		}
	}
	if keys == OverrideSeparate {
		l.id = "override/" + strconv.FormatUint(o.Requests, 10) + "/" + o.Unit.String()
	}
	return l, nil
}

// OverrideSpec says how Envoy's per-request limits (Override) are counted
// on the descriptors of a rule (Rule.Override) or of a domain
// (Domain.Override): by which algorithm, over how many of the sent unit,
// with which burst and charge. The sent limit gives the requests and the
// unit; the spec gives the rest, as a rule's rate_limit would. A nil spec
// keeps the reference's way: a fixed window on the key that
// EngineOptions.OverrideKeys chooses.
//
// An override counted by a spec has a key of its own that names the
// algorithm and the window, never the requests (see overrideLimit): a
// tenant whose sent limit changes keeps its counter, so changing the
// metadata never resets it, and the new limit is applied to what was
// already counted (a window's hits, a bucket's level kept within the new
// burst). A zero OverrideSpec counts as a fixed window on such a key.
type OverrideSpec struct {
	Algorithm Algorithm
	// Multiplier makes the window Multiplier × the sent unit; 0 means 1.
	Multiplier uint64
	// Burst, for a token or leaky bucket, is how many hits a fresh
	// bucket admits at once; 0 means the sent requests.
	Burst uint64
	// Charge says which hits are usage charges (see Charge).
	Charge Charge
	// Calendar, if set, puts the sent limits of a day, week, month or
	// year on it (a fixed window of one unit only: see Limit.Calendar);
	// shorter units count on the Unix epoch as ever.
	Calendar *Calendar
}

// MaxOverrideRequests is the most requests an override can carry: Envoy's
// requests_per_unit is a uint32.
const MaxOverrideRequests = 1<<32 - 1

// MaxOverrideLog bounds the requests of an override counted by a sliding
// log, which keeps an entry per admitted request: the sent limit is not
// in a rule file, so nothing else bounds what it makes the store hold.
const MaxOverrideLog = 10000

// Check reports what is wrong with s, or nil.
func (s *OverrideSpec) Check() error {
	switch {
	case s.Algorithm == Concurrency || int(s.Algorithm) >= len(algorithmNames):
		return fmt.Errorf("algorithm %s does not count a sent limit (want %s)", s.Algorithm, oneOf(Algorithms))
	case s.Burst > 0 && !s.Algorithm.Bucketed():
		return fmt.Errorf("burst applies only to token_bucket and leaky_bucket, not %s", s.Algorithm)
	case s.Burst > MaxOverrideRequests:
		return fmt.Errorf("burst %d is more than %d", s.Burst, uint64(MaxOverrideRequests))
	}
	// Every unit may be sent: each must make a window that counts. A
	// count too large for its window is refused with its request.
	for _, u := range Units {
		if _, err := s.limit(&Override{Requests: MaxOverrideLog, Unit: u}); err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
	}
	return nil
}

// limit compiles the limit that s counts o by, with its own identity:
// override/<algorithm>/<window seconds>. A bucket's tick is the one a
// limit of MaxOverrideRequests would have (or, where no power of ten
// dividing the window is that coarse, the coarsest that is), whatever o's
// requests, so that a bucket's stored level (scaled by the window in
// ticks) means the same under every limit a tenant is sent.
func (s *OverrideSpec) limit(o *Override) (*Limit, error) {
	if s.Algorithm == SlidingLog && o.Requests > MaxOverrideLog {
		return nil, fmt.Errorf("%d requests counted by sliding_log; at most %d (it keeps an entry per request)", o.Requests, MaxOverrideLog)
	}
	l := &Limit{Algorithm: s.Algorithm, Requests: o.Requests, Unit: o.Unit, Multiplier: s.Multiplier, Burst: s.Burst, Charge: s.Charge}
	if s.Calendar != nil && calendarUnit(o.Unit) {
		// Its id is then <algorithm>/<unit>@<calendar>/1, named below
		// as the others are.
		l.Calendar = s.Calendar
	}
	if s.Algorithm.Bucketed() {
		// A leaky bucket decides as the token bucket of its rate and
		// burst, and is counted as one: a token bucket stores its free
		// level, which a change of burst only ever lowers (Backlog), so
		// a tenant never gains by being sent another limit; a leaky
		// bucket stores its backlog, which a lower burst would cut for
		// good, forgiving hits once a higher one is sent again.
		l.Algorithm, l.tickFor = TokenBucket, MaxOverrideRequests
	}
	if err := l.compile(); err != nil {
		return nil, err
	}
	// compile's id is <algorithm>/<window seconds>, the algorithm as
	// counted; the key names the spec's.
	l.id = "override/" + s.Algorithm.String() + l.id[strings.IndexByte(l.id, '/'):]
	return l, nil
}

// Override is a per-request limit sent by Envoy. It counts on the
// descriptor's entries as the rules' OverrideSpec says; without one, as a
// fixed window on the counter EngineOptions.OverrideKeys chooses.
type Override struct {
	Requests uint64
	Unit     Unit
}
