package memory

import "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"

// A mark is a fixed-size summary of one key's limits.State under one
// limit at one time, which never admits more than the state would: what
// the ghost table keeps of an evicted key. The fields mean, by algorithm:
//
//   - fixed window: the window's start and its hits (exact);
//   - sliding window: the current window's start, its hits and the
//     previous window's (exact);
//   - sliding log: every hit still in the window, moved to the time of
//     the latest one (so each counts at least as long as it did);
//   - buckets: the tick and the backlog at it, scaled as limits.Limit
//     scales it, debt included (exact; a token bucket's level is stored
//     as its backlog);
//   - concurrency: how many slots are taken, all expiring with the last
//     (their holds are forgotten: a refund frees none of them).
//
// The zero mark is a fresh key's. A mark is meaningful only with the limit
// it was made under, or one that limits.Limit.CountsLike it.
type mark struct {
	start  int64  // µs (windows, log) or tick (buckets)
	count  uint64 // hits, or the backlog for buckets
	prev   uint64 // hits of the previous window (sliding window)
	expire int64  // µs from which the mark is a fresh key's
}

// markOf summarizes st under l at now.
func markOf(l *limits.Limit, st limits.State, now int64) mark {
	if st.Expire <= now {
		return mark{}
	}
	w := l.Window().Microseconds()
	switch l.Algorithm {
	case limits.SlidingWindow:
		return mark{start: st.Start, count: st.Count, prev: st.Prev, expire: st.Expire}.at(l, now)
	case limits.SlidingLog:
		var m mark
		for _, e := range st.Log {
			if e.At > now-w {
				m.count += e.Hits
				m.start = max(m.start, e.At)
			}
		}
		if m.count == 0 {
			return mark{}
		}
		m.expire = m.start + w
		return m
	case limits.TokenBucket, limits.LeakyBucket:
		return drain(l, st.Start, l.Backlog(st), st.Expire, now)
	case limits.Concurrency:
		var m mark
		for _, s := range st.Slots {
			if s.Until > now {
				m.count++
				m.expire = max(m.expire, s.Until)
			}
		}
		return m
	}
	return mark{start: st.Start, count: st.Count, expire: st.Expire}
}

// at returns m as of now: expired marks are fresh, a sliding window moves
// to the current window, and a bucket drains.
func (m mark) at(l *limits.Limit, now int64) mark {
	if m.expire <= now {
		return mark{}
	}
	w := l.Window().Microseconds()
	switch l.Algorithm {
	case limits.SlidingWindow:
		cur := now - now%w
		switch m.start {
		case cur:
			return m
		case cur - w:
			return mark{start: cur, prev: m.count, expire: cur + w}
		}
		return mark{}
	case limits.TokenBucket, limits.LeakyBucket:
		return drain(l, m.start, m.count, m.expire, now)
	}
	return m
}

// drain returns the bucket mark of backlog b at tick t (expiring at
// expire), drained to now as limits.Limit's bucket drains it.
func drain(l *limits.Limit, t int64, b uint64, expire, now int64) mark {
	rate, tick := l.Requests, l.Tick()
	if rate == 0 {
		// A ban decides without state; keep it as it was, undrained.
		return mark{start: t, count: b, expire: expire}
	}
	if nt := now / tick; nt > t {
		if e := uint64(nt - t); e >= ceilDiv(b, rate) {
			b = 0
		} else {
			b -= e * rate
		}
		t = nt
	}
	if b == 0 {
		return mark{}
	}
	return mark{start: t, count: b, expire: t*tick + int64(ceilDiv(b, rate))*tick}
}

// state returns the limits.State that m stands for under l at now.
func (m mark) state(l *limits.Limit, now int64) limits.State {
	m = m.at(l, now)
	if m.expire <= now {
		return limits.State{}
	}
	switch l.Algorithm {
	case limits.SlidingLog:
		return limits.State{Log: []limits.LogEntry{{At: m.start, Hits: m.count}}, Expire: m.expire}
	case limits.TokenBucket, limits.LeakyBucket:
		return l.BucketState(m.start, m.count)
	case limits.Concurrency:
		slots := make([]limits.Slot, min(m.count, l.Requests+1))
		for i := range slots {
			slots[i].Until = m.expire
		}
		return limits.State{Slots: slots, Expire: m.expire}
	}
	return limits.State{Start: m.start, Count: m.count, Prev: m.prev, Expire: m.expire}
}

// union returns a mark that admits no more than either a or b under l
// at now: for each quantity, the larger.
func union(l *limits.Limit, a, b mark, now int64) mark {
	a, b = a.at(l, now), b.at(l, now)
	switch {
	case a.expire <= now:
		return b
	case b.expire <= now:
		return a
	}
	switch l.Algorithm {
	case limits.FixedWindow:
		// Both live means both in the current window.
		return mark{start: a.start, count: max(a.count, b.count), expire: a.expire}
	case limits.SlidingWindow:
		// at moved both to the current window.
		return mark{start: a.start, count: max(a.count, b.count), prev: max(a.prev, b.prev), expire: max(a.expire, b.expire)}
	case limits.SlidingLog:
		s := max(a.start, b.start)
		return mark{start: s, count: max(a.count, b.count), expire: s + l.Window().Microseconds()}
	case limits.Concurrency:
		return mark{count: max(a.count, b.count), expire: max(a.expire, b.expire)}
	}
	// Buckets: at drained both to the current tick.
	if a.count >= b.count {
		return a
	}
	return b
}

// hits returns at most how many hits m holds against a limit, whatever
// its numbers: for comparing with a limit of the same algorithm and window
// but other numbers.
func (m mark) hits(l *limits.Limit) uint64 {
	switch l.Algorithm {
	case limits.SlidingWindow:
		return max(m.count, m.prev)
	case limits.TokenBucket, limits.LeakyBucket:
		return ceilDiv(m.count, uint64(l.Window().Microseconds()/l.Tick()))
	}
	return m.count
}

// bound returns a mark under l for any state of l's algorithm and window
// that holds at most h hits and is a fresh key's from until: the most it
// could hold at now. It stands in for states known only by those two
// numbers (see ghostSet.h).
func bound(l *limits.Limit, h uint64, until, now int64) mark {
	if until <= now || h == 0 {
		return mark{}
	}
	w := l.Window().Microseconds()
	cur := now - now%w
	switch l.Algorithm {
	case limits.FixedWindow:
		start, end := l.Span(now)
		if until <= start {
			return mark{}
		}
		return mark{start: start, count: h, expire: end}
	case limits.SlidingWindow:
		// Fresh by until = its window's start + 2W: its hits are in this
		// window only if until is past the next window's start.
		switch {
		case until <= cur:
			return mark{}
		case until <= cur+w:
			return mark{start: cur, prev: h, expire: cur + w}
		}
		return mark{start: cur, count: h, prev: h, expire: cur + 2*w}
	case limits.SlidingLog:
		// Every hit is at or before now and leaves the window by until.
		at := min(now, until-w)
		return mark{start: at, count: h, expire: at + w}
	case limits.Concurrency:
		return mark{count: h, expire: until}
	}
	wt := uint64(w / l.Tick())
	b := capacity(l)
	if h < b/wt {
		b = h * wt
	}
	return drain(l, now/l.Tick(), b, now+1, now) // expire set by drain
}

// capacity is a bucket's capacity, scaled as limits.Limit scales it.
func capacity(l *limits.Limit) uint64 {
	return l.Burst * uint64(l.Window().Microseconds()/l.Tick())
}

func ceilDiv(a, b uint64) uint64 {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}
