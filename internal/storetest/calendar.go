package storetest

import (
	"time"
	_ "time/tzdata" // the cases' zones, on machines without zoneinfo

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// calendarLimit returns a fixed window of requests per calendar unit in
// zone (months from resetDay, weeks from Monday).
func calendarLimit(requests uint64, unit limits.Unit, zone string, resetDay int) *limits.Limit {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	l, err := limits.NewCalendarLimit(requests, unit, &limits.Calendar{Location: loc, WeekStart: time.Monday, ResetDay: resetDay})
	if err != nil {
		panic(err)
	}
	return l
}

// local returns the offset from Epoch of a local time in zone, for a
// Step's At.
func local(zone string, y int, m time.Month, d, h, min, s, us int) time.Duration {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	return time.Date(y, m, d, h, min, s, us*1000, loc).Sub(Epoch)
}

// spent checks one hit of a calendar limit of 1 request: at the first µs
// of a window of length n, admitted with reset n; at its last µs, over
// with reset 1 µs; and at the next window's first µs, admitted again
// with reset next.
func spent(key string, l *limits.Limit, first, n, next time.Duration) []Step {
	return []Step{
		{At: first, Checks: one(key, l, 1), Admitted: true, Want: []limits.Outcome{ok(0, n)}},
		{At: first + n - us, Checks: one(key, l, 1), Want: []limits.Outcome{over(0, us)}},
		{At: first + n, Checks: one(key, l, 1), Admitted: true, Want: []limits.Outcome{ok(0, next)}},
	}
}

// CalendarCases returns the cases of calendar windows (limits.Calendar):
// months of 28, 29, 30 and 31 days, a year end, and the daylight-saving
// changes of New York, Berlin and Sydney, each window spent and renewed
// at its real edge; and a usage charge, a refund, a ban and a lease on
// a calendar month. Every expectation is a local date written out.
func CalendarCases() []Case {
	const ny, berlin, sydney = "America/New_York", "Europe/Berlin", "Australia/Sydney"
	mBerlin := calendarLimit(1, limits.UnitMonth, berlin, 0)
	mNY := calendarLimit(1, limits.UnitMonth, ny, 0)
	yNY := calendarLimit(1, limits.UnitYear, ny, 0)
	dNY := calendarLimit(1, limits.UnitDay, ny, 0)
	dBerlin := calendarLimit(1, limits.UnitDay, berlin, 0)
	dSydney := calendarLimit(1, limits.UnitDay, sydney, 0)
	wUTC := calendarLimit(1, limits.UnitWeek, "UTC", 0)
	dSantiago := calendarLimit(1, limits.UnitDay, "America/Santiago", 0)
	m15 := calendarLimit(1, limits.UnitMonth, "UTC", 15)
	m10 := calendarLimit(10, limits.UnitMonth, ny, 0)
	ban := calendarLimit(0, limits.UnitMonth, berlin, 0)
	h := time.Hour
	return []Case{
		{Name: "calendar/february_28_days", Steps: spent("k", mBerlin, local(berlin, 2023, 2, 1, 0, 0, 0, 0), 28*day, 31*day-h)},
		{Name: "calendar/february_29_days", Steps: spent("k", mBerlin, local(berlin, 2024, 2, 1, 0, 0, 0, 0), 29*day, 31*day-h)},
		{Name: "calendar/april_30_days", Steps: spent("k", mNY, local(ny, 2024, 4, 1, 0, 0, 0, 0), 30*day, 31*day)},
		{Name: "calendar/january_31_days", Steps: spent("k", mNY, local(ny, 2025, 1, 1, 0, 0, 0, 0), 31*day, 28*day)},
		{Name: "calendar/october_31_days_and_an_hour", Steps: spent("k", mBerlin, local(berlin, 2024, 10, 1, 0, 0, 0, 0), 31*day+h, 30*day)},
		{Name: "calendar/year_end", Steps: spent("k", yNY, local(ny, 2024, 1, 1, 0, 0, 0, 0), 366*day, 365*day)},
		{Name: "calendar/new_york_spring_forward", Steps: spent("k", dNY, local(ny, 2024, 3, 10, 0, 0, 0, 0), 23*h, 24*h)},
		{Name: "calendar/new_york_fall_back", Steps: spent("k", dNY, local(ny, 2024, 11, 3, 0, 0, 0, 0), 25*h, 24*h)},
		{Name: "calendar/berlin_spring_forward", Steps: spent("k", dBerlin, local(berlin, 2024, 3, 31, 0, 0, 0, 0), 23*h, 24*h)},
		{Name: "calendar/berlin_fall_back", Steps: spent("k", dBerlin, local(berlin, 2024, 10, 27, 0, 0, 0, 0), 25*h, 24*h)},
		{Name: "calendar/sydney_fall_back", Steps: spent("k", dSydney, local(sydney, 2024, 4, 7, 0, 0, 0, 0), 25*h, 24*h)},
		{Name: "calendar/sydney_spring_forward", Steps: spent("k", dSydney, local(sydney, 2024, 10, 6, 0, 0, 0, 0), 23*h, 24*h)},
		// Daylight saving skips midnight: the day starts at 01:00.
		{Name: "calendar/santiago_midnight_skipped", Steps: spent("k", dSantiago, local("America/Santiago", 2024, 9, 8, 1, 0, 0, 0), 23*h, 24*h)},
		{Name: "calendar/week_over_a_year_end", Steps: spent("k", wUTC, local("UTC", 2024, 12, 30, 0, 0, 0, 0), 7*day, 7*day)},
		{Name: "calendar/reset_day_15", Steps: spent("k", m15, local("UTC", 2024, 1, 15, 0, 0, 0, 0), 31*day, 29*day)},
		{Name: "calendar/mid_window_reset_is_the_real_edge", Steps: []Step{
			// 2 December 2026, 10:00 in New York: the budget resets on 1
			// January, not 30 days after an epoch multiple.
			{At: local(ny, 2026, 12, 2, 10, 0, 0, 0), Checks: one("k", m10, 4), Admitted: true, Want: []limits.Outcome{ok(6, 29*day+14*h)}},
			{At: local(ny, 2026, 12, 31, 23, 0, 0, 0), Checks: one("k", m10, 7), Want: []limits.Outcome{over(6, h)}},
			{At: local(ny, 2027, 1, 1, 0, 0, 0, 0), Checks: one("k", m10, 7), Admitted: true, Want: []limits.Outcome{ok(3, 31*day)}},
		}},
		{Name: "calendar/usage_charge_past_the_limit_ends_with_the_month", Steps: []Step{
			{At: local(ny, 2024, 2, 20, 0, 0, 0, 0), Checks: []Check{use("k", m10, 25)}, Want: []limits.Outcome{over(0, 10*day)}},
			{At: local(ny, 2024, 2, 29, 23, 59, 59, 999999), Checks: one("k", m10, 1), Want: []limits.Outcome{over(0, us)}},
			{At: local(ny, 2024, 3, 1, 0, 0, 0, 0), Checks: one("k", m10, 1), Admitted: true, Want: []limits.Outcome{ok(9, 31*day-h)}},
		}},
		{Name: "calendar/refund_within_the_month", Steps: []Step{
			{At: local(berlin, 2024, 3, 30, 12, 0, 0, 0), Checks: one("k", m10cal(berlin), 10), Admitted: true, Want: []limits.Outcome{ok(0, 35*h)}},
			{At: local(berlin, 2024, 3, 30, 12, 0, 0, 0), Checks: []Check{back("k", m10cal(berlin), 4)}, Admitted: true, Want: []limits.Outcome{ok(4, 35*h)}},
			{At: local(berlin, 2024, 3, 31, 12, 0, 0, 0), Checks: one("k", m10cal(berlin), 5), Want: []limits.Outcome{over(4, 12*h)}},
		}},
		{Name: "calendar/ban_resets_at_the_month_end", Steps: []Step{
			{At: local(berlin, 2024, 3, 31, 1, 0, 0, 0), Checks: one("k", ban, 1), Want: []limits.Outcome{over(0, 22*h)}},
		}},
	}
}

// m10cal is a calendar month of 10 requests in zone.
func m10cal(zone string) *limits.Limit { return calendarLimit(10, limits.UnitMonth, zone, 0) }

// CalendarGrantCases returns the lease case of a calendar month: the
// granted hits may be spent until the month's real end.
func CalendarGrantCases() []Case {
	const ny = "America/New_York"
	m := calendarLimit(10, limits.UnitMonth, ny, 0)
	return []Case{
		{Name: "grant/calendar_month_until_its_end", Steps: []Step{
			{At: local(ny, 2024, 3, 9, 0, 0, 0, 0), Checks: one("k", m, 1), Extra: []uint64{4}, Admitted: true, Want: []limits.Outcome{granted(ok(5, 23*day-time.Hour), 4, 23*day-time.Hour)}},
		}},
	}
}
