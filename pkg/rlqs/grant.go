package rlqs

import (
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/limits"
)

// grant is a bucket's live grant: a token bucket of granted tokens that
// Envoy may spend until until (the sidecar's clock), and where its hits
// were counted, to give back what Envoy did not spend. The zero value is
// no grant.
type grant struct {
	live    bool
	granted uint64
	used    uint64 // allowed reported since the grant was sent, less carried
	// carried is what of those allowed was charged to the grants it
	// replaced (bucket.carry) instead: an estimate, so Envoy may have
	// spent up to used + carried of this grant, and returns count that.
	carried uint64
	spent   bool // a report said Envoy ran out of it
	capped  bool // the store granted less than asked: the limit is running out
	until   time.Time
	every   time.Duration // its token bucket's fill interval, less a second
	// Where its hits were counted: the key and limit, the store's
	// receipt, and which store (the local one takes nothing back).
	key     string
	limit   *limits.Limit
	receipt int64
	from    source
	// dead is when Envoy can no longer spend it: its window's end, or a
	// bucket grant's time to live and the margin; end when it is expected
	// to stop: the margin before the window's end, or the time to live.
	dead, end time.Time
}

// start makes g a live grant of granted hits, taken as t under key, with
// none used yet; capped when the store granted less than asked. g.until
// is set already: a window's grant (onBucket false) is spent until then
// and expected to stop the margin before; a bucket's, expected to stop
// then, may be spent a margin longer.
func (g *grant) start(t taken, key string, granted uint64, capped, onBucket bool, margin time.Duration) {
	g.live, g.granted, g.used, g.carried, g.spent, g.capped = true, granted, 0, 0, false, capped
	g.key, g.limit, g.receipt, g.from = key, t.limit, t.out.GrantReceipt, t.from
	g.dead, g.end = g.until, g.until.Add(-margin)
	if onBucket {
		g.dead, g.end = g.until.Add(margin), g.until
	}
}

// unspent is what Envoy has surely not spent of g as of the last report:
// the grant less every request allowed since it was sent, those charged
// to the grant before it included.
func (g *grant) unspent() uint64 {
	return g.granted - min(g.used+g.carried, g.granted)
}

// stands reports whether g may still be spent at now, by the margin
// before it ends, and Envoy has not reported it all used or run out.
func (g *grant) stands(now time.Time, margin time.Duration) bool {
	return g.live && !g.spent && now.Before(g.until.Add(-margin)) && g.used < g.granted
}

// over reports whether g is live but Envoy can no longer spend it at
// now.
func (g *grant) over(now time.Time) bool {
	return g.live && !now.Before(g.dead)
}

// left is what of g Envoy has not reported allowed (those charged to the
// grant before it aside).
func (g *grant) left() uint64 {
	return g.granted - min(g.used, g.granted)
}

// ttl is the time to live g has at now, to end the margin before it
// does.
func (g *grant) ttl(now time.Time, margin time.Duration) time.Duration {
	return g.until.Sub(now) - margin
}

// back is hits of g to give back to the store where it was counted, once
// a report after after tells they were not spent.
func (g *grant) back(hits uint64, after time.Time) giveBack {
	return giveBack{hits: hits, key: g.key, limit: g.limit, receipt: g.receipt, after: after}
}

// giveBack is hits of a grant that may be given back to the store.
type giveBack struct {
	hits    uint64
	key     string
	limit   *limits.Limit
	receipt int64
	// after is when a report surely tells all Envoy spent of them: a
	// margin after Envoy stopped spending them (its assignment was
	// replaced, or ended), so that the report was sent after that.
	// Reports before it take what they allowed off hits, and wait.
	after time.Time
	// ends is when the hits stop counting: a window grant's window end,
	// after which giving them back would be a Redis call for nothing;
	// zero on a bucket, whose refill they join.
	ends time.Time
}

// taken is what a grant took: its check and outcome, and which store
// decided it (the memory store under --failure-mode local, with Redis
// down).
type taken struct {
	limit *limits.Limit
	out   limits.Outcome
	from  source
}

// source is the store a grant's hits were taken from.
type source uint8

const (
	fromShared source = iota // the shared store, which takes unspent hits back
	fromLocal                // the memory store (failure mode local), which takes nothing back
)

// reason is the metrics' reason for a token bucket granted from f.
func (f source) reason() string {
	if f == fromLocal {
		return "local"
	}
	return "grant"
}
