package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// resetWithin asks c for one hit of req and checks that its
// duration_until_reset points at the end of the window that clock
// readings taken around the call put it in: window(t) gives the end of
// the window that holds t. A call that straddles an edge is asked again.
// Bracketed by the clock, it asserts no timing.
func resetWithin(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, window func(time.Time) time.Time) {
	t.Helper()
	for range 3 {
		before := time.Now()
		resp, err := c.ShouldRateLimit(context.Background(), req)
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		end := window(before)
		if !window(after).Equal(end) {
			continue // across an edge: ask again
		}
		if resp.OverallCode != rlsOK || len(resp.Statuses) != 1 || resp.Statuses[0].DurationUntilReset == nil {
			t.Fatalf("response %v, want OK with a duration_until_reset", resp)
		}
		got := resp.Statuses[0].DurationUntilReset.Seconds
		lo, hi := int64(end.Sub(after)/time.Second), int64(end.Sub(before)/time.Second)+1
		if got < lo || got > hi {
			t.Errorf("duration_until_reset %ds, want %d to %d: the window ends at %s", got, lo, hi, end)
		}
		return
	}
	t.Fatal("every call straddled a window edge")
}

// epochEnd returns the end of the window of length w since the Unix
// epoch that holds t: the reference's month, without its variable.
func epochEnd(w time.Duration) func(time.Time) time.Time {
	return func(t time.Time) time.Time { return time.Unix(0, 0).Add(t.Sub(time.Unix(0, 0)).Truncate(w) + w) }
}

// TestCalendarMonthReferenceEnv: the reference's environment with
// USE_CALENDAR_MONTH_RATE_LIMIT=true counts a month limit in UTC
// calendar months, as the reference does; without it, in 30-day windows
// from the Unix epoch, as the reference does by default.
func TestCalendarMonthReferenceEnv(t *testing.T) {
	srv := redistest.StartServer(t)
	utcMonth := func(t time.Time) time.Time {
		y, m, _ := t.UTC().Date()
		return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	}
	if now := time.Now(); utcMonth(now).Equal(epochEnd(30 * 24 * time.Hour)(now)) {
		t.Skip("today the month and the 30-day window end together")
	}
	tests := []struct {
		name   string
		give   string // USE_CALENDAR_MONTH_RATE_LIMIT; "" unset
		window func(time.Time) time.Time
	}{
		{"calendar", "true", utcMonth},
		{"unset", "", epochEnd(30 * 24 * time.Hour)},
		{"false", "false", epochEnd(30 * 24 * time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeAll(t, filepath.Join(root, "ratelimit", "config", "config.yaml"),
				"domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: month\n      requests_per_unit: 100\n")
			env := istioEnv(root, srv.Addr)
			if tt.give != "" {
				env["USE_CALENDAR_MONTH_RATE_LIMIT"] = tt.give
			}
			env["CACHE_KEY_PREFIX"] = tt.name + "_"
			s := startSidecar(t, sidecarOpts{argv0: "/bin/ratelimit", env: env})
			resetWithin(t, s.rls, userRequest("alice", 1), tt.window)
			// A limit Envoy sends (descriptor.limit) of a month counts as
			// the reference counts it: as the rules' months.
			sent := userRequest("bob", 1)
			sent.Descriptors[0].Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: 5} // MONTH
			resetWithin(t, s.rls, sent, tt.window)
		})
	}
}

// TestCheckCalendarMonths: check prints a plain month as the server
// counts it, with --calendar-months as a UTC calendar month.
func TestCheckCalendarMonths(t *testing.T) {
	dir := t.TempDir()
	writeAll(t, filepath.Join(dir, "rules.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: month, requests_per_unit: 5}\n")
	tests := []struct {
		give []string
		want string
	}{
		{nil, "fixed_window 5 per 720h0m0s"},
		{[]string{"--calendar-months"}, "fixed_window 5 per calendar month in UTC"},
	}
	for _, tt := range tests {
		var out, errw strings.Builder
		if err := runCheck(append([]string{"--config", dir}, tt.give...), &out, &errw); err != nil {
			t.Fatalf("check %v: %v\n%s", tt.give, err, errw.String())
		}
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("check %v prints:\n%s\nwant a line with %q", tt.give, out.String(), tt.want)
		}
	}
}
