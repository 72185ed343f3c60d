package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestScriptCalendarClock: apply.lua counts a calendar check in the
// window that holds Redis's clock (ARGV[1] here), whatever window the
// sidecar's clock (the record's edges) was in, up to a window either
// way; the window it picks, and so the reset, is the one Go's time
// package gives for Redis's clock. Past a window of skew the call fails
// with an error that says so, and counts nothing.
func TestScriptCalendarClock(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day, err := limits.NewCalendarLimit(5, limits.UnitDay, &limits.Calendar{Location: ny})
	if err != nil {
		t.Fatal(err)
	}
	month, err := limits.NewCalendarLimit(5, limits.UnitMonth, &limits.Calendar{Location: ny})
	if err != nil {
		t.Fatal(err)
	}
	// Midnight on 10 March 2024 starts a day of 23 hours in New York;
	// 1 March, a month of 31 days less an hour.
	edge := time.Date(2024, 3, 10, 0, 0, 0, 0, ny)
	monthEdge := time.Date(2024, 3, 1, 0, 0, 0, 0, ny)
	tests := []struct {
		name           string
		limit          *limits.Limit
		sidecar, redis time.Time
	}{
		{"same clock", day, edge.Add(time.Hour), edge.Add(time.Hour)},
		{"redis a moment ahead over the edge", day, edge.Add(-time.Millisecond), edge.Add(time.Millisecond)},
		{"redis a moment behind over the edge", day, edge.Add(time.Millisecond), edge.Add(-time.Millisecond)},
		{"redis most of a day ahead", day, edge.Add(-time.Hour), edge.Add(22 * time.Hour)},
		{"redis a day behind", day, edge.Add(time.Hour), edge.Add(-23 * time.Hour)},
		{"month, redis ahead over the edge", month, monthEdge.Add(-time.Second), monthEdge.Add(time.Second)},
		{"month, redis behind over the edge", month, monthEdge.Add(time.Second), monthEdge.Add(-time.Second)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "cal:" + strconv.Itoa(i)
			rec := appendCheck(nil, &limits.Check{Key: key, Limit: tt.limit, Hits: 2}, 0, tt.sidecar.UnixMicro())
			now := tt.redis.UnixMicro()
			got, err := applyScript.Run(context.Background(), rc, []string{key}, strconv.FormatInt(now, 10), modeApply, string(rec)).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			start, end := tt.limit.Span(now)
			// Admitted, then over, remaining and reset.
			if want := []int64{1, 0, 3, end - now}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
				t.Errorf("reply %v, want %v (reset to %s)", got, want, time.UnixMicro(end).In(ny))
			}
			v, err := rc.Get(context.Background(), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if s := int64(float(v, 0)); s != start {
				t.Errorf("stored window start %s, want %s", time.UnixMicro(s).In(ny), time.UnixMicro(start).In(ny))
			}
			ttl := rc.PTTL(context.Background(), key).Val()
			if want := time.Duration(end-now) * time.Microsecond; ttl > want || ttl < want-time.Minute {
				t.Errorf("TTL %s, want about %s", ttl, want)
			}
		})
	}
	t.Run("redis more than a window off", func(t *testing.T) {
		rec := appendCheck(nil, &limits.Check{Key: "cal:far", Limit: day, Hits: 1}, 0, edge.Add(time.Hour).UnixMicro())
		now := edge.Add(48 * time.Hour).UnixMicro()
		_, err := applyScript.Run(context.Background(), rc, []string{"cal:far"}, strconv.FormatInt(now, 10), modeApply, string(rec)).Result()
		if err == nil || !strings.Contains(err.Error(), "calendar window") {
			t.Fatalf("error %v, want one about the calendar window", err)
		}
		if n := rc.Exists(context.Background(), "cal:far").Val(); n != 0 {
			t.Error("the failed call wrote its key")
		}
	})
}

// TestRefundCalendar: refund.lua gives a calendar month's reserved hits
// back to the window they went to, and keeps the key until that month's
// real end (its length from the record's edges), not a nominal 30 days
// from the window's start.
func TestRefundCalendar(t *testing.T) {
	rc := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	// February 2024: 29 days, so its end is a day short of start + 30 days.
	l, err := limits.NewCalendarLimit(10, limits.UnitMonth, &limits.Calendar{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	end := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	now := end - int64(time.Hour/time.Microsecond)
	const key = "cal:refund"
	rec := appendCheck(nil, &limits.Check{Key: key, Limit: l, Hits: 3}, 0, now)
	got, err := applyScript.Run(ctx, rc, []string{key}, strconv.FormatInt(now, 10), modeReserve, string(rec)).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	// Admitted; over, remaining, reset, receipt.
	if len(got) != 5 || got[0] != 1 || got[2] != 7 || got[4] != start {
		t.Fatalf("reserve reply %v, want admitted, 7 remaining, receipt %d", got, start)
	}
	rec = appendFloat(appendCheck(nil, &limits.Check{Key: key, Limit: l, Hits: 3}, 0, now), float64(got[4]))
	n, err := refundScript.Run(ctx, rc, []string{key}, strconv.FormatInt(now, 10), string(rec)).Int64()
	if err != nil || n != 1 {
		t.Fatalf("refund: %d checks, %v; want 1", n, err)
	}
	v := rc.Get(ctx, key).Val()
	if len(v) != 16 || float(v, 0) != float64(start) || float(v, 8) != 0 {
		t.Errorf("state after the refund: %q, want February's window with 0 hits", v)
	}
	// The TTL is PX from the script's own now (ARGV[1]): an hour.
	if ttl, want := rc.PTTL(ctx, key).Val(), time.Hour; ttl > want || ttl < want-time.Minute {
		t.Errorf("TTL %s after the refund, want about %s (the month's end)", ttl, want)
	}
}
