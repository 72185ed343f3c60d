package config_test

import (
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestCalendarFields: a rule's calendar fields and the file's time_zone
// default reach its limit, and CalendarMonths makes a plain month a UTC
// calendar month, as the reference's USE_CALENDAR_MONTH_RATE_LIMIT does.
func TestCalendarFields(t *testing.T) {
	tests := []struct {
		name      string
		opts      config.Options
		value     string
		wantZone  string // "" for no calendar
		wantWeek  time.Weekday
		wantReset int
	}{
		{"domain default", config.Options{}, "daily", "America/New_York", time.Monday, 0},
		{"own zone and reset day", config.Options{}, "monthly", "Europe/Berlin", time.Monday, 15},
		{"week start", config.Options{}, "weekly", "America/New_York", time.Sunday, 0},
		{"plain month", config.Options{}, "plain", "", 0, 0},
		{"plain month, calendar months", config.Options{CalendarMonths: true}, "plain", "UTC", 0, 0},
		{"calendar: false, calendar months", config.Options{CalendarMonths: true}, "epoch", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := config.Load("testdata/calendar.yaml", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			l := limitOf(t, rs, "billing", "tenant", tt.value)
			if tt.wantZone == "" {
				if l.Calendar != nil {
					t.Fatalf("calendar %+v, want none", l.Calendar)
				}
				return
			}
			c := l.Calendar
			if c == nil {
				t.Fatal("no calendar")
			}
			zone := "UTC"
			if c.Location != nil {
				zone = c.Location.String()
			}
			if zone != tt.wantZone || c.WeekStart != tt.wantWeek || c.ResetDay != tt.wantReset {
				t.Errorf("calendar %s, %s, %d; want %s, %s, %d", zone, c.WeekStart, c.ResetDay, tt.wantZone, tt.wantWeek, tt.wantReset)
			}
		})
	}
}

func limitOf(t *testing.T, rs *limits.Ruleset, domain, key, value string) *limits.Limit {
	t.Helper()
	for _, r := range rs.Rules(domain) {
		if r.Key == key && r.Value == value && len(r.Limits) == 1 {
			return r.Limits[0]
		}
	}
	t.Fatalf("no rule %s=%s", key, value)
	return nil
}

// TestOverrideCalendarFields: a file's override and a rule's put Envoy's
// sent limits on a calendar; the file's time_zone is the default however
// late in the file it comes.
func TestOverrideCalendarFields(t *testing.T) {
	rs, err := config.Load("testdata/calendar_override.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key       string
		wantZone  string
		wantWeek  time.Weekday
		wantReset int
	}{
		{"tenant", "Europe/Berlin", time.Monday, 15},
		{"team", "Asia/Tokyo", time.Sunday, 0},
	}
	for _, tt := range tests {
		s := rs.OverrideSpec("tenants", []limits.Entry{{Key: tt.key, Value: "x"}})
		if s == nil || s.Calendar == nil {
			t.Fatalf("%s: override %+v, want one with a calendar", tt.key, s)
		}
		c := s.Calendar
		if c.Location.String() != tt.wantZone || c.WeekStart != tt.wantWeek || c.ResetDay != tt.wantReset {
			t.Errorf("%s: calendar %s, %s, %d; want %s, %s, %d", tt.key, c.Location, c.WeekStart, c.ResetDay, tt.wantZone, tt.wantWeek, tt.wantReset)
		}
	}
}
