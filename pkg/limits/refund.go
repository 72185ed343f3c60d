package limits

// Refund returns st at now with hits given back (Envoy's
// is_negative_hits): what Check.Refund does to a limit's state. A refund
// takes back hits that were counted, never more, so it can never leave
// more room than the limit has:
//
//   - fixed_window: the current window's count goes down, to 0 at least;
//     a count in debt (past the limit, see EvaluateUsage) is repaid
//     first, since the debt is the top of the count. Hits counted in an
//     earlier window are gone with it: nothing is given back.
//   - sliding_window: the current window's count goes down, and what the
//     refund has left over comes off the previous window's count, where
//     it weighs only by the part of that window still inside the sliding
//     one. Both stop at 0.
//   - sliding_log: the newest entries worth hits are dropped (the one
//     that straddles hits is cut down), so the hits that would have
//     stayed longest go first.
//   - token_bucket, leaky_bucket: the bucket refills by hits, debt first,
//     up to full (Burst), and no further.
//
// A refund on a fresh key, or on a limit of zero requests, changes
// nothing. A state left equal to a fresh key's is returned as the zero
// State, which stores may drop.
func (l *Limit) Refund(st State, now int64, hits uint64) State {
	if hits == 0 || l.Requests == 0 {
		return st
	}
	w := l.window.Microseconds()
	start := now - now%w
	switch l.Algorithm {
	case SlidingWindow:
		st = slideTo(st, start, w)
		back := min(st.Count, hits)
		st.Count -= back
		st.Prev -= min(st.Prev, hits-back)
		if st.Count == 0 && st.Prev == 0 {
			return State{}
		}
		st.Expire = start + 2*w
		return st
	case SlidingLog:
		return l.refundLog(st, now, hits)
	case TokenBucket, LeakyBucket:
		wt := uint64(w / l.tick)
		t := now / l.tick
		backlog := l.backlog(st, t, now)
		if hits >= ceilDiv(backlog, wt) {
			return State{} // full again
		}
		return l.BucketState(t, backlog-hits*wt)
	}
	if start, _ = l.Span(now); st.Start != start || st.Count <= hits {
		return State{}
	}
	st.Count -= hits
	return st
}

// refundLog drops the newest live entries of a sliding log worth hits,
// cutting down the one that straddles them. The entries are copied, so
// st's own are never changed.
func (l *Limit) refundLog(st State, now int64, hits uint64) State {
	w := l.window.Microseconds()
	i := 0
	for i < len(st.Log) && st.Log[i].At <= now-w {
		i++
	}
	live := append([]LogEntry(nil), st.Log[i:]...)
	for n := len(live); n > 0 && hits > 0; n = len(live) {
		e := &live[n-1]
		if e.Hits > hits {
			e.Hits -= hits
			break
		}
		hits -= e.Hits
		live = live[:n-1]
	}
	if len(live) == 0 {
		return State{}
	}
	return State{Log: live, Expire: live[len(live)-1].At + w}
}
