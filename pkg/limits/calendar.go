package limits

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Calendar aligns the windows of a day, week, month or year limit to the
// calendar of a time zone, instead of to multiples of the unit since the
// Unix epoch: a day runs from local midnight to local midnight (23 or 25
// hours across a daylight-saving change), a week from midnight of its
// first day, a month from midnight of its reset day to the same day of
// the next month (as long as the month is), and a year from 1 January.
// Only fixed windows of one unit (Multiplier 1) can be aligned: see
// Limit.compile. The zero Calendar is UTC, weeks from Sunday (the zero
// Weekday; configuration defaults to Monday, ISO 8601) and months from
// the 1st.
type Calendar struct {
	// Location is the time zone; nil means UTC.
	Location *time.Location
	// WeekStart is the first day of a week window.
	WeekStart time.Weekday
	// ResetDay is the day of the month on which a month window starts,
	// 1 to 31 (0 means 1); a month with fewer days starts on its last.
	// Windows of other units ignore it.
	ResetDay int

	// last remembers, per unit, the window computed last (see
	// Limit.Span), so that every limit on the calendar, Envoy's
	// per-request limits too, computes each window once. A Calendar
	// must not be copied or changed once a limit uses it.
	last [UnitWeek + 1]atomic.Pointer[span]
}

// NewCalendarLimit returns a compiled fixed window limit of requests per
// calendar unit (day, week, month or year) in c.
func NewCalendarLimit(requests uint64, unit Unit, c *Calendar) (*Limit, error) {
	return (&Limit{Requests: requests, Unit: unit, Multiplier: 1}).WithCalendar(c)
}

// WithCalendar returns a compiled copy of l whose windows c aligns (nil:
// aligned to the Unix epoch), or an error if c cannot align them: l must
// be a fixed window of one day, week, month or year.
func (l *Limit) WithCalendar(c *Calendar) (*Limit, error) {
	n := *l
	n.Calendar = c
	if err := n.compile(); err != nil {
		return nil, err
	}
	return &n, nil
}

// utcMonths returns the calendar of EngineOptions.CalendarMonths: UTC
// months from the 1st, or nil if on is false.
func utcMonths(on bool) *Calendar {
	if !on {
		return nil
	}
	return &Calendar{}
}

// calendarUnit reports whether u can be calendar-aligned.
func calendarUnit(u Unit) bool {
	return u == UnitDay || u == UnitWeek || u == UnitMonth || u == UnitYear
}

func (c *Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// Window returns the calendar window of unit u (day, week, month or
// year) that holds t: [start, end).
func (c *Calendar) Window(u Unit, t time.Time) (start, end time.Time) {
	loc := c.loc()
	t = t.In(loc)
	y, m, d := t.Date()
	switch u {
	case UnitDay:
		return midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	case UnitWeek:
		back := (int(t.Weekday()) - int(c.WeekStart) + 7) % 7
		return midnight(y, m, d-back, loc), midnight(y, m, d-back+7, loc)
	case UnitYear:
		return midnight(y, 1, 1, loc), midnight(y+1, 1, 1, loc)
	}
	start = c.monthStart(y, m)
	if t.Before(start) {
		return c.monthStart(y, m-1), start
	}
	return start, c.monthStart(y, m+1)
}

// monthStart returns the start of month m's reset day (m may be out of
// 1..12, as time.Date allows).
func (c *Calendar) monthStart(y int, m time.Month) time.Time {
	first := time.Date(y, m, 1, 12, 0, 0, 0, time.UTC) // y and m, normalized
	y, m = first.Year(), first.Month()
	day := max(c.ResetDay, 1)
	if last := time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day(); day > last {
		day = last
	}
	return midnight(y, m, day, c.loc())
}

// midnight returns the first instant of day d of month m of year y (any
// of them may be out of range, as time.Date allows) in loc. That is
// 00:00, except where a daylight-saving change skips midnight (Santiago,
// Beirut, Havana): then the day starts at the change, which time.Date,
// asked for the missing 00:00, may place an hour early, in the day
// before.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Day() != d {
		_, t = t.ZoneBounds() // the change: the day's first instant
	}
	return t
}

// describe names the calendar of a limit of unit u for its identity and
// text: the zone, then for weeks the first day ("UTC/Monday") and for
// months a reset day past the 1st ("Europe/Berlin/15").
func (c *Calendar) describe(u Unit) string {
	s := c.loc().String()
	switch {
	case u == UnitWeek:
		s += "/" + c.WeekStart.String()
	case u == UnitMonth && c.ResetDay > 1:
		s += fmt.Sprintf("/%d", c.ResetDay)
	}
	return s
}

// span is one calendar window in µs, [start, end), with the edges next to
// it: the previous window's start and the next window's end.
type span struct {
	prev, start, end, next int64
}

// Span returns the window of a fixed window limit that holds now (µs):
// [start, end). Calendar-aligned limits (Limit.Calendar) have the
// calendar's window; the others the multiple of the window since the
// Unix epoch.
func (l *Limit) Span(now int64) (start, end int64) {
	if l.spans == nil {
		w := l.window.Microseconds()
		start = now - now%w
		return start, start + w
	}
	s := l.calSpan(now)
	return s.start, s.end
}

// Edges returns, for a calendar-aligned limit, the start of the window
// before the one that holds now (µs), that window's start and end, and
// the end of the window after it: what the Redis script needs to find
// the window that holds its own clock, which may differ from now a
// little. Limits without a calendar get epoch-aligned windows.
func (l *Limit) Edges(now int64) (prev, start, end, next int64) {
	if l.spans == nil {
		start, end = l.Span(now)
		w := end - start
		return start - w, start, end, end + w
	}
	s := l.calSpan(now)
	return s.prev, s.start, s.end, s.next
}

func (l *Limit) calSpan(now int64) *span {
	if s := l.spans.Load(); s != nil && s.start <= now && now < s.end {
		return s
	}
	c := l.Calendar
	start, end := c.Window(l.Unit, time.UnixMicro(now))
	prev, _ := c.Window(l.Unit, start.Add(-time.Microsecond))
	_, next := c.Window(l.Unit, end)
	s := &span{prev: prev.UnixMicro(), start: start.UnixMicro(), end: end.UnixMicro(), next: next.UnixMicro()}
	l.spans.Store(s)
	return s
}

// Calendared reports whether l's windows are calendar-aligned.
func (l *Limit) Calendared() bool { return l.spans != nil }
