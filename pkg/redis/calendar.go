package redis

import (
	"strconv"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// How apply.lua and refund.lua learn a calendar window (limits.Calendar):
// Lua has no time zone data, and the window must be the one that holds
// Redis's TIME, the clock that decides, not the sidecar's. So Go sends,
// in the record of a calendar check, the edges of the window that holds
// its own clock and of the windows on either side, and the script picks
// the window that holds TIME (lib.lua's calwin). The record keeps its
// size: a calendar check is a fixed window, which reads neither tick
// nor burst, so its window, tick and burst fields carry the edges:
//
//	window  −start (negative marks a calendar check; start > 0)
//	tick    end
//	burst   (start − prev)/1 s × 2^calShift + (next − end)/1 s
//
// in µs, where [start, end) holds the sidecar's clock, prev is the
// previous window's start and next the next window's end. Calendar
// edges are local midnights, whole seconds, and a window is at most 366
// days and an hour, below 2^calShift seconds, so the lengths pack
// exactly. Ordinary checks are unchanged and pay nothing.
const calShift = 25

// calendarFields returns the window, tick and burst fields of the record
// of a calendar check of l, for the sidecar's clock at (µs).
func calendarFields(l *limits.Limit, at int64) (w, tick, burst float64) {
	prev, start, end, next := l.Edges(at)
	const s = int64(time.Second / time.Microsecond)
	return -float64(start), float64(end), float64((start-prev)/s<<calShift + (next-end)/s)
}

// goMicros is the sidecar's clock in µs for a call whose ARGV[1] is now:
// that test clock if set, else the store's clock, else the time.
func (s *Store) goMicros(now string) int64 {
	if now != "" {
		if us, err := strconv.ParseInt(now, 10, 64); err == nil {
			return us
		}
	}
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return time.Now().UnixMicro()
}
