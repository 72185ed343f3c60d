package limits_test

import (
	"context"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests need zones on machines without /usr/share/zoneinfo

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarWindow: the window that holds a time, written out by hand
// as local dates, across month ends of 28, 29, 30 and 31 days, a year
// end, and both daylight-saving changes in three zones.
func TestCalendarWindow(t *testing.T) {
	tests := []struct {
		name      string
		zone      string
		unit      limits.Unit
		resetDay  int
		give      string // local time
		wantStart string // local time
		wantEnd   string
		wantLen   time.Duration
	}{
		{"february 28 days", "Europe/Berlin", limits.UnitMonth, 0, "2023-02-28 23:59:59", "2023-02-01 00:00:00", "2023-03-01 00:00:00", 28 * 24 * time.Hour},
		{"february 29 days", "Europe/Berlin", limits.UnitMonth, 0, "2024-02-29 12:00:00", "2024-02-01 00:00:00", "2024-03-01 00:00:00", 29 * 24 * time.Hour},
		// March in Berlin loses an hour to daylight saving.
		{"march 31 days less an hour", "Europe/Berlin", limits.UnitMonth, 0, "2024-03-01 00:00:00", "2024-03-01 00:00:00", "2024-04-01 00:00:00", 31*24*time.Hour - time.Hour},
		{"april 30 days", "Europe/Berlin", limits.UnitMonth, 0, "2024-04-30 23:59:59", "2024-04-01 00:00:00", "2024-05-01 00:00:00", 30 * 24 * time.Hour},
		{"january 31 days", "America/New_York", limits.UnitMonth, 0, "2025-01-31 23:59:59", "2025-01-01 00:00:00", "2025-02-01 00:00:00", 31 * 24 * time.Hour},
		{"year end", "America/New_York", limits.UnitYear, 0, "2024-12-31 23:59:59", "2024-01-01 00:00:00", "2025-01-01 00:00:00", 366 * 24 * time.Hour},
		{"new year", "UTC", limits.UnitYear, 0, "2025-01-01 00:00:00", "2025-01-01 00:00:00", "2026-01-01 00:00:00", 365 * 24 * time.Hour},
		{"day, spring forward, New York", "America/New_York", limits.UnitDay, 0, "2024-03-10 12:00:00", "2024-03-10 00:00:00", "2024-03-11 00:00:00", 23 * time.Hour},
		{"day, fall back, New York", "America/New_York", limits.UnitDay, 0, "2024-11-03 23:59:59", "2024-11-03 00:00:00", "2024-11-04 00:00:00", 25 * time.Hour},
		{"day, spring forward, Berlin", "Europe/Berlin", limits.UnitDay, 0, "2024-03-31 03:00:00", "2024-03-31 00:00:00", "2024-04-01 00:00:00", 23 * time.Hour},
		{"day, fall back, Berlin", "Europe/Berlin", limits.UnitDay, 0, "2024-10-27 01:00:00", "2024-10-27 00:00:00", "2024-10-28 00:00:00", 25 * time.Hour},
		{"day, fall back, Sydney", "Australia/Sydney", limits.UnitDay, 0, "2024-04-07 20:00:00", "2024-04-07 00:00:00", "2024-04-08 00:00:00", 25 * time.Hour},
		{"day, spring forward, Sydney", "Australia/Sydney", limits.UnitDay, 0, "2024-10-06 00:00:00", "2024-10-06 00:00:00", "2024-10-07 00:00:00", 23 * time.Hour},
		// Midnight is skipped: the day starts at 01:00, the change.
		{"day, midnight skipped, Santiago", "America/Santiago", limits.UnitDay, 0, "2024-09-07 23:30:00", "2024-09-07 00:00:00", "2024-09-08 01:00:00", 24 * time.Hour},
		{"day from a skipped midnight, Santiago", "America/Santiago", limits.UnitDay, 0, "2024-09-08 01:00:00", "2024-09-08 01:00:00", "2024-09-09 00:00:00", 23 * time.Hour},
		{"month from a skipped midnight, Beirut", "Asia/Beirut", limits.UnitMonth, 31, "2024-03-31 12:00:00", "2024-03-31 01:00:00", "2024-04-30 00:00:00", 30*24*time.Hour - time.Hour},
		{"ordinary day, New York", "America/New_York", limits.UnitDay, 0, "2024-06-01 19:30:00", "2024-06-01 00:00:00", "2024-06-02 00:00:00", 24 * time.Hour},
		{"week over a year end", "UTC", limits.UnitWeek, 0, "2024-12-31 10:00:00", "2024-12-30 00:00:00", "2025-01-06 00:00:00", 7 * 24 * time.Hour},
		{"week with a short day", "Europe/Berlin", limits.UnitWeek, 0, "2024-03-31 12:00:00", "2024-03-25 00:00:00", "2024-04-01 00:00:00", 7*24*time.Hour - time.Hour},
		{"reset day 15, before it", "UTC", limits.UnitMonth, 15, "2024-01-14 23:59:59", "2023-12-15 00:00:00", "2024-01-15 00:00:00", 31 * 24 * time.Hour},
		{"reset day 15, on it", "UTC", limits.UnitMonth, 15, "2024-01-15 00:00:00", "2024-01-15 00:00:00", "2024-02-15 00:00:00", 31 * 24 * time.Hour},
		{"reset day 31 in a leap february", "UTC", limits.UnitMonth, 31, "2024-03-15 00:00:00", "2024-02-29 00:00:00", "2024-03-31 00:00:00", 31 * 24 * time.Hour},
		{"reset day 30 over february", "UTC", limits.UnitMonth, 30, "2023-02-27 00:00:00", "2023-01-30 00:00:00", "2023-02-28 00:00:00", 29 * 24 * time.Hour},
	}
	const layout = "2006-01-02 15:04:05"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := zone(t, tt.zone)
			parse := func(s string) time.Time {
				v, err := time.ParseInLocation(layout, s, loc)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			week := time.Monday
			l, err := limits.NewCalendarLimit(10, tt.unit, &limits.Calendar{Location: loc, WeekStart: week, ResetDay: tt.resetDay})
			if err != nil {
				t.Fatal(err)
			}
			give := parse(tt.give).UnixMicro()
			start, end := l.Span(give)
			if got, want := time.UnixMicro(start).In(loc).Format(layout), tt.wantStart; got != want {
				t.Errorf("start = %s, want %s", got, want)
			}
			if got, want := time.UnixMicro(end).In(loc).Format(layout), tt.wantEnd; got != want {
				t.Errorf("end = %s, want %s", got, want)
			}
			if got := time.Duration(end-start) * time.Microsecond; got != tt.wantLen {
				t.Errorf("window = %s, want %s", got, tt.wantLen)
			}
			// Reset points at the real boundary.
			out, _ := l.Evaluate(limits.State{}, give, 1)
			if want := time.Duration(end-give) * time.Microsecond; out.Reset != want {
				t.Errorf("reset = %s, want %s", out.Reset, want)
			}
			prev, s2, e2, next := l.Edges(give)
			ps, pe := l.Span(prev)
			ns, ne := l.Span(next - 1)
			if s2 != start || e2 != end || pe != start || ps != prev || ns != end || ne != next {
				t.Errorf("edges %d %d %d %d do not chain the windows", prev, s2, e2, next)
			}
		})
	}
}

