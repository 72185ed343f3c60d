package limits

import (
	"fmt"
	"strings"
	"time"
)

// Unit is a rate-limit time unit. Its values equal Envoy's
// RateLimitResponse.RateLimit.Unit enum, so conversion is a cast.
type Unit int32

// The units Envoy knows. Month is 30 days and year 365 days, as in
// envoyproxy/ratelimit; windows are aligned to multiples of their length
// since the Unix epoch.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = [...]string{
	UnitSecond: "second",
	UnitMinute: "minute",
	UnitHour:   "hour",
	UnitDay:    "day",
	UnitWeek:   "week",
	UnitMonth:  "month",
	UnitYear:   "year",
}

// Units lists every known unit, shortest first.
var Units = []Unit{UnitSecond, UnitMinute, UnitHour, UnitDay, UnitWeek, UnitMonth, UnitYear}

// UnitNames is the list of unit names for messages, shortest first:
// "second, minute, …, month or year".
func UnitNames() string { return oneOf(Units) }

// ParseUnit parses a unit name case-insensitively ("second", "MINUTE", ...).
func ParseUnit(s string) (Unit, error) {
	l := strings.ToLower(s)
	for _, u := range Units {
		if unitNames[u] == l {
			return u, nil
		}
	}
	return UnitUnknown, fmt.Errorf("unknown unit %q (want %s)", s, UnitNames())
}

// oneOf lists the names of vs for a message: "a, b or c".
func oneOf[T fmt.Stringer](vs []T) string {
	var b strings.Builder
	for i, v := range vs {
		switch {
		case i == 0:
		case i == len(vs)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(v.String())
	}
	return b.String()
}

// Duration returns the length of one unit, or 0 for an unknown unit.
func (u Unit) Duration() time.Duration {
	switch u {
	case UnitSecond:
		return time.Second
	case UnitMinute:
		return time.Minute
	case UnitHour:
		return time.Hour
	case UnitDay:
		return 24 * time.Hour
	case UnitWeek:
		return 7 * 24 * time.Hour
	case UnitMonth:
		return 30 * 24 * time.Hour
	case UnitYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// String returns the lower-case unit name.
func (u Unit) String() string {
	if u > 0 && int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", int32(u))
}
