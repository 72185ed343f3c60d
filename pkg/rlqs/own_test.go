package rlqs

import (
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// TestWithOwn: a sliding window grant of only its own hit (the store
// granted none beyond it) gets the time it may be spent and the receipt
// the store would have given a larger one, from the outcome's Reset and
// the sidecar's clock, whether that clock is behind or ahead of the
// store's; windows from 10 s to a week, from their start to their end.
// (Rounding the window's start as a time.Time, whose multiples count from
// year 1, gave a week's window the wrong receipt.)
func TestWithOwn(t *testing.T) {
	tests := []struct {
		unit limits.Unit
		mult uint64
	}{
		{limits.UnitSecond, 10},
		{limits.UnitMinute, 1},
		{limits.UnitHour, 1},
		{limits.UnitDay, 1},
		{limits.UnitWeek, 1},
	}
	for _, tt := range tests {
		l, err := limits.NewLimit(limits.SlidingWindow, 1000, tt.unit, tt.mult, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := l.Window()
		for _, into := range []time.Duration{time.Millisecond, w / 2, w - time.Second} {
			store := storetest.Epoch.Add(3*w + into)
			// The grant the store gives when it grants more than the own
			// hit: what withOwn must find for one that grants none.
			want, _ := l.Grant(limits.State{}, store.UnixMicro(), 1, 2)
			if want.Granted == 0 || want.GrantFor == 0 {
				t.Fatalf("%s: the store granted nothing beyond the own hit: %+v", w, want)
			}
			only, _ := l.Grant(limits.State{}, store.UnixMicro(), 1, 0)
			for _, skew := range []time.Duration{-2 * time.Second, 0, 2 * time.Second} {
				got := withOwn(l, only, 1, store.Add(skew))
				if got.Granted != 1 || got.GrantFor != want.GrantFor || got.GrantReceipt != want.GrantReceipt {
					t.Errorf("window %s, %s into it, sidecar clock %s off: granted %d for %s, receipt %d; want 1 for %s, receipt %d",
						w, into, skew, got.Granted, got.GrantFor, got.GrantReceipt, want.GrantFor, want.GrantReceipt)
				}
			}
		}
	}
}
