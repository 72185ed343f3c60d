package redis

import (
	"testing"
	"time"
)

func TestRTTMin(t *testing.T) {
	var m rttMin
	if got := m.get(); got != 0 {
		t.Fatalf("empty: %v, want 0", got)
	}
	ms := time.Millisecond
	for _, d := range []time.Duration{5 * ms, 3 * ms, 4 * ms} {
		m.add(d)
	}
	if got := m.get(); got != 3*ms {
		t.Errorf("after 5, 3, 4 ms: %v, want the shortest, 3 ms", got)
	}
	// The window ends; the next keeps it as the previous one.
	m.add(6 * ms)
	m.add(10 * ms)
	if got := m.get(); got != 3*ms {
		t.Errorf("one into the next window: %v, want 3 ms, still remembered", got)
	}
	for range rttWindow - 1 {
		m.add(10 * ms)
	}
	if got := m.get(); got != 10*ms {
		t.Errorf("two windows of 10 ms later: %v, want 10 ms: the short ones forgotten", got)
	}
}

func TestDue(t *testing.T) {
	const ms = time.Millisecond
	now := time.Hour // on clock
	tests := []struct {
		name    string
		rtt     time.Duration
		conns   int
		starts  []time.Duration // ago
		wantOK  bool
		wantAt  time.Duration // from now; 0: none
		comment string
	}{
		{name: "near", rtt: 900 * time.Microsecond, conns: 17, starts: []time.Duration{10 * ms},
			comment: "below adaptFrom, wait for the round trip under way"},
		{name: "gap_passed", rtt: 10 * ms, conns: 17, starts: []time.Duration{2 * ms}, wantOK: true},
		{name: "gap_passed_newest", rtt: 10 * ms, conns: 17, starts: []time.Duration{9 * ms, 700 * time.Microsecond}, wantOK: true},
		{name: "too_soon", rtt: 10 * ms, conns: 17, starts: []time.Duration{9 * ms, 100 * time.Microsecond},
			wantAt: gap(10*ms) - 100*time.Microsecond, comment: "a gap after the newest"},
		{name: "no_connection", rtt: 10 * ms, conns: 2, starts: []time.Duration{9 * ms},
			comment: "one connection is the probe's: no round trip beyond max"},
		{name: "cap", rtt: 10 * ms, conns: 17, starts: make([]time.Duration, maxAdaptive),
			comment: "maxAdaptive out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pipe{max: 1, out: len(tt.starts), adapt: adaptive{conns: tt.conns}}
			for _, ago := range tt.starts {
				p.adapt.starts = append(p.adapt.starts, now-ago)
			}
			for range rttWindow {
				p.adapt.rtt.add(tt.rtt)
			}
			ok, at := p.due(now)
			var wantAt time.Duration
			if tt.wantAt != 0 {
				wantAt = now + tt.wantAt
			}
			if ok != tt.wantOK || at != wantAt {
				t.Errorf("due = %v, %v; want %v, %v (%s)", ok, at-now, tt.wantOK, wantAt-now, tt.comment)
			}
		})
	}
}
