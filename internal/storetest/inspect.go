package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// Inspector is a store whose counters can be read and reset, as the
// sidecar's admin endpoints do: the memory and Redis stores.
type Inspector interface {
	limits.Store
	Inspect(ctx context.Context, key string, l *limits.Limit) (limits.State, time.Time, error)
	Reset(ctx context.Context, key string, l *limits.Limit) (bool, error)
}

// InspectFactory returns a fresh, empty Inspector deciding by clk.
type InspectFactory func(t *testing.T, clk *Clock) Inspector

// InspectCase is hits applied to one key at known times, and the state
// Inspect must then read.
type InspectCase struct {
	Name  string
	Limit *limits.Limit
	Hits  []TimedHits
	// At is when Inspect reads, after Epoch.
	At   time.Duration
	Want limits.State
}

// TimedHits is a request of Hits on the case's key at At after Epoch.
type TimedHits struct {
	At   time.Duration
	Hits uint64
}

// InspectCases returns one case per algorithm. The wanted states follow
// from limits.Limit.Evaluate, which the memory store keeps as it is and
// the Redis store packs into its own record.
func InspectCases() []InspectCase {
	e := Epoch.UnixMicro()
	s := int64(time.Second / time.Microsecond)
	febStart := local("Europe/Berlin", 2024, 2, 1, 0, 0, 0, 0)
	marStart := local("Europe/Berlin", 2024, 3, 1, 0, 0, 0, 0)
	return []InspectCase{
		{
			// A calendar month: its state ends with February (29 days).
			Name:  "fixed_window_calendar_month",
			Limit: calendarLimit(10, limits.UnitMonth, "Europe/Berlin", 0),
			Hits:  []TimedHits{{febStart + sec, 3}, {febStart + day, 2}},
			At:    febStart + 2*day,
			Want:  limits.State{Start: e + febStart.Microseconds(), Count: 5, Expire: e + marStart.Microseconds()},
		},
		{
			Name:  "fixed_window",
			Limit: mustLimit(limits.FixedWindow, 10, limits.UnitMinute, 1, 0),
			Hits:  []TimedHits{{sec, 3}, {2 * sec, 2}},
			At:    3 * sec,
			Want:  limits.State{Start: e, Count: 5, Expire: e + 60*s},
		},
		{
			// Hits in the previous window and the current one.
			Name:  "sliding_window",
			Limit: mustLimit(limits.SlidingWindow, 10, limits.UnitMinute, 1, 0),
			Hits:  []TimedHits{{10 * sec, 4}, {70 * sec, 3}},
			At:    80 * sec,
			Want:  limits.State{Start: e + 60*s, Count: 3, Prev: 4, Expire: e + 180*s},
		},
		{
			Name:  "sliding_log",
			Limit: mustLimit(limits.SlidingLog, 3, limits.UnitSecond, 10, 0),
			Hits:  []TimedHits{{sec, 1}, {4 * sec, 2}},
			At:    5 * sec,
			Want:  limits.State{Log: []limits.LogEntry{{At: e + s, Hits: 1}, {At: e + 4*s, Hits: 2}}, Expire: e + 14*s},
		},
		{
			// 10/s, burst 5: three hits leave 2 tokens, scaled by the
			// window in ticks (1e6 µs), and the bucket is full again
			// 300 ms later.
			Name:  "token_bucket",
			Limit: mustLimit(limits.TokenBucket, 10, limits.UnitSecond, 1, 5),
			Hits:  []TimedHits{{0, 3}},
			At:    100 * ms,
			Want:  limits.State{Start: e, Count: 2 * uint64(s), Expire: e + 300_000},
		},
		{
			// The same as a backlog of 3 emission intervals: the
			// theoretical arrival time is 300 ms on.
			Name:  "leaky_bucket",
			Limit: mustLimit(limits.LeakyBucket, 10, limits.UnitSecond, 1, 5),
			Hits:  []TimedHits{{0, 3}},
			At:    100 * ms,
			Want:  limits.State{Start: e, Count: 3 * uint64(s), Expire: e + 300_000},
		},
	}
}

// RunInspect checks Inspect and Reset against every case of InspectCases:
// Inspect reads the state the hits left and the store's clock, the
// verdict limits.Limit.Evaluate draws from that state is the store's own
// for a zero-hit check, Reset deletes the key (and reports whether it
// held one), after which the key reads fresh and admits a full limit.
// A key never written reads fresh.
func RunInspect(t *testing.T, newStore InspectFactory) {
	ctx := context.Background()
	for _, tt := range InspectCases() {
		t.Run(tt.Name, func(t *testing.T) {
			clk := NewClock(Epoch)
			s := newStore(t, clk)
			key := Key("inspect-"+tt.Name, "k", tt.Limit)
			apply := func(hits uint64) *limits.Batch {
				t.Helper()
				b := &limits.Batch{Checks: []limits.Check{{Key: key, Limit: tt.Limit, Hits: hits}}}
				if err := s.Apply(ctx, b); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				return b
			}
			if st, _, err := s.Inspect(ctx, key, tt.Limit); err != nil || !cmp.Equal(st, limits.State{}) {
				t.Fatalf("Inspect of a fresh key = %+v, %v; want the zero state", st, err)
			}
			for _, h := range tt.Hits {
				clk.Set(Epoch.Add(h.At))
				if b := apply(h.Hits); !b.Admitted {
					t.Fatalf("%d hits at %v: rejected", h.Hits, h.At)
				}
			}
			clk.Set(Epoch.Add(tt.At))
			st, now, err := s.Inspect(ctx, key, tt.Limit)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if !now.Equal(clk.Now()) {
				t.Errorf("Inspect's time = %v, want the store's clock %v", now, clk.Now())
			}
			if diff := cmp.Diff(tt.Want, st); diff != "" {
				t.Errorf("Inspect state (-want +got):\n%s", diff)
			}
			got, _ := tt.Limit.Evaluate(st, now.UnixMicro(), 0)
			want := apply(0).Outcomes[0]
			if got != want {
				t.Errorf("Evaluate(inspected state) = %+v, but the store answers %+v", got, want)
			}

			deleted, err := s.Reset(ctx, key, tt.Limit)
			if err != nil || !deleted {
				t.Fatalf("Reset = %v, %v; want true", deleted, err)
			}
			if st, _, err := s.Inspect(ctx, key, tt.Limit); err != nil || !cmp.Equal(st, limits.State{}) {
				t.Errorf("Inspect after Reset = %+v, %v; want the zero state", st, err)
			}
			if deleted, err := s.Reset(ctx, key, tt.Limit); err != nil || deleted {
				t.Errorf("Reset of a deleted key = %v, %v; want false", deleted, err)
			}
			fresh, _ := tt.Limit.Evaluate(limits.State{}, now.UnixMicro(), 1)
			if out := apply(1).Outcomes[0]; out != fresh {
				t.Errorf("a hit after Reset = %+v, want a fresh key's %+v", out, fresh)
			}
		})
	}
}