// TestCalendarMonthEnd: a monthly budget spent on the month's last
// microsecond is whole again at the next month's first, not 30 days
// after the epoch's multiple.
func TestCalendarMonthEnd(t *testing.T) {
	loc := zone(t, "America/New_York")
	l, err := limits.NewCalendarLimit(2, limits.UnitMonth, &limits.Calendar{Location: loc})
	if err != nil {
		t.Fatal(err)
	}
	last := time.Date(2024, 2, 29, 23, 59, 59, 999999000, loc).UnixMicro()
	var st limits.State
	for range 2 {
		var out limits.Outcome
		out, st = l.Evaluate(st, last-10, 1)
		if out.Over {
			t.Fatal("over before the budget is spent")
		}
	}
	out, _ := l.Evaluate(st, last, 1)
	if !out.Over || out.Reset != time.Microsecond {
		t.Errorf("at the month's last µs: over %v, reset %s; want over, reset 1µs", out.Over, out.Reset)
	}
	out, _ = l.Evaluate(st, last+1, 1)
	if out.Over || out.Reset != 31*24*time.Hour-time.Hour { // March loses an hour in New York
		t.Errorf("at March's first µs: over %v, reset %s; want admitted, reset 31 days less an hour", out.Over, out.Reset)
	}
}

// TestCalendarRefused: what a calendar cannot align is refused.
func TestCalendarRefused(t *testing.T) {
	cal := &limits.Calendar{}
	tests := []struct {
		name string
		give func() error
	}{
		{"hour", func() error { _, err := limits.NewCalendarLimit(1, limits.UnitHour, cal); return err }},
		{"reset day 32", func() error {
			_, err := limits.NewCalendarLimit(1, limits.UnitMonth, &limits.Calendar{ResetDay: 32})
			return err
		}},
		{"sliding window", func() error {
			l, err := limits.NewLimit(limits.SlidingWindow, 1, limits.UnitDay, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.WithCalendar(cal)
			return err
		}},
		{"token bucket", func() error {
			l, err := limits.NewLimit(limits.TokenBucket, 1, limits.UnitDay, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.WithCalendar(cal)
			return err
		}},
		{"two months", func() error {
			l, err := limits.NewLimit(limits.FixedWindow, 1, limits.UnitMonth, 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.WithCalendar(cal)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestCalendarText: check, explain and the logs say a limit is on the
// calendar, and which.
func TestCalendarText(t *testing.T) {
	l, err := limits.NewCalendarLimit(100, limits.UnitMonth, &limits.Calendar{Location: zone(t, "Europe/Berlin"), ResetDay: 15})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.String(), "fixed_window 100 per calendar month in Europe/Berlin/15"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := l.ID(), "fixed_window/month@Europe/Berlin/15/1"; got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
}

// overrideLimitOf returns the limit the engine counts a sent limit of
// requests per unit by, on rs's rule user in domain d, with opts.
func overrideLimitOf(t *testing.T, rs *limits.Ruleset, opts limits.EngineOptions, requests uint64, unit limits.Unit) limits.Check {
	t.Helper()
	e := limits.NewEngine(rs, admitAllStore{}, opts)
	var d limits.Decision
	req := &limits.Request{Domain: "d", Descriptors: []limits.Descriptor{{
		Entries:  []limits.Entry{{Key: "user", Value: "alice"}},
		Override: &limits.Override{Requests: requests, Unit: unit},
	}}}
	if err := e.Decide(context.Background(), req, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Checks()) != 1 {
		t.Fatalf("%d checks, want 1", len(d.Checks()))
	}
	return d.Checks()[0]
}

type admitAllStore struct{}

func (admitAllStore) Apply(_ context.Context, b *limits.Batch) error {
	b.SizeOutcomes()
	b.Admitted = true
	return nil
}

// TestOverrideCalendar: Envoy's per-request limits of a month are UTC
// calendar months with EngineOptions.CalendarMonths, on the key of the
// rules' calendar months as the reference shares it (separate keys stay
// separate); an OverrideSpec's calendar aligns sent days to New York's,
// and leaves sent hours on the epoch.
func TestOverrideCalendar(t *testing.T) {
	plain := limits.NewRuleset([]*limits.Domain{{Name: "d", Rules: []*limits.Rule{{Domain: "d", Key: "user"}}}}, nil, "")
	utcMonth, err := limits.NewCalendarLimit(5, limits.UnitMonth, &limits.Calendar{})
	if err != nil {
		t.Fatal(err)
	}
	months := limits.EngineOptions{CalendarMonths: true}
	c := overrideLimitOf(t, plain, months, 5, limits.UnitMonth)
	if c.Limit.Calendar == nil || c.Limit.ID() != utcMonth.ID() || !strings.HasSuffix(c.Key, utcMonth.ID()) {
		t.Errorf("sent month with CalendarMonths: key %q, calendar %v; want a UTC calendar month on %s", c.Key, c.Limit.Calendar, utcMonth.ID())
	}
	if c := overrideLimitOf(t, plain, limits.EngineOptions{}, 5, limits.UnitMonth); c.Limit.Calendar != nil {
		t.Errorf("sent month without CalendarMonths is on a calendar: %q", c.Key)
	}
	if c := overrideLimitOf(t, plain, limits.EngineOptions{CalendarMonths: true, OverrideKeys: limits.OverrideSeparate}, 5, limits.UnitMonth); c.Limit.Calendar == nil || !strings.HasSuffix(c.Key, "override/5/month") {
		t.Errorf("separate sent month with CalendarMonths: key %q calendar %v; want override/5/month on a calendar", c.Key, c.Limit.Calendar)
	}
	if c := overrideLimitOf(t, plain, months, 5, limits.UnitDay); c.Limit.Calendar != nil {
		t.Errorf("sent day with CalendarMonths is on a calendar: %q", c.Key)
	}

	ny := zone(t, "America/New_York")
	spec := &limits.OverrideSpec{Calendar: &limits.Calendar{Location: ny}}
	if err := spec.Check(); err != nil {
		t.Fatal(err)
	}
	rs := limits.NewRuleset([]*limits.Domain{{Name: "d", Rules: []*limits.Rule{{Domain: "d", Key: "user"}}, Override: spec}}, nil, "")
	day := overrideLimitOf(t, rs, limits.EngineOptions{}, 100, limits.UnitDay)
	now := time.Date(2024, 11, 3, 12, 0, 0, 0, ny) // a day of 25 hours
	if _, end := day.Limit.Span(now.UnixMicro()); end != time.Date(2024, 11, 4, 0, 0, 0, 0, ny).UnixMicro() {
		t.Errorf("sent day under a New York spec ends %s, want New York's midnight", time.UnixMicro(end).In(ny))
	}
	if got, want := day.Key[strings.LastIndexByte(day.Key, '}')+1:], "43:override/fixed_window/day@America/New_York/1"; !strings.HasSuffix(got, want[3:]) {
		t.Errorf("key %q, want one ending %q", day.Key, want[3:])
	}
	if hour := overrideLimitOf(t, rs, limits.EngineOptions{}, 100, limits.UnitHour); hour.Limit.Calendar != nil {
		t.Errorf("sent hour under a calendar spec is on the calendar: %q", hour.Key)
	}
	// A calendar spec counts fixed windows only.
	bad := &limits.OverrideSpec{Algorithm: limits.TokenBucket, Calendar: &limits.Calendar{}}
	if err := bad.Check(); err == nil {
		t.Error("a token bucket spec with a calendar passes Check")
	}
}
